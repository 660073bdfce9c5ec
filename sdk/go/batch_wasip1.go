//go:build wasip1

// The packed fast path (`weir:stage/batch@0.1.0#process-batch`, world `stage-fast`): one call
// per batch, in the byte format the contract's `batch` interface documents (wit/weir.wit).
// The host uses it whenever a component exports it; `init` still comes from the typed export.

package weir

import (
	"encoding/binary"
	"math"
)

const (
	batchMagic   = 0x5745_4952 // "WEIR"
	batchVersion = 1
	absent32     = 0xFFFF_FFFF
	absentTime   = math.MinInt64
)

var le = binary.LittleEndian

// batchReader reads the host's batch; a malformed one is the host's bug and traps.
type batchReader struct {
	b   []byte
	pos int
}

func (r *batchReader) u32() uint32 {
	v := le.Uint32(r.b[r.pos:])
	r.pos += 4
	return v
}

func (r *batchReader) u64() uint64 {
	v := le.Uint64(r.b[r.pos:])
	r.pos += 8
	return v
}

// bytes returns n bytes of the input (not copied: the input stays the stage's for as long as
// it keeps a reference), nil for ABSENT.
func (r *batchReader) bytes(n uint32) []byte {
	if n == absent32 {
		return nil
	}
	v := r.b[r.pos : r.pos+int(n) : r.pos+int(n)]
	r.pos += int(n)
	return v
}

// batchWriter builds the result: the verdicts first, the bodies after them.
type batchWriter struct {
	verdicts []byte
	bodies   []byte
}

func (w *batchWriter) put32(v uint32) { w.bodies = le.AppendUint32(w.bodies, v) }

func (w *batchWriter) putLen(b []byte, isNil bool) {
	if isNil {
		w.put32(absent32)
	} else {
		w.put32(uint32(len(b)))
	}
}

func (w *batchWriter) reason(s string) {
	w.put32(uint32(len(s)))
	w.bodies = append(w.bodies, s...)
}

func (w *batchWriter) message(m *Message) {
	ts := int64(absentTime)
	if m.Timestamp != nil {
		ts = *m.Timestamp
	}
	w.bodies = le.AppendUint64(w.bodies, uint64(ts))
	if m.Topic != nil {
		w.put32(uint32(len(*m.Topic)))
	} else {
		w.put32(absent32)
	}
	w.putLen(m.Key, m.Key == nil)
	w.putLen(m.Value, m.Value == nil)
	w.put32(uint32(len(m.Headers)))
	if m.Topic != nil {
		w.bodies = append(w.bodies, *m.Topic...)
	}
	w.bodies = append(w.bodies, m.Key...)
	w.bodies = append(w.bodies, m.Value...)
	for _, h := range m.Headers {
		w.put32(uint32(len(h.Key)))
		w.putLen(h.Value, h.Value == nil)
		w.bodies = append(w.bodies, h.Key...)
		w.bodies = append(w.bodies, h.Value...)
	}
}

//go:wasmexport weir:stage/batch@0.1.0#process-batch
func exportProcessBatch(ptr, n uint32) uint32 {
	// The input stays alive while the stage's messages point into it (they are not copied).
	r := batchReader{b: mem(ptr, n)}
	release()
	if r.u32() != batchMagic || r.u32() != batchVersion {
		panic("weir: the host sent a batch this SDK does not read (magic or version)")
	}
	count := r.u32()
	meta := Metadata{Topic: string(r.bytes(r.u32()))}
	meta.Partition = int32(r.u32())
	w := batchWriter{verdicts: make([]byte, 0, count), bodies: make([]byte, 0, 64)}
	var m Message
	for i := uint32(0); i < count; i++ {
		meta.Offset = int64(r.u64())
		ts := int64(r.u64())
		kn, vn, hn := r.u32(), r.u32(), r.u32()
		m = Message{Key: r.bytes(kn), Value: r.bytes(vn)}
		if ts != absentTime {
			m.Timestamp = &ts
		}
		if hn > 0 {
			m.Headers = make([]Header, hn)
			for j := range m.Headers {
				k, v := r.u32(), r.u32()
				m.Headers[j] = Header{Key: string(r.bytes(k)), Value: r.bytes(v)}
			}
		}
		out := process(&m, meta)
		w.verdicts = append(w.verdicts, uint8(out.kind))
		switch out.kind {
		case KindNext:
			w.put32(uint32(len(out.next)))
			for j := range out.next {
				w.message(&out.next[j])
			}
		case KindReject:
			w.reason(out.reason)
		case KindFail:
			w.reason(out.reason)
		}
		if out.kind == KindFail {
			break // answering stops after the first fail
		}
	}
	res := make([]byte, 0, 4+len(w.verdicts)+len(w.bodies))
	res = le.AppendUint32(res, uint32(len(w.verdicts)))
	res = append(res, w.verdicts...)
	res = append(res, w.bodies...)
	held = append(held, res)
	ret := alloc(8, 4) // list<u8>: (ptr, len)
	put32(ret, addr(res))
	put32(ret+4, uint32(len(res)))
	collect()
	return ret
}
