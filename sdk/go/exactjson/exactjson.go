// Package exactjson parses JSON values as the other Weir SDKs' parsers do, which
// encoding/json's defaults do not: text that is not UTF-8 is an error (encoding/json replaces
// it), numbers stay exact ([encoding/json.Number], not float64), and nothing may follow the
// value. A stage that reads JSON this way gives the same answers in every language.
package exactjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// Parse returns the one JSON value in b: map[string]any, []any, string, json.Number, bool
// or nil.
func Parse(b []byte) (any, error) {
	if !utf8.Valid(b) {
		return nil, errors.New("not UTF-8")
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	// (Decoder.More says false at a `}` or `]`: the rest is checked instead.)
	if len(bytes.TrimLeft(b[d.InputOffset():], " \t\r\n")) > 0 {
		return nil, errors.New("data after the value")
	}
	return v, nil
}
