//go:build wasip1

// The contract's typed exports (`weir:stage/stage@0.1.0`, world `stage-typed`) written by hand
// on the component model's canonical ABI (32-bit memory): wit-bindgen-go's generated exports
// do not compile with Go's own `//go:wasmexport` (docs/languages/go.md).

package weir

import (
	"encoding/binary"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"unsafe"
)

// The runtime's own collection trigger is off: a collection it starts inside an allocation
// calls WASI imports (the clock, the scheduler's yield), and an allocation may be the host's
// `cabi_realloc` call while it lowers a call's arguments or a state call's answer, where the
// component model forbids leaving the instance (the call traps: "cannot leave component
// instance"; it happened about once in 30,000 calls of a stage that only reads its
// messages). The SDK collects at the end of an export call instead, when the heap has grown to
// twice what the last collection kept (at least 4 MiB), as GOGC=100 would.
func init() { debug.SetGCPercent(-1) }

const minHeapGoal = 4 << 20

var (
	heapGoal uint64 = minHeapGoal
	heap            = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
)

// collect runs a garbage collection when the heap has reached its goal, and sets the next.
func collect() {
	metrics.Read(heap)
	if heap[0].Value.Uint64() < heapGoal {
		return
	}
	runtime.GC()
	metrics.Read(heap)
	heapGoal = max(2*heap[0].Value.Uint64(), minHeapGoal)
}

// Host-written arguments (through cabi_realloc) and results the host reads: kept alive until
// the next call, since the garbage collector cannot see addresses held as integers.
var held [][]byte

// release lets the last call's buffers go (cleared, so the slice's array does not keep them).
func release() {
	clear(held)
	held = held[:0]
}

