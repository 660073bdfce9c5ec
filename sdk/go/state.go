package weir

import (
	"encoding/binary"
	"strconv"
)

// Durable per-key state: the buckets a stage declares under `state` in the pipeline YAML
// (`state: { buckets: [totals] }`).
//
// A bucket belongs to the stage and to the source partition of the message being processed:
// the messages of one key meet their state in one place, and it moves with the partition. A
// message sees the writes of every message before it. Its writes are kept only when its
// outcome is delivered (reject included); a message that fails, traps or times out leaves
// none. Under `delivery: exactly-once` the state, the outputs and the committed offsets move
// together (docs/state.md). This is the host's `wasi:keyvalue@0.2.0-draft2` (store, atomics,
// batch). Reads and writes need a message in progress (not in init); natively (go test) the
// buckets live in memory and [ResetState] empties them.
//
//	totals, err := weir.OpenBucket("totals")
//	if err != nil {
//		return weir.Fail(err.Error())
//	}
//	total, err := totals.Increment(key, amount)

// ErrorKind is what a state call answered instead of a value.
type ErrorKind uint8

const (
	// NoSuchStore: no bucket has that name.
	NoSuchStore ErrorKind = iota
	// AccessDenied: the bucket is not declared under the stage's `state.buckets`.
	AccessDenied
	// Other: a value over `state.max_value`, a store error, Increment on a value that is
	// not a number.
	Other
)

// StateError is the error every state call returns when the host answers one.
type StateError struct {
	Kind    ErrorKind
	Message string
}

func (e *StateError) Error() string {
	switch e.Kind {
	case NoSuchStore:
		return "no such bucket"
	case AccessDenied:
		return "bucket not declared for this stage (state.buckets in the YAML)"
	}
	return e.Message
}

// Bucket is one of the stage's buckets; get one with [OpenBucket].
type Bucket struct {
	name   string
	handle uint32
}

// KeyValue is one pair for [Bucket.SetMany].
type KeyValue struct {
	Key   string
	Value []byte
}

var buckets = map[string]*Bucket{}

// OpenBucket opens the bucket `name` (declared under the stage's `state.buckets`). The
// instance keeps the host's handle: opening it again, on every message, costs a map lookup.
func OpenBucket(name string) (*Bucket, error) {
	if b, ok := buckets[name]; ok {
		return b, nil
	}
	h, err := kvOpen(name)
	if err != nil {
		return nil, err
	}
	b := &Bucket{name: name, handle: h}
	buckets[name] = b
	return b, nil
}

// Name is the bucket's name.
func (b *Bucket) Name() string { return b.name }

// Get returns the value of key, and whether it has one.
func (b *Bucket) Get(key string) ([]byte, bool, error) { return kvGet(b, key) }

// Set sets key to value.
func (b *Bucket) Set(key string, value []byte) error { return kvSet(b, key, value) }

// Delete removes key (a tombstone in the changelog).
func (b *Bucket) Delete(key string) error { return kvDelete(b, key) }

// Exists says whether key has a value.
func (b *Bucket) Exists(key string) (bool, error) { return kvExists(b, key) }

// Increment adds delta to the number at key (absent: 0) and returns the sum (signed 64-bit,
// wrapping). A value that is not such a number (8 little-endian bytes) is an [Other] error.
func (b *Bucket) Increment(key string, delta int64) (int64, error) {
	return kvIncrement(b, key, delta)
}

// GetInt returns the number at key as [Bucket.Increment] and [Bucket.SetInt] store it, and
// whether it has one.
func (b *Bucket) GetInt(key string) (int64, bool, error) {
	v, ok, err := b.Get(key)
	if err != nil || !ok {
		return 0, false, err
	}
	if len(v) != 8 {
		return 0, false, &StateError{Other, "key " + strconv.Quote(key) + " holds " + strconv.Itoa(len(v)) + " bytes, not a number"}
	}
	return int64(binary.LittleEndian.Uint64(v)), true, nil
}

// SetInt sets key to a signed 64-bit number (as [Bucket.Increment] stores it).
func (b *Bucket) SetInt(key string, v int64) error {
	return b.Set(key, binary.LittleEndian.AppendUint64(nil, uint64(v)))
}

// GetMany returns the values of keys in one host call, in order: nil for a key without one
// (an empty value that is there is a non-nil empty slice).
func (b *Bucket) GetMany(keys []string) ([][]byte, error) { return kvGetMany(b, keys) }

// SetMany sets many keys in one host call, in order (a later pair of a key wins).
func (b *Bucket) SetMany(pairs []KeyValue) error { return kvSetMany(b, pairs) }

// DeleteMany removes many keys in one host call.
func (b *Bucket) DeleteMany(keys []string) error { return kvDeleteMany(b, keys) }

// Keys returns every key of the bucket in this partition, in order (a page per host call).
func (b *Bucket) Keys() ([]string, error) {
	var all []string
	var cursor *string
	for {
		page, next, err := kvListKeys(b, cursor)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == nil {
			return all, nil
		}
		cursor = next
	}
}
