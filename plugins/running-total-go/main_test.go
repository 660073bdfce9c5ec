//go:build !wasip1

package main

import (
	"encoding/json"
	"testing"

	weir "weir.dev/sdk"
)

// The stage natively, its bucket in memory: totals per key, rejects that count nothing.
func TestTotalsPerKeyInMemory(t *testing.T) {
	weir.ResetState()
	if err := weir.Init(weir.Config{}); err != nil {
		t.Fatal(err)
	}
	run := func(key *string, value string) weir.Outcome {
		m := weir.Message{Value: []byte(value)}
		if key != nil {
			m.Key = []byte(*key)
		}
		return weir.Call(m, weir.Metadata{})
	}
	total := func(o weir.Outcome) int64 {
		t.Helper()
		if o.Kind() != weir.KindNext || len(o.Messages()) != 1 {
			t.Fatalf("not one message out: %v", o)
		}
		var doc struct{ Total int64 }
		if err := json.Unmarshal(o.Messages()[0].Value, &doc); err != nil {
			t.Fatal(err)
		}
		return doc.Total
	}
	a, b := "alice", "bob"
	if got := total(run(&a, `{"amount": 5}`)); got != 5 {
		t.Fatalf("alice: %d", got)
	}
	if got := total(run(&b, `{"amount": -2}`)); got != -2 {
		t.Fatalf("bob: %d", got)
	}
	for _, bad := range []string{`{"amount": 1.5}`, `{"amount": "3"}`, `[1]`, `{"amount": 1e3}`, `nope`} {
		if o := run(&a, bad); o.Kind() != weir.KindReject {
			t.Fatalf("%s: %v", bad, o)
		}
	}
	if o := run(nil, `{"amount": 1}`); o.Kind() != weir.KindReject {
		t.Fatalf("no key: %v", o)
	}
	// Signed 64-bit, wrapping (as the host's increment): 5 + (2^63 - 1) = -2^63 + 4.
	if got := total(run(&a, `{"amount": 9223372036854775807}`)); got != -9223372036854775808+4 {
		t.Fatalf("alice wraps: %d", got)
	}
	totals, _ := weir.OpenBucket("totals")
	if n, _, _ := totals.GetInt("bob"); n != -2 {
		t.Fatalf("stored bob: %d", n)
	}
}
