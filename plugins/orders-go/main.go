// The cross-language example stage in Go (the same job as plugins/orders-{rust,c,python,js};
// see docs/languages/README.md): parse the value as JSON, keep objects whose top-level `field`
// is the string `equals`, add the string field `tag` = `tag_value`, drop the others, and
// reject input that has no value, is not JSON, or is not a JSON object.
package main

import (
	"errors"

	weir "weir.dev/sdk"
	"weir.dev/sdk/jsonobject"
)

type orders struct{ field, equals, tag, tagValue string }

func (o *orders) setup(c weir.Config) error {
	for _, k := range []struct {
		name string
		to   *string
	}{{"field", &o.field}, {"equals", &o.equals}, {"tag", &o.tag}, {"tag_value", &o.tagValue}} {
		v, ok := c[k.name]
		if !ok {
			return errors.New("missing config key `" + k.name + "`")
		}
		*k.to = v
	}
	return nil
}

func (o *orders) process(m *weir.Message, _ weir.Metadata) weir.Outcome {
	if m.Value == nil {
		return weir.Reject("no value")
	}
	// Read in place: the text is checked whole, the top-level members found, nothing built.
	obj, err := jsonobject.Read(m.Value)
	if err == jsonobject.ErrNotObject {
		return weir.Reject("not a JSON object")
	} else if err != nil {
		return weir.Reject("malformed JSON")
	}
	if s, ok := obj.String(o.field); !ok || s != o.equals {
		return weir.Drop()
	}
	obj.SetString(o.tag, o.tagValue)
	out := *m
	out.Value = obj.Bytes()
	return weir.Next(out)
}

func init() {
	o := &orders{}
	weir.StageWithInit(o.setup, o.process)
}

func main() {}
