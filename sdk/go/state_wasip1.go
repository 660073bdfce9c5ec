//go:build wasip1

// The state API on the host's `wasi:keyvalue@0.2.0-draft2` imports, on the canonical ABI by
// hand (32-bit memory). The host writes each result into `ret`; a list or string in it lives
// in memory the host asked `cabi_realloc` for, held until the next call.

package weir

import (
	"runtime"
	"unsafe"
)

//go:wasmimport wasi:keyvalue/store@0.2.0-draft2 open
func kvImportOpen(name, n, ret uint32)

//go:wasmimport wasi:keyvalue/store@0.2.0-draft2 [method]bucket.get
func kvImportGet(bucket, key, n, ret uint32)

//go:wasmimport wasi:keyvalue/store@0.2.0-draft2 [method]bucket.set
func kvImportSet(bucket, key, n, value, vn, ret uint32)

//go:wasmimport wasi:keyvalue/store@0.2.0-draft2 [method]bucket.delete
func kvImportDelete(bucket, key, n, ret uint32)

//go:wasmimport wasi:keyvalue/store@0.2.0-draft2 [method]bucket.exists
func kvImportExists(bucket, key, n, ret uint32)

//go:wasmimport wasi:keyvalue/store@0.2.0-draft2 [method]bucket.list-keys
func kvImportListKeys(bucket, some, cursor, n, ret uint32)

//go:wasmimport wasi:keyvalue/atomics@0.2.0-draft2 increment
func kvImportIncrement(bucket, key, n uint32, delta int64, ret uint32)

//go:wasmimport wasi:keyvalue/batch@0.2.0-draft2 get-many
func kvImportGetMany(bucket, keys, n, ret uint32)

//go:wasmimport wasi:keyvalue/batch@0.2.0-draft2 set-many
func kvImportSetMany(bucket, pairs, n, ret uint32)

//go:wasmimport wasi:keyvalue/batch@0.2.0-draft2 delete-many
func kvImportDeleteMany(bucket, keys, n, ret uint32)

// ret is where the host writes a call's result (the largest, increment's, is 24 bytes at
// alignment 8).
var ret [4]uint64

func retAddr() uint32 { return uint32(uintptr(unsafe.Pointer(&ret[0]))) }

func strAddr(s string) uint32 { return uint32(uintptr(unsafe.Pointer(unsafe.StringData(s)))) }

// stateError reads the `error` variant at p: tag, then other's string at +4.
func stateError(p uint32) error {
	switch mem(p, 1)[0] {
	case 0:
		return &StateError{Kind: NoSuchStore}
	case 1:
		return &StateError{Kind: AccessDenied}
	}
	return &StateError{Kind: Other, Message: stringAt(p + 4)}
}

// unit reads a result<_, error> (or the error of any result whose payload is at +4).
func unit(r uint32) error {
	if mem(r, 1)[0] != 0 {
		return stateError(r + 4)
	}
	return nil
}

func kvOpen(name string) (uint32, error) {
	r := retAddr()
	kvImportOpen(strAddr(name), uint32(len(name)), r)
	runtime.KeepAlive(name)
	if err := unit(r); err != nil {
		return 0, err
	}
	return get32(r + 4), nil
}

func kvGet(b *Bucket, key string) ([]byte, bool, error) {
	r := retAddr()
	kvImportGet(b.handle, strAddr(key), uint32(len(key)), r)
	runtime.KeepAlive(key)
	if err := unit(r); err != nil {
		return nil, false, err
	}
	if mem(r+4, 1)[0] == 0 {
		return nil, false, nil
	}
	v := bytesAt(r + 8)
	if v == nil {
		v = []byte{}
	}
	return v, true, nil
}

func kvSet(b *Bucket, key string, value []byte) error {
	r := retAddr()
	kvImportSet(b.handle, strAddr(key), uint32(len(key)), addr(value), uint32(len(value)), r)
	runtime.KeepAlive(key)
	runtime.KeepAlive(value)
	return unit(r)
}

func kvDelete(b *Bucket, key string) error {
	r := retAddr()
	kvImportDelete(b.handle, strAddr(key), uint32(len(key)), r)
	runtime.KeepAlive(key)
	return unit(r)
}

func kvExists(b *Bucket, key string) (bool, error) {
	r := retAddr()
	kvImportExists(b.handle, strAddr(key), uint32(len(key)), r)
	runtime.KeepAlive(key)
	if err := unit(r); err != nil {
		return false, err
	}
	return mem(r+4, 1)[0] != 0, nil
}

func kvIncrement(b *Bucket, key string, delta int64) (int64, error) {
	r := retAddr()
	kvImportIncrement(b.handle, strAddr(key), uint32(len(key)), delta, r)
	runtime.KeepAlive(key)
	if mem(r, 1)[0] != 0 {
		return 0, stateError(r + 8)
	}
	return int64(get64(r + 8)), nil
}

// stringList lays keys out as a list<string> (ptr, len pairs), held until the next call.
func stringList(keys []string) uint32 {
	p := alloc(8*uint32(len(keys)), 4)
	for i, k := range keys {
		put32(p+8*uint32(i), strAddr(k))
		put32(p+8*uint32(i)+4, uint32(len(k)))
	}
	return p
}

func kvGetMany(b *Bucket, keys []string) ([][]byte, error) {
	r := retAddr()
	kvImportGetMany(b.handle, stringList(keys), uint32(len(keys)), r)
	runtime.KeepAlive(keys)
	if err := unit(r); err != nil {
		return nil, err
	}
	// list<tuple<string, option<list<u8>>>>: 20 bytes each, in the order asked.
	lp, n := get32(r+4), get32(r+8)
	out := make([][]byte, len(keys))
	for i := uint32(0); i < n && int(i) < len(keys); i++ {
		out[i] = optionBytesAt(lp + 20*i + 8)
	}
	return out, nil
}

func kvSetMany(b *Bucket, pairs []KeyValue) error {
	// list<tuple<string, list<u8>>>: 16 bytes each.
	p := alloc(16*uint32(len(pairs)), 4)
	for i, kv := range pairs {
		q := p + 16*uint32(i)
		put32(q, strAddr(kv.Key))
		put32(q+4, uint32(len(kv.Key)))
		put32(q+8, addr(kv.Value))
		put32(q+12, uint32(len(kv.Value)))
	}
	r := retAddr()
	kvImportSetMany(b.handle, p, uint32(len(pairs)), r)
	runtime.KeepAlive(pairs)
	return unit(r)
}

func kvDeleteMany(b *Bucket, keys []string) error {
	r := retAddr()
	kvImportDeleteMany(b.handle, stringList(keys), uint32(len(keys)), r)
	runtime.KeepAlive(keys)
	return unit(r)
}

func kvListKeys(b *Bucket, cursor *string) ([]string, *string, error) {
	var some, cp, cn uint32
	if cursor != nil {
		some, cp, cn = 1, strAddr(*cursor), uint32(len(*cursor))
	}
	r := retAddr()
	kvImportListKeys(b.handle, some, cp, cn, r)
	runtime.KeepAlive(cursor)
	if err := unit(r); err != nil {
		return nil, nil, err
	}
	// key-response: keys (list<string>) at +4, cursor (option<string>) at +12.
	kp, kn := get32(r+4), get32(r+8)
	keys := make([]string, kn)
	for i := range keys {
		keys[i] = stringAt(kp + 8*uint32(i))
	}
	var next *string
	if mem(r+12, 1)[0] != 0 {
		s := stringAt(r + 16)
		next = &s
	}
	return keys, next, nil
}
