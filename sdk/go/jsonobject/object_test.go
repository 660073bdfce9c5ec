package jsonobject

import (
	"bufio"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"weir.dev/sdk/exactjson"
)

// Read agrees with exactjson.Parse (encoding/json) on every input: the same verdict (an object, valid JSON that
// is not one, or an error), and an object written back by Bytes parses to the same value.
// The seeds are the 35 values of the cross-language test and hostile shapes; `go test
// -fuzz FuzzReadAgreesWithParse` searches further.
func FuzzReadAgreesWithParse(f *testing.F) {
	for _, s := range []string{
		`{}`, ` { } `, `{"a":1}`, `{"a":"}","b":[1,{"c":"]"}],"d":null}`, `{"a":1,"a":2}`,
		`{"k\"ey":"v\\"}`, `{"\u00e9":"\ud83d\ude00"}`, `{"n":-0.5e10,"t":true,"f":false}`,
		`[1]`, `"s"`, `null`, `1`, `{"a":1}x`, `{"a":1,}`, `{"a":}`, "{\"a\":\"\xff\"}",
		"{\"a\":\"\x01\"}", `{"a":NaN}`, `{"a" : [ ] , "b" : { } }`, "\t{\n\"a\"\r:1}\n",
	} {
		f.Add([]byte(s))
	}
	// encoding/json's nesting limit, 10,000 containers: at it and past it.
	for _, n := range []int{9999, 10000} {
		f.Add([]byte(`{"a":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`))
	}
	if file, err := os.Open("../../../tests/data/orders-languages.jsonl"); err == nil {
		defer file.Close()
		lines := bufio.NewScanner(file)
		for lines.Scan() {
			var line struct{ Value json.RawMessage }
			if json.Unmarshal(lines.Bytes(), &line) == nil {
				var text string
				if json.Unmarshal(line.Value, &text) == nil {
					f.Add([]byte(text))
				} else {
					f.Add([]byte(line.Value))
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, perr := exactjson.Parse(b)
		o, err := Read(b)
		_, isObject := want.(map[string]any)
		switch {
		case perr != nil:
			if err == nil {
				t.Fatalf("%q: Read accepted what Parse refused (%v)", b, perr)
			}
		case !isObject:
			if err != ErrNotObject {
				t.Fatalf("%q: %v, not ErrNotObject", b, err)
			}
		default:
			if err != nil {
				t.Fatalf("%q: Read refused an object: %v", b, err)
			}
			got, err := exactjson.Parse(o.Bytes())
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("%q: written back as %q (%v)", b, o.Bytes(), err)
			}
			// A member set by name reads back, escapes and all.
			o.SetString("k\"\u00e9\n", "v\"\x01")
			if v, ok := o.String("k\"\u00e9\n"); !ok || v != "v\"\x01" {
				t.Fatalf("%q: set and read back: %q %v", b, v, ok)
			}
			if back, err := exactjson.Parse(o.Bytes()); err != nil || back.(map[string]any)["k\"\u00e9\n"] != "v\"\x01" {
				t.Fatalf("%q: set, written %q: %v", b, o.Bytes(), err)
			}
			for k, v := range want.(map[string]any) {
				if s, ok := v.(string); ok {
					if g, ok := o.String(k); !ok || g != s {
						t.Fatalf("%q: String(%q) = %q, %v", b, k, g, ok)
					}
				}
			}
		}
	})
}
