//go:build !wasip1

// The SDK's API reference by example: `go doc -all weir.dev/sdk` shows each beside its
// function, and `go test` runs them natively (state in memory).

package weir_test

import (
	"errors"
	"fmt"

	weir "weir.dev/sdk"
)

func ExampleStage() {
	// In the stage's package: func init() { weir.Stage(upper) }
	weir.Stage(func(m *weir.Message, _ weir.Metadata) weir.Outcome {
		if m.Value == nil {
			return weir.Reject("no value")
		}
		return weir.Keep()
	})
	fmt.Println(weir.Call(weir.Message{}, weir.Metadata{}))
	// Output: reject: no value
}

func ExampleStageWithInit() {
	var prefix string
	weir.StageWithInit(func(c weir.Config) error {
		p, ok := c["prefix"]
		if !ok {
			return errors.New("missing config key `prefix`")
		}
		prefix = p
		return nil
	}, func(m *weir.Message, _ weir.Metadata) weir.Outcome {
		out := *m
		out.Value = append([]byte(prefix), m.Value...)
		return weir.Next(out)
	})
	fmt.Println(weir.Init(weir.Config{}))
	_ = weir.Init(weir.Config{"prefix": "seen: "})
	fmt.Printf("%s\n", weir.Call(weir.Message{Value: []byte("x")}, weir.Metadata{}).Messages()[0].Value)
	// Output:
	// missing config key `prefix`
	// seen: x
}

func ExampleInit() {
	weir.StageWithInit(func(c weir.Config) error {
		if c["mode"] != "strict" {
			return fmt.Errorf("mode %q: expected strict", c["mode"])
		}
		return nil
	}, func(*weir.Message, weir.Metadata) weir.Outcome { return weir.Keep() })
	fmt.Println(weir.Init(weir.Config{"mode": "loose"}))
	// Output: mode "loose": expected strict
}

func ExampleCall() {
	weir.Stage(func(m *weir.Message, meta weir.Metadata) weir.Outcome {
		return weir.Reject(fmt.Sprintf("offset %d of %s/%d", meta.Offset, meta.Topic, meta.Partition))
	})
	fmt.Println(weir.Call(weir.Message{}, weir.Metadata{Topic: "orders", Partition: 2, Offset: 7}))
	// Output: reject: offset 7 of orders/2
}

func ExampleKeep() {
	fmt.Println(weir.Keep())
	// Output: keep
}

func ExampleNext() {
	m := weir.Message{Value: []byte("a,b")}
	a, b := m, m
	a.Value, b.Value = []byte("a"), []byte("b")
	fmt.Println(weir.Next(a, b))
	// Output: next(2)
}

func ExampleDrop() {
	fmt.Println(weir.Drop(), weir.Drop().Kind())
	// Output: next(0) next
}

func ExampleReject() {
	fmt.Println(weir.Reject("not a JSON object"))
	// Output: reject: not a JSON object
}

func ExampleFail() {
	fmt.Println(weir.Fail("the schema is gone"))
	// Output: fail: the schema is gone
}

func ExampleOutcome_Kind() {
	fmt.Println(weir.Reject("r").Kind() == weir.KindReject)
	// Output: true
}

func ExampleOutcome_Messages() {
	o := weir.Next(weir.Message{Key: []byte("k")})
	fmt.Printf("%s\n", o.Messages()[0].Key)
	// Output: k
}

func ExampleOutcome_Reason() {
	fmt.Println(weir.Fail("stop").Reason())
	// Output: stop
}

func ExampleOutcome_String() {
	fmt.Println(weir.Next().String())
	// Output: next(0)
}

func ExampleKind_String() {
	fmt.Println(weir.KindFail.String())
	// Output: fail
}

func ExampleMessage_Header() {
	m := weir.Message{Headers: []weir.Header{{Key: "trace", Value: []byte("t-1")}, {Key: "empty"}}}
	v, ok := m.Header("trace")
	_, absent := m.Header("empty")
	_, none := m.Header("other")
	fmt.Printf("%s %v %v %v\n", v, ok, absent, none)
	// Output: t-1 true true false
}

func ExampleMessage_WithHeader() {
	m := weir.Message{Value: []byte("v")}
	tagged := m.WithHeader("checked", []byte("yes"))
	fmt.Println(len(m.Headers), len(tagged.Headers), tagged.Headers[0].Key)
	// Output: 0 1 checked
}

