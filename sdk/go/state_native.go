//go:build !wasip1

// Natively (go test) buckets live in memory, shared by the process: ResetState empties them.

package weir

import (
	"encoding/binary"
	"sort"
	"sync"
)

var native = struct {
	sync.Mutex
	buckets map[string]map[string][]byte
}{buckets: map[string]map[string][]byte{}}

// ResetState empties the in-memory buckets and forgets the opened ones, so that each test
// starts without state (natively only).
func ResetState() {
	native.Lock()
	defer native.Unlock()
	native.buckets = map[string]map[string][]byte{}
	buckets = map[string]*Bucket{}
}

func kvOpen(string) (uint32, error) { return 0, nil }

func kvData(b *Bucket) map[string][]byte {
	d, ok := native.buckets[b.name]
	if !ok {
		d = map[string][]byte{}
		native.buckets[b.name] = d
	}
	return d
}

func kvGet(b *Bucket, key string) ([]byte, bool, error) {
	native.Lock()
	defer native.Unlock()
	v, ok := kvData(b)[key]
	return append([]byte{}, v...), ok, nil
}

func kvSet(b *Bucket, key string, value []byte) error {
	native.Lock()
	defer native.Unlock()
	kvData(b)[key] = append([]byte{}, value...)
	return nil
}

func kvDelete(b *Bucket, key string) error {
	native.Lock()
	defer native.Unlock()
	delete(kvData(b), key)
	return nil
}

func kvExists(b *Bucket, key string) (bool, error) {
	native.Lock()
	defer native.Unlock()
	_, ok := kvData(b)[key]
	return ok, nil
}

func kvIncrement(b *Bucket, key string, delta int64) (int64, error) {
	native.Lock()
	defer native.Unlock()
	d := kvData(b)
	var n int64
	if v, ok := d[key]; ok {
		if len(v) != 8 {
			return 0, &StateError{Other, "increment: the value is not a number (8 little-endian bytes)"}
		}
		n = int64(binary.LittleEndian.Uint64(v))
	}
	n += delta
	d[key] = binary.LittleEndian.AppendUint64(nil, uint64(n))
	return n, nil
}

func kvGetMany(b *Bucket, keys []string) ([][]byte, error) {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		if v, ok, _ := kvGet(b, k); ok {
			out[i] = v
		}
	}
	return out, nil
}

func kvSetMany(b *Bucket, pairs []KeyValue) error {
	for _, p := range pairs {
		_ = kvSet(b, p.Key, p.Value)
	}
	return nil
}

func kvDeleteMany(b *Bucket, keys []string) error {
	for _, k := range keys {
		_ = kvDelete(b, k)
	}
	return nil
}

func kvListKeys(b *Bucket, _ *string) ([]string, *string, error) {
	native.Lock()
	defer native.Unlock()
	keys := make([]string, 0, len(kvData(b)))
	for k := range kvData(b) {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys, nil, nil
}
