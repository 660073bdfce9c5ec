// Package jsonobject reads a JSON object in place, as the other Weir SDKs' parsers check JSON
// (the Rust SDK's `weir_sdk::json`, the C SDK's scanner): the whole text is checked (UTF-8,
// RFC 8259's grammar, encoding/json's nesting limit), the top-level members are found in the
// same pass, and nothing is built for nested values, which stay their exact text. A stage that
// reads a few members and sets one pays for a scan, not a tree. The package does not use
// encoding/json or fmt, so a stage that reads JSON only this way leaves them (and reflect) out
// of its component.
package jsonobject

import (
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrNotObject is what [Read] answers for valid JSON that is not an object.
var ErrNotObject = errors.New("not a JSON object")

// Object is a JSON object read in place: each top-level member's value kept as its text.
// [Object.Bytes] writes the object back with its members in their order.
type Object struct {
	members []member
	first   [8]member // the members of a small object, without an allocation
}

type member struct {
	key   []byte // the key's text, unescaped (the text as written when it has no escape)
	raw   []byte // the key as written, quotes included
	value []byte
}

// Read reads the JSON object in b (b must stay unchanged while the Object is used). Invalid
// JSON is an error that says where; valid JSON that is not an object is [ErrNotObject].
func Read(b []byte) (*Object, error) {
	if !utf8.Valid(b) {
		return nil, errors.New("not UTF-8")
	}
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		if end, ok := value(b, i, 0); ok && skipSpace(b, end) == len(b) {
			return nil, ErrNotObject
		}
		return nil, invalid(b)
	}
	o := &Object{}
	o.members = o.first[:0]
	end, ok := container(b, i, 1, o)
	if !ok || skipSpace(b, end) != len(b) {
		return nil, invalid(b)
	}
	return o, nil
}

// invalid says where the scanner refused b: the first byte that cannot continue a JSON text.
func invalid(b []byte) error {
	at := firstBad(b)
	if at >= len(b) {
		return errors.New("invalid JSON: unexpected end")
	}
	return errors.New("invalid JSON at byte " + strconv.Itoa(at) + ": " + strconv.QuoteRune(rune(b[at])))
}

// firstBad returns the index where the scan of b stops (len(b): it ended too soon).
func firstBad(b []byte) int {
	i := skipSpace(b, 0)
	end, ok := value(b, i, 0)
	if !ok {
		return end
	}
	return skipSpace(b, end)
}

// Get returns the text of the member key's value (the last member of that name, as Parse
// keeps), and whether there is one.
func (o *Object) Get(key string) ([]byte, bool) {
	for i := len(o.members) - 1; i >= 0; i-- {
		if string(o.members[i].key) == key {
			return o.members[i].value, true
		}
	}
	return nil, false
}

// String returns the member key as a string, and whether it is one.
func (o *Object) String(key string) (string, bool) {
	v, ok := o.Get(key)
	if !ok || v[0] != '"' {
		return "", false
	}
	return string(unescape(v[1 : len(v)-1])), true
}

// Set sets the member key to value (JSON text, not checked): every member of that name is
// replaced by one, at the end.
func (o *Object) Set(key string, value []byte) {
	kept := o.members[:0]
	for _, m := range o.members {
		if string(m.key) != key {
			kept = append(kept, m)
		}
	}
	raw := AppendString(nil, key)
	unescaped := raw[1 : len(raw)-1]
	if len(unescaped) != len(key) { // it needed escapes
		unescaped = []byte(key)
	}
	o.members = append(kept, member{key: unescaped, raw: raw, value: value})
}

// SetString sets the member key to the string s.
func (o *Object) SetString(key, s string) {
	o.Set(key, AppendString(nil, s))
}

// AppendString appends s (UTF-8) as a JSON string: quoted, with `"`, `\` and the control
// characters escaped, the rest as it is.
func AppendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// Bytes writes the object: its members in order, without spaces between them.
func (o *Object) Bytes() []byte {
	n := 2
	for _, m := range o.members {
		n += len(m.raw) + len(m.value) + 2
	}
	out := make([]byte, 0, n)
	out = append(out, '{')
	for i, m := range o.members {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m.raw...)
		out = append(out, ':')
		out = append(out, m.value...)
	}
	return append(out, '}')
}

// unescape returns the text of a checked JSON string's content (s itself when it has no
// escape). A lone surrogate escape becomes U+FFFD, as encoding/json decodes it.
func unescape(s []byte) []byte {
	i := 0
	for i < len(s) && s[i] != '\\' {
		i++
	}
	if i == len(s) {
		return s
	}
	out := append(make([]byte, 0, len(s)), s[:i]...)
	for i < len(s) {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		e := s[i+1]
		i += 2
		switch e {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := hexRune(s[i : i+4])
			i += 4
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
					r2 = hexRune(s[i+2 : i+6])
				}
				if pair := utf16.DecodeRune(r, r2); pair != utf8.RuneError {
					r = pair
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
		default: // `"`, `\`, `/`
			out = append(out, e)
		}
	}
	return out
}

func hexRune(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// The scanner: RFC 8259's grammar, as encoding/json checks it (the same nesting limit);
// UTF-8 is checked before.

const maxDepth = 10000

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// value returns the index after the JSON value at b[i], and whether there is one.
func value(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		return stringEnd(b, i)
	case c == '{' || c == '[':
		if depth >= maxDepth {
			return i, false
		}
		return container(b, i, depth+1, nil)
	case c == '-' || (c >= '0' && c <= '9'):
		return number(b, i)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	}
	return i, false
}

func literal(b []byte, i int, word string) (int, bool) {
	if len(b)-i >= len(word) && string(b[i:i+len(word)]) == word {
		return i + len(word), true
	}
	return i, false
}

// container reads an object or an array whose bracket is at b[i]; an object's members go
// into `into` when it is not nil (the top level of [Read]).
func container(b []byte, i, depth int, into *Object) (int, bool) {
	object := b[i] == '{'
	closing := byte(']')
	if object {
		closing = '}'
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == closing {
		return i + 1, true
	}
	for {
		var ok bool
		var m member
		if object {
			start := i
			if i, ok = stringEnd(b, i); !ok {
				return i, false
			}
			m.raw = b[start:i]
			if i = skipSpace(b, i); i == len(b) || b[i] != ':' {
				return i, false
			}
			i = skipSpace(b, i+1)
		}
		start := i
		if i, ok = value(b, i, depth); !ok {
			return i, false
		}
		if into != nil {
			m.key, m.value = unescape(m.raw[1:len(m.raw)-1]), b[start:i]
			into.members = append(into.members, m)
		}
		if i = skipSpace(b, i); i == len(b) {
			return i, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case closing:
			return i + 1, true
		default:
			return i, false
		}
	}
}

// stringEnd returns the index after the string whose quote is at b[i].
func stringEnd(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return i, false
	}
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		case c == '\\':
			i++
			if i == len(b) {
				return i, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i < 5 || !hex4(b[i+1:i+5]) {
					return i, false
				}
				i += 4
			default:
				return i, false
			}
		}
	}
	return i, false
}

func hex4(h []byte) bool {
	for _, c := range h {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// number reads -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? at b[i].
func number(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	digits := func() bool {
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > start
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else if !digits() {
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return i, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return i, false
		}
	}
	return i, true
}