func ExampleOpenBucket() {
	weir.ResetState()
	// Declared in the YAML: `state: { buckets: [seen] }`.
	seen, err := weir.OpenBucket("seen")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(seen.Name())
	// Output: seen
}

func ExampleBucket_Name() {
	b, _ := weir.OpenBucket("totals")
	fmt.Println(b.Name())
	// Output: totals
}

func ExampleBucket_Get() {
	weir.ResetState()
	b, _ := weir.OpenBucket("last")
	_, ok, _ := b.Get("k")
	_ = b.Set("k", []byte("v1"))
	v, ok2, _ := b.Get("k")
	fmt.Printf("%v %s %v\n", ok, v, ok2)
	// Output: false v1 true
}

func ExampleBucket_Set() {
	weir.ResetState()
	b, _ := weir.OpenBucket("last")
	_ = b.Set("k", []byte(`{"seen":1}`))
	v, _, _ := b.Get("k")
	fmt.Printf("%s\n", v)
	// Output: {"seen":1}
}

func ExampleBucket_Delete() {
	weir.ResetState()
	b, _ := weir.OpenBucket("last")
	_ = b.Set("k", []byte("v"))
	_ = b.Delete("k")
	ok, _ := b.Exists("k")
	fmt.Println(ok)
	// Output: false
}

func ExampleBucket_Exists() {
	weir.ResetState()
	b, _ := weir.OpenBucket("seen")
	first, _ := b.Exists("order-1")
	_ = b.Set("order-1", nil)
	again, _ := b.Exists("order-1")
	fmt.Println(first, again)
	// Output: false true
}

func ExampleBucket_Increment() {
	weir.ResetState()
	b, _ := weir.OpenBucket("totals")
	_, _ = b.Increment("alice", 5)
	total, _ := b.Increment("alice", -2)
	_ = b.Set("text", []byte("abc"))
	_, err := b.Increment("text", 1)
	fmt.Println(total, err != nil)
	// Output: 3 true
}

func ExampleBucket_GetInt() {
	weir.ResetState()
	b, _ := weir.OpenBucket("totals")
	_, _ = b.Increment("bob", 40)
	n, ok, _ := b.GetInt("bob")
	fmt.Println(n, ok)
	// Output: 40 true
}

func ExampleBucket_SetInt() {
	weir.ResetState()
	b, _ := weir.OpenBucket("totals")
	_ = b.SetInt("carol", -7)
	n, _ := b.Increment("carol", 1)
	fmt.Println(n)
	// Output: -6
}

func ExampleBucket_GetMany() {
	weir.ResetState()
	b, _ := weir.OpenBucket("last")
	_ = b.Set("a", []byte("1"))
	_ = b.Set("empty", []byte{})
	vs, _ := b.GetMany([]string{"a", "missing", "empty"})
	fmt.Printf("%s %v %v\n", vs[0], vs[1] == nil, vs[2] != nil)
	// Output: 1 true true
}

func ExampleBucket_SetMany() {
	weir.ResetState()
	b, _ := weir.OpenBucket("last")
	_ = b.SetMany([]weir.KeyValue{{Key: "a", Value: []byte("1")}, {Key: "a", Value: []byte("2")}})
	v, _, _ := b.Get("a")
	fmt.Printf("%s\n", v)
	// Output: 2
}

func ExampleBucket_DeleteMany() {
	weir.ResetState()
	b, _ := weir.OpenBucket("last")
	_ = b.SetMany([]weir.KeyValue{{Key: "a"}, {Key: "b"}, {Key: "c"}})
	_ = b.DeleteMany([]string{"a", "c"})
	keys, _ := b.Keys()
	fmt.Println(keys)
	// Output: [b]
}

func ExampleBucket_Keys() {
	weir.ResetState()
	b, _ := weir.OpenBucket("last")
	_ = b.SetMany([]weir.KeyValue{{Key: "b"}, {Key: "a"}})
	keys, _ := b.Keys()
	fmt.Println(keys)
	// Output: [a b]
}

func ExampleStateError_Error() {
	err := error(&weir.StateError{Kind: weir.AccessDenied})
	var se *weir.StateError
	fmt.Println(errors.As(err, &se), se.Kind == weir.AccessDenied, err)
	// Output: true true bucket not declared for this stage (state.buckets in the YAML)
}

func ExampleResetState() {
	b, _ := weir.OpenBucket("seen")
	_ = b.Set("k", nil)
	weir.ResetState()
	b, _ = weir.OpenBucket("seen")
	ok, _ := b.Exists("k")
	fmt.Println(ok)
	// Output: false
}