func addr(b []byte) uint32 { return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

func mem(p, n uint32) []byte {
	if n == 0 {
		return nil
	}
	// Linear memory starts at address 0: an address the host gave is an offset from nil.
	return unsafe.Slice((*byte)(unsafe.Add(nil, p)), n)
}

func get32(p uint32) uint32 { return binary.LittleEndian.Uint32(mem(p, 4)) }
func get64(p uint32) uint64 { return binary.LittleEndian.Uint64(mem(p, 8)) }
func put32(p, v uint32)     { binary.LittleEndian.PutUint32(mem(p, 4), v) }
func put64(p uint32, v uint64) {
	binary.LittleEndian.PutUint64(mem(p, 8), v)
}

// alloc returns the address of n zeroed bytes aligned to align, held until the next call.
func alloc(n, align uint32) uint32 {
	if n == 0 {
		return align
	}
	b := make([]byte, n+align)
	held = append(held, b)
	p := addr(b)
	return (p + align - 1) &^ (align - 1)
}

//go:wasmexport cabi_realloc
func cabiRealloc(old, oldSize, align, newSize uint32) uint32 {
	p := alloc(newSize, align)
	if old != 0 {
		copy(mem(p, newSize), mem(old, min(oldSize, newSize)))
	}
	return p
}

// The WASI adapter allocates its own state while Go's runtime starts (`_initialize`, on Go's
// system stack), before Go's heap can be used: it gets a static area instead. The function
// must stay a leaf with no runtime call (no panic, no bounds check): anything that may grow
// the stack traps there (`runtime.badsystemstack`). The adapter asks for 64 KiB twice (its
// state and its buffers, measured with Go 1.26 and wasmtime 48's adapter); an area that
// held one of them let the second run over Go's globals and the runtime's page allocator
// failed later ("fatal error: too many pages allocated in chunk?", about once in 500
// messages). A request past the area traps at once (a load outside linear memory) instead.
const adapterSize = 256 << 10

var adapterArea [adapterSize]byte
var adapterUsed uint32

//go:wasmexport cabi_realloc_adapter
//go:nosplit
func cabiReallocAdapter(old, oldSize, align, newSize uint32) uint32 {
	base := uint32(uintptr(unsafe.Pointer(&adapterArea[0])))
	p := (base + adapterUsed + align - 1) &^ (align - 1)
	if p-base+newSize > adapterSize {
		// A load at the last address of 32-bit memory: a trap, with no runtime call.
		return uint32(*(*byte)(unsafe.Pointer(uintptr(unsafe.Pointer(&adapterArea[0])) + uintptr(0xFFFF_FFFF-base))))
	}
	adapterUsed = p - base + newSize
	return p
}

func bytesAt(p uint32) []byte { // a list<u8> at p: (ptr, len)
	return append([]byte(nil), mem(get32(p), get32(p+4))...)
}

func stringAt(p uint32) string { return string(mem(get32(p), get32(p+4))) }

func optionBytesAt(p uint32) []byte { // option<list<u8>>: tag u8, then the list at +4
	if mem(p, 1)[0] == 0 {
		return nil
	}
	b := bytesAt(p + 4)
	if b == nil {
		b = []byte{}
	}
	return b
}

// message: key @0, value @12, headers @24, timestamp @32 (value @40), topic @48; 64 bytes.
func messageAt(p uint32) Message {
	m := Message{Key: optionBytesAt(p), Value: optionBytesAt(p + 12)}
	hp, hn := get32(p+24), get32(p+28)
	for i := uint32(0); i < hn; i++ {
		h := hp + 20*i
		m.Headers = append(m.Headers, Header{Key: stringAt(h), Value: optionBytesAt(h + 8)})
	}
	if mem(p+32, 1)[0] != 0 {
		ts := int64(get64(p + 40))
		m.Timestamp = &ts
	}
	if mem(p+48, 1)[0] != 0 {
		t := stringAt(p + 52)
		m.Topic = &t
	}
	return m
}

func putBytes(p uint32, b []byte) { // a list<u8> at p
	q := alloc(uint32(len(b)), 1)
	copy(mem(q, uint32(len(b))), b)
	put32(p, q)
	put32(p+4, uint32(len(b)))
}

func putOptionBytes(p uint32, b []byte) {
	if b == nil {
		return // tag 0: absent
	}
	mem(p, 1)[0] = 1
	putBytes(p+4, b)
}

func putMessage(p uint32, m *Message) {
	putOptionBytes(p, m.Key)
	putOptionBytes(p+12, m.Value)
	if n := uint32(len(m.Headers)); n > 0 {
		hp := alloc(20*n, 4)
		for i, h := range m.Headers {
			q := hp + 20*uint32(i)
			putBytes(q, []byte(h.Key))
			putOptionBytes(q+8, h.Value)
		}
		put32(p+24, hp)
		put32(p+28, n)
	}
	if m.Timestamp != nil {
		mem(p+32, 1)[0] = 1
		put64(p+40, uint64(*m.Timestamp))
	}
	if m.Topic != nil {
		mem(p+48, 1)[0] = 1
		putBytes(p+52, []byte(*m.Topic))
	}
}

//go:wasmexport weir:stage/stage@0.1.0#init
func exportInit(ptr, n uint32) uint32 {
	release()
	cfg := Config{}
	for i := uint32(0); i < n; i++ {
		e := ptr + 16*i
		cfg[stringAt(e)] = stringAt(e + 8)
	}
	ret := alloc(12, 4) // result<_, string>: tag, then the error at +4
	if err := initStage(cfg); err != nil {
		mem(ret, 1)[0] = 1
		putBytes(ret+4, []byte(err.Error()))
	}
	collect()
	return ret
}

//go:wasmexport weir:stage/stage@0.1.0#process
func exportProcess(args uint32) uint32 {
	m := messageAt(args)
	meta := Metadata{
		Topic:     stringAt(args + 64),
		Partition: int32(get32(args + 72)),
		Offset:    int64(get64(args + 80)),
	}
	release() // the arguments are copied out: what the host wrote can go
	out := process(&m, meta)
	ret := alloc(12, 4) // outcome: tag, then the case's list or string at +4
	mem(ret, 1)[0] = uint8(out.kind)
	switch out.kind {
	case KindNext:
		n := uint32(len(out.next))
		lp := alloc(64*n, 8)
		for i := range out.next {
			putMessage(lp+64*uint32(i), &out.next[i])
		}
		put32(ret+4, lp)
		put32(ret+8, n)
	case KindReject, KindFail:
		putBytes(ret+4, []byte(out.reason))
	}
	collect()
	return ret
}
