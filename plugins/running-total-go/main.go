// A running total per key in Go (the same job as plugins/running-total, in Rust, and
// plugins/running-total-{c,python,js}): each message's value is a JSON object with an integer
// field (config `field`, default `amount`); the stage adds it to its key's total in the state
// bucket `totals` and emits the message with the field `total` set to the new total. A
// message without a key (or a key that is not UTF-8), or whose field is not an integer, is
// rejected and counts nothing.
//
// Pipeline YAML: `state: { buckets: [totals] }`.
package main

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	weir "weir.dev/sdk"
	"weir.dev/sdk/exactjson"
)

var field = "amount"

func setup(c weir.Config) error {
	if f, ok := c["field"]; ok {
		field = f
	}
	return nil
}

func total(m *weir.Message, _ weir.Metadata) weir.Outcome {
	if m.Key == nil || !utf8.Valid(m.Key) {
		return weir.Reject("no key (or a key that is not UTF-8)")
	}
	doc, err := exactjson.Parse(m.Value)
	if err != nil {
		return weir.Reject("malformed JSON: " + err.Error())
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return weir.Reject("not a JSON object")
	}
	// An integer within int64: no fraction, no exponent (as serde_json's as_i64).
	n, ok := obj[field].(json.Number)
	if !ok {
		return weir.Reject("field `" + field + "` is not an integer")
	}
	amount, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		return weir.Reject("field `" + field + "` is not an integer")
	}
	totals, err := weir.OpenBucket("totals")
	if err != nil {
		return weir.Fail("state: " + err.Error())
	}
	sum, err := totals.Increment(string(m.Key), amount)
	if err != nil { // the store is not usable: stop rather than emit a wrong total
		return weir.Fail("state: " + err.Error())
	}
	obj["total"] = sum
	v, err := json.Marshal(obj)
	if err != nil {
		return weir.Fail(err.Error())
	}
	out := *m
	out.Value = v
	return weir.Next(out)
}

func init() { weir.StageWithInit(setup, total) }

func main() {}
