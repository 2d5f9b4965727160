package jsonscan

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Tree is an object parsed by ParseTree: its values are map[string]any, []any, string,
// json.Number, bool or nil. Numbers stay json.Number so that diffs print them exactly as the
// apiserver wrote them.
type Tree = map[string]any

// Child is the member key of t that is an object, nil when absent or not an object.
func Child(t Tree, key string) Tree {
	m, _ := t[key].(map[string]any)
	return m
}

// Str is the member key of t that is a string, "" when absent or not a string.
func Str(t Tree, key string) string {
	s, _ := t[key].(string)
	return s
}

// Int is an integer member of t, 0 when absent or not an integer.
func Int(t Tree, key string) int64 {
	n, _ := t[key].(json.Number)
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// UnmarshalNumbers decodes raw into v with encoding/json, numbers as json.Number.
func UnmarshalNumbers(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

// Compact returns raw JSON without insignificant space, or raw as is when it is not JSON.
// Clients send patches compact: raw is then returned as it is, which is what json.Compact gives
// for such JSON (nothing to take out) and for invalid input (an error).
func Compact(raw []byte) string {
	if !spaceOutsideStrings(raw) {
		return string(raw)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return string(raw)
	}
	return buf.String()
}

// spaceOutsideStrings reports whether JSON text has whitespace between its tokens. For valid
// JSON it is exact; for anything else it may say either.
func spaceOutsideStrings(raw []byte) bool {
	in := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return true
		}
	}
	return false
}

// ParseValue parses the value at d[i] into a tree value (map[string]any, []any, string,
// json.Number, bool or nil) and returns the offset after it.
func ParseValue(d []byte, i, depth int) (any, int, error) {
	if i >= len(d) {
		return nil, 0, ErrorAt(i, "unexpected end of input")
	}
	switch c := d[i]; c {
	case '"':
		return readStringValue(d, i)
	case '{':
		if depth >= MaxDepth {
			return nil, 0, ErrorAt(i, "nested too deeply")
		}
		m := make(map[string]any, 4)
		i++
		for first := true; ; first = false {
			key, next, done, err := ObjectNext(d, i, first)
			if err != nil {
				return nil, 0, err
			}
			if done {
				return m, next, nil
			}
			var v any
			if v, i, err = ParseValue(d, next, depth+1); err != nil {
				return nil, 0, err
			}
			m[string(key)] = v
		}
	case '[':
		if depth >= MaxDepth {
			return nil, 0, ErrorAt(i, "nested too deeply")
		}
		s := []any{}
		i++
		for first := true; ; first = false {
			next, done, err := ArrayNext(d, i, first)
			if err != nil {
				return nil, 0, err
			}
			if done {
				return s, next, nil
			}
			var v any
			if v, i, err = ParseValue(d, next, depth+1); err != nil {
				return nil, 0, err
			}
			s = append(s, v)
		}
	case 't':
		end, err := ScanLiteral(d, i, "true")
		return true, end, err
	case 'f':
		end, err := ScanLiteral(d, i, "false")
		return false, end, err
	case 'n':
		end, err := ScanLiteral(d, i, "null")
		return nil, end, err
	default:
		end, err := ScanNumber(d, i)
		if err != nil {
			return nil, 0, err
		}
		return json.Number(d[i:end]), end, nil
	}
}

func readStringValue(d []byte, i int) (any, int, error) {
	s, end, err := ReadString(d, i)
	if err != nil {
		return nil, 0, err
	}
	return s, end, nil
}

// ParseTree parses a JSON object into a tree; ok is false for anything else.
func ParseTree(raw []byte) (Tree, bool) {
	i := SkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false
	}
	v, end, err := ParseValue(raw, i, 0)
	if err != nil || SkipSpace(raw, end) != len(raw) {
		return nil, false
	}
	t, _ := v.(map[string]any)
	return t, t != nil
}

// Marshal encodes v as encoding/json would with HTML escaping off: the values end up in
// span attributes read by people, where "\u003credacted\u003e" would only obscure "<redacted>".
func Marshal(v any) string {
	buf, ok := appendJSON(make([]byte, 0, 256), v)
	if !ok {
		return ""
	}
	return string(buf)
}

// appendJSON appends the encoding of a tree value; ok is false for a value a tree cannot
// hold (which encoding/json would have refused or encoded differently).
func appendJSON(dst []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), true
	case string:
		return AppendQuoted(dst, x), true
	case json.Number:
		if x == "" {
			return append(dst, '0'), true
		}
		if end, err := ScanNumber([]byte(x), 0); err != nil || end != len(x) {
			return dst, false
		}
		return append(dst, x...), true
	case bool:
		if x {
			return append(dst, "true"...), true
		}
		return append(dst, "false"...), true
	case map[string]any:
		if len(x) == 0 {
			return append(dst, "{}"...), true
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, '{')
		for n, k := range keys {
			if n > 0 {
				dst = append(dst, ',')
			}
			dst = AppendQuoted(dst, k)
			dst = append(dst, ':')
			var ok bool
			if dst, ok = appendJSON(dst, x[k]); !ok {
				return dst, false
			}
		}
		return append(dst, '}'), true
	case []any:
		if x == nil {
			return append(dst, "null"...), true
		}
		dst = append(dst, '[')
		for n, e := range x {
			if n > 0 {
				dst = append(dst, ',')
			}
			var ok bool
			if dst, ok = appendJSON(dst, e); !ok {
				return dst, false
			}
		}
		return append(dst, ']'), true
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return dst, false
		}
		return append(dst, b...), true
	}
}

const hexDigits = "0123456789abcdef"

// AppendQuoted quotes s as encoding/json does without HTML escaping: ", \ and control
// characters escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped.
func AppendQuoted(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
