package main

import (
	"testing"

	weir "weir.dev/sdk"
)

// The stage natively, as the host calls it: init with the config, then one call per message.
func TestKeepsTagsDropsAndRejects(t *testing.T) {
	if err := weir.Init(weir.Config{"field": "status", "equals": "paid"}); err != nil {
		t.Fatal(err)
	}
	run := func(v string) weir.Outcome { return weir.Call(weir.Message{Value: []byte(v)}, weir.Metadata{}) }
	kept := run(`{"status": "paid"}`)
	if kept.Kind() != weir.KindNext || len(kept.Messages()) != 1 {
		t.Fatalf("kept: %v", kept)
	}
	if v, _ := kept.Messages()[0].Header("{{name}}"); string(v) != "matched" {
		t.Fatalf("tagged: %v", kept.Messages()[0].Headers)
	}
	if o := run(`{"status": "open"}`); o.Kind() != weir.KindNext || len(o.Messages()) != 0 {
		t.Fatalf("dropped: %v", o)
	}
	if o := run("nope"); o.Kind() != weir.KindReject {
		t.Fatalf("rejected: %v", o)
	}
}

func TestAMissingConfigKeyIsAnError(t *testing.T) {
	if err := weir.Init(weir.Config{"field": "status"}); err == nil {
		t.Fatal("init without `equals` passed")
	}
}
