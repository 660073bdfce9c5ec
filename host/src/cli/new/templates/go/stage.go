// {{name}}: keeps JSON messages whose `field` equals `equals`, tags them with a header, drops
// the others and rejects values that are not JSON objects. Edit freely: `weir test` shows what
// each message becomes, `go test` runs stage_test.go natively.
package main

import (
	"encoding/json"
	"fmt"

	weir "weir.dev/sdk"
)

var field, equals string

// setup reads the config; an error here stops the pipeline at start-up, naming the stage.
func setup(c weir.Config) error {
	var ok bool
	if field, ok = c["field"]; !ok {
		return fmt.Errorf("missing config key `field`")
	}
	if equals, ok = c["equals"]; !ok {
		return fmt.Errorf("missing config key `equals`")
	}
	return nil
}

// process decides one message.
func process(m *weir.Message, _ weir.Metadata) weir.Outcome {
	var doc map[string]any
	if err := json.Unmarshal(m.Value, &doc); err != nil || doc == nil {
		return weir.Reject("value is not a JSON object")
	}
	if s, ok := doc[field].(string); !ok || s != equals {
		return weir.Drop()
	}
	return weir.Next(m.WithHeader("{{name}}", []byte("matched")))
}

func init() { weir.StageWithInit(setup, process) }

func main() {}
