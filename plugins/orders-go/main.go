// The cross-language example stage in Go (the same job as plugins/orders-{rust,c,python,js};
// see docs/languages/README.md): parse the value as JSON, keep objects whose top-level `field`
// is the string `equals`, add the string field `tag` = `tag_value`, drop the others, and
// reject input that has no value, is not JSON, or is not a JSON object.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	weir "weir.dev/sdk"
)

type orders struct{ field, equals, tag, tagValue string }

func (o *orders) setup(c weir.Config) error {
	for _, k := range []struct {
		name string
		to   *string
	}{{"field", &o.field}, {"equals", &o.equals}, {"tag", &o.tag}, {"tag_value", &o.tagValue}} {
		v, ok := c[k.name]
		if !ok {
			return fmt.Errorf("missing config key `%s`", k.name)
		}
		*k.to = v
	}
	return nil
}

func (o *orders) process(m *weir.Message, _ weir.Metadata) weir.Outcome {
	if m.Value == nil {
		return weir.Reject("no value")
	}
	// Go's decoder replaces invalid UTF-8 instead of refusing it: checked first, as the
	// other languages' parsers do.
	if !utf8.Valid(m.Value) {
		return weir.Reject("malformed JSON")
	}
	var doc any
	d := json.NewDecoder(bytes.NewReader(m.Value))
	d.UseNumber()
	if err := d.Decode(&doc); err != nil || d.More() {
		return weir.Reject("malformed JSON")
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return weir.Reject("not a JSON object")
	}
	if s, ok := obj[o.field].(string); !ok || s != o.equals {
		return weir.Drop()
	}
	obj[o.tag] = o.tagValue
	out := *m
	v, err := json.Marshal(obj)
	if err != nil {
		return weir.Fail(err.Error())
	}
	out.Value = v
	return weir.Next(out)
}

func init() {
	o := &orders{}
	weir.StageWithInit(o.setup, o.process)
}

func main() {}
