package auditconv

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A small JSON scanner for the audit hot path. The webhook decodes every event with it in one
// pass over the body: the fields a span needs are read in place, request and response bodies
// are validated (only delimited, for events the filters drop: delimitValue) and kept as slices
// of the request (never copied), and only bodies that are
// diffed, cached or shown are parsed into trees. Its grammar is RFC 8259's, as strict as
// encoding/json's; strings are decoded as encoding/json decodes them (escapes, surrogate
// pairs, invalid UTF-8 coerced to U+FFFD), and trees are encoded as encoding/json encodes
// map[string]any (sorted keys, no HTML escaping), so spans are byte for byte what they were.

// maxDepth bounds nesting, as encoding/json does, so a hostile body cannot exhaust the stack.
const maxDepth = 10000

// syntaxError is malformed JSON at a byte offset of the body.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at offset %d: %s", e.off, e.msg)
}

func errAt(off int, msg string) error { return &syntaxError{off: off, msg: msg} }

func skipSpace(d []byte, i int) int {
	for i < len(d) {
		switch d[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanString checks the string starting at d[i] (a quote) and returns the offset after its
// closing quote; plain is true when its bytes between the quotes are its value (printable
// ASCII without escapes).
func scanString(d []byte, i int) (end int, plain bool, err error) {
	start := i
	i++
	var high uint64 // the bytes read eight at a time, or'ed: a high bit is a non-ASCII byte
	escaped := false
	for {
		// Eight bytes at a time while none of them ends the string, starts an escape or is a
		// control character: most of a body's bytes are in strings like these. After an
		// escape the scan comes back here (managedFields keys escape their first quote).
		for i+8 <= len(d) {
			x := binary.LittleEndian.Uint64(d[i:])
			if stringStop(x) {
				break
			}
			high |= x
			i += 8
		}
		// Byte by byte up to the byte that stopped the eight-byte scan.
	bytes:
		for i < len(d) {
			c := d[i]
			switch {
			case c == '"':
				return i + 1, !escaped && high&swarHighs == 0, nil
			case c == '\\':
				escaped = true
				if i+1 >= len(d) {
					return 0, false, errAt(i, "unterminated string")
				}
				switch d[i+1] {
				case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
					i += 2
				case 'u':
					if i+6 > len(d) || hex4(d[i+2:i+6]) < 0 {
						return 0, false, errAt(i, "invalid \\u escape")
					}
					i += 6
				default:
					return 0, false, errAt(i, "invalid escape in string")
				}
				break bytes
			case c < 0x20:
				return 0, false, errAt(i, "control character in string")
			default:
				high |= uint64(c)
				i++
			}
		}
		if i >= len(d) {
			return 0, false, errAt(start, "unterminated string")
		}
	}
}

// stringStop reports whether any of the eight bytes of x is a quote, a backslash or a control
// character (below 0x20), with no false negatives (a false positive only sends the caller to
// the byte loop).
func stringStop(x uint64) bool {
	return (bytesEqualTo(x, '"') | bytesEqualTo(x, '\\') | ((x - swarOnes*0x20) & ^x & swarHighs)) != 0
}

// Eight bytes at a time in a uint64 (SWAR): swarOnes has 1 in every byte, swarHighs each
// byte's high bit.
const swarOnes, swarHighs = 0x0101010101010101, 0x8080808080808080

// bytesEqualTo has the high bit set in the lowest byte of x equal to b, and possibly in bytes
// above it (borrows), in no byte when none is: its callers only test it against zero.
func bytesEqualTo(x uint64, b byte) uint64 {
	v := x ^ (swarOnes * uint64(b))
	return (v - swarOnes) & ^v & swarHighs
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// unquote decodes the body of a string scanned by scanString (without its quotes) that is
// not plain: escapes resolved, a lone surrogate and invalid UTF-8 replaced by U+FFFD.
func unquote(s []byte) []byte { return appendUnquoted(make([]byte, 0, len(s)), s) }

// appendUnquoted appends what unquote returns to out.
func appendUnquoted(out, s []byte) []byte {
	for r := 0; r < len(s); {
		c := s[r]
		switch {
		case c == '\\':
			switch e := s[r+1]; e {
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
				rr := hex4(s[r+2 : r+6])
				r += 6
				if utf16.IsSurrogate(rr) {
					if r+6 <= len(s) && s[r] == '\\' && s[r+1] == 'u' {
						if dec := utf16.DecodeRune(rr, hex4(s[r+2:r+6])); dec != utf8.RuneError {
							out = utf8.AppendRune(out, dec)
							r += 6
							continue
						}
					}
					rr = utf8.RuneError
				}
				out = utf8.AppendRune(out, rr)
				continue
			default: // " \ /
				out = append(out, e)
			}
			r += 2
		case c < utf8.RuneSelf:
			out = append(out, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			out = utf8.AppendRune(out, rr)
			r += size
		}
	}
	return out
}

// readString reads the string at d[i] and returns its value and the offset after it.
func readString(d []byte, i int) (string, int, error) {
	end, plain, err := scanString(d, i)
	if err != nil {
		return "", 0, err
	}
	if plain {
		return string(d[i+1 : end-1]), end, nil
	}
	return string(unquote(d[i+1 : end-1])), end, nil
}

// scanNumber checks the number at d[i] and returns the offset after it.
func scanNumber(d []byte, i int) (int, error) {
	start := i
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		return 0, errAt(start, "invalid value")
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return 0, errAt(i, "invalid number")
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return 0, errAt(i, "invalid number")
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	return i, nil
}

func scanLiteral(d []byte, i int, lit string) (int, error) {
	if len(d)-i < len(lit) || string(d[i:i+len(lit)]) != lit {
		return 0, errAt(i, "invalid value")
	}
	return i + len(lit), nil
}

// objectNext advances an object scan: i is just after '{' (first) or after a member's value.
// It returns the next key and the offset of its value, or done at the closing brace (end is
// then the offset after it).
func objectNext(d []byte, i int, first bool) (key []byte, next int, done bool, err error) {
	var k memberKey
	if k, next, done, err = objectMember(d, i, first); err != nil || done {
		return nil, next, done, err
	}
	return k.value(d), next, false, nil
}

// memberKey is where a member's key stands: d[at] is its opening quote, d[end-1] its closing
// one; plain as scanString says.
type memberKey struct {
	at, end int
	plain   bool
}

// value is the key decoded: a slice of d when plain, which callers only compare.
func (k memberKey) value(d []byte) []byte {
	if k.plain {
		return d[k.at+1 : k.end-1]
	}
	return unquote(d[k.at+1 : k.end-1])
}

// objectMember is objectNext that leaves the key where it stands.
func objectMember(d []byte, i int, first bool) (key memberKey, next int, done bool, err error) {
	i = skipSpace(d, i)
	if i >= len(d) {
		return key, 0, false, errAt(i, "unexpected end of object")
	}
	if d[i] == '}' {
		return key, i + 1, true, nil
	}
	if !first {
		if d[i] != ',' {
			return key, 0, false, errAt(i, "expected , or } in object")
		}
		i = skipSpace(d, i+1)
	}
	if i >= len(d) || d[i] != '"' {
		return key, 0, false, errAt(i, "expected a string key")
	}
	key.at = i
	if key.end, key.plain, err = scanString(d, i); err != nil {
		return key, 0, false, err
	}
	i = skipSpace(d, key.end)
	if i >= len(d) || d[i] != ':' {
		return key, 0, false, errAt(i, "expected : after object key")
	}
	// Callers look at d[next] to dispatch on the value's first byte.
	if i = skipSpace(d, i+1); i >= len(d) {
		return key, 0, false, errAt(i, "unexpected end of input")
	}
	return key, i, false, nil
}

// arrayNext advances an array scan like objectNext: it returns the offset of the next element,
// or done (next is then the offset after the closing bracket).
func arrayNext(d []byte, i int, first bool) (next int, done bool, err error) {
	i = skipSpace(d, i)
	if i >= len(d) {
		return 0, false, errAt(i, "unexpected end of array")
	}
	if d[i] == ']' {
		return i + 1, true, nil
	}
	if !first {
		if d[i] != ',' {
			return 0, false, errAt(i, "expected , or ] in array")
		}
		if i = skipSpace(d, i+1); i >= len(d) {
			return 0, false, errAt(i, "unexpected end of array")
		}
	}
	return i, false, nil
}

// skipValue checks the value at d[i] (after space) and returns the offset after it.
func skipValue(d []byte, i, depth int) (int, error) {
	if i >= len(d) {
		return 0, errAt(i, "unexpected end of input")
	}
	switch c := d[i]; c {
	case '"':
		end, _, err := scanString(d, i)
		return end, err
	case '{':
		if depth >= maxDepth {
			return 0, errAt(i, "nested too deeply")
		}
		i++
		for first := true; ; first = false {
			// The key is only checked, never decoded: managedFields' keys (k:{\"type\":...})
			// are full of escapes.
			_, next, done, err := objectMember(d, i, first)
			if err != nil || done {
				return next, err
			}
			if i, err = skipValue(d, next, depth+1); err != nil {
				return 0, err
			}
		}
	case '[':
		if depth >= maxDepth {
			return 0, errAt(i, "nested too deeply")
		}
		i++
		for first := true; ; first = false {
			next, done, err := arrayNext(d, i, first)
			if err != nil || done {
				return next, err
			}
			if i, err = skipValue(d, next, depth+1); err != nil {
				return 0, err
			}
		}
	case 't':
		return scanLiteral(d, i, "true")
	case 'f':
		return scanLiteral(d, i, "false")
	case 'n':
		return scanLiteral(d, i, "null")
	default:
		return scanNumber(d, i)
	}
}

// parseValue parses the value at d[i] into a tree value (map[string]any, []any, string,
// json.Number, bool or nil) and returns the offset after it.
func parseValue(d []byte, i, depth int) (any, int, error) {
	if i >= len(d) {
		return nil, 0, errAt(i, "unexpected end of input")
	}
	switch c := d[i]; c {
	case '"':
		return readStringValue(d, i)
	case '{':
		if depth >= maxDepth {
			return nil, 0, errAt(i, "nested too deeply")
		}
		m := make(map[string]any, 4)
		i++
		for first := true; ; first = false {
			key, next, done, err := objectNext(d, i, first)
			if err != nil {
				return nil, 0, err
			}
			if done {
				return m, next, nil
			}
			var v any
			if v, i, err = parseValue(d, next, depth+1); err != nil {
				return nil, 0, err
			}
			m[string(key)] = v
		}
	case '[':
		if depth >= maxDepth {
			return nil, 0, errAt(i, "nested too deeply")
		}
		s := []any{}
		i++
		for first := true; ; first = false {
			next, done, err := arrayNext(d, i, first)
			if err != nil {
				return nil, 0, err
			}
			if done {
				return s, next, nil
			}
			var v any
			if v, i, err = parseValue(d, next, depth+1); err != nil {
				return nil, 0, err
			}
			s = append(s, v)
		}
	case 't':
		end, err := scanLiteral(d, i, "true")
		return true, end, err
	case 'f':
		end, err := scanLiteral(d, i, "false")
		return false, end, err
	case 'n':
		end, err := scanLiteral(d, i, "null")
		return nil, end, err
	default:
		end, err := scanNumber(d, i)
		if err != nil {
			return nil, 0, err
		}
		return json.Number(d[i:end]), end, nil
	}
}

func readStringValue(d []byte, i int) (any, int, error) {
	s, end, err := readString(d, i)
	if err != nil {
		return nil, 0, err
	}
	return s, end, nil
}

// parseTree parses a JSON object into a tree; ok is false for anything else.
func parseTree(raw []byte) (tree, bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false
	}
	v, end, err := parseValue(raw, i, 0)
	if err != nil || skipSpace(raw, end) != len(raw) {
		return nil, false
	}
	t, _ := v.(map[string]any)
	return t, t != nil
}

// marshalJSON encodes v as encoding/json would with HTML escaping off: the values end up in
// span attributes read by people, where "\u003credacted\u003e" would only obscure "<redacted>".
func marshalJSON(v any) string {
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
		return appendQuoted(dst, x), true
	case json.Number:
		if x == "" {
			return append(dst, '0'), true
		}
		if end, err := scanNumber([]byte(x), 0); err != nil || end != len(x) {
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
			dst = appendQuoted(dst, k)
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

// appendQuoted quotes s as encoding/json does without HTML escaping: ", \ and control
// characters escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped.
func appendQuoted(dst []byte, s string) []byte {
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

// parseBody parses an object body as parseTree does, leaving out metadata.managedFields
// (large, rewritten by every field manager, never kept or shown: see stripNoise) without
// building it.
func parseBody(raw []byte) (tree, bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false
	}
	t := make(tree, 8)
	i++
	for first := true; ; first = false {
		key, next, done, err := objectNext(raw, i, first)
		if err != nil {
			return nil, false
		}
		if done {
			if skipSpace(raw, next) != len(raw) {
				return nil, false
			}
			return t, true
		}
		var v any
		if string(key) == "metadata" && raw[next] == '{' {
			v, i, err = parseMetadata(raw, next)
		} else {
			v, i, err = parseValue(raw, next, 1)
		}
		if err != nil {
			return nil, false
		}
		t[string(key)] = v
	}
}

func parseMetadata(d []byte, i int) (any, int, error) {
	m := make(map[string]any, 12)
	i++
	for first := true; ; first = false {
		key, next, done, err := objectNext(d, i, first)
		if err != nil {
			return nil, 0, err
		}
		if done {
			return m, next, nil
		}
		if string(key) == "managedFields" {
			if i, err = skipValue(d, next, 2); err != nil {
				return nil, 0, err
			}
			delete(m, "managedFields")
			continue
		}
		var v any
		if v, i, err = parseValue(d, next, 2); err != nil {
			return nil, 0, err
		}
		m[string(key)] = v
	}
}

// scanMeta reads what metaOf reads from a body without parsing it into a tree: most bodies
// are only looked at to complete an identity or to find a write already seen. It returns what
// metaOf(parseTree(raw), annotation) returns, duplicate keys included (the last one counts),
// except that a Pod's node and a Binding's target are read only when no other kind precedes
// them (the apiserver writes kind first).
// annotation is the trace-context annotation key; the other annotations are skipped.
func scanMeta(raw []byte, annotation string) (objectMeta, bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return objectMeta{}, false
	}
	var m objectMeta
	i++
	for first := true; ; first = false {
		key, next, done, err := objectNext(raw, i, first)
		if err != nil {
			return objectMeta{}, false
		}
		if done {
			if m.Kind != "Pod" {
				m.NodeName = ""
			}
			if m.Kind != "Binding" {
				m.Target = ""
			}
			return m, skipSpace(raw, next) == len(raw)
		}
		switch string(key) {
		case "kind":
			m.Kind, i, err = anyString(raw, next)
		case "apiVersion":
			m.APIVersion, i, err = anyString(raw, next)
		case "metadata":
			m = objectMeta{Kind: m.Kind, APIVersion: m.APIVersion, NodeName: m.NodeName, Target: m.Target,
				Rollout: rollout{ObservedGeneration: m.Rollout.ObservedGeneration}}
			i, err = scanMetadata(raw, next, &m, annotation)
		case "status":
			m.Rollout.ObservedGeneration = 0
			i, err = scanMembers(raw, next, 1, func(key []byte, d []byte, vi int) (int, bool, error) {
				if string(key) != "observedGeneration" {
					return 0, false, nil
				}
				var end int
				var err error
				m.Rollout.ObservedGeneration, end, err = anyInt(d, vi)
				return end, true, err
			})
		case "spec":
			// A Pod's node (spec.nodeName). The apiserver writes kind first, so the spec of
			// any other kind is skipped whole, as before.
			m.NodeName = ""
			if m.Kind == "Pod" || m.Kind == "" {
				i, err = scanMember(raw, next, 1, "nodeName", &m.NodeName)
			} else {
				i, err = skipValue(raw, next, 1)
			}
		case "target":
			// A Binding's target node (pods/binding).
			m.Target = ""
			if m.Kind == "Binding" || m.Kind == "" {
				i, err = scanMember(raw, next, 1, "name", &m.Target)
			} else {
				i, err = skipValue(raw, next, 1)
			}
		default:
			i, err = skipValue(raw, next, 1)
		}
		if err != nil {
			return objectMeta{}, false
		}
	}
}

// scanStatusDetails reads details.name and details.uid of a Status body (what a deletion answers when
// the object is gone at once); empty strings when it has none or does not parse.
func scanStatusDetails(raw []byte) (name, uid string) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return "", ""
	}
	_, err := scanMembers(raw, i, 0, func(key, d []byte, vi int) (int, bool, error) {
		if string(key) != "details" {
			return 0, false, nil
		}
		end, err := scanMembers(d, vi, 1, stringMembers("name", &name, "uid", &uid))
		return end, true, err
	})
	if err != nil {
		return "", ""
	}
	return name, uid
}

// scanMember reads the string member name of the object at d[i] (at nesting depth) into dst
// (the last one counts; a value of another type counts as ""); anything else, or a value that
// is not an object, is skipped.
func scanMember(d []byte, i, depth int, name string, dst *string) (int, error) {
	return scanMembers(d, i, depth, stringMembers(name, dst, name, dst))
}

// scanMembers walks the object at d[i] (at nesting depth): read is given each member's key and
// value offset, and reads the value (returning the offset after it and true) or leaves it to be
// skipped (false). A value that is not an object is skipped.
func scanMembers(d []byte, i, depth int, read func(key, d []byte, vi int) (int, bool, error)) (int, error) {
	if d[i] != '{' {
		return skipValue(d, i, depth)
	}
	i++
	for first := true; ; first = false {
		key, next, done, err := objectNext(d, i, first)
		if err != nil || done {
			return next, err
		}
		end, ok, err := read(key, d, next)
		if err != nil {
			return 0, err
		}
		if ok {
			i = end
		} else if i, err = skipValue(d, next, depth+1); err != nil {
			return 0, err
		}
	}
}

// stringMembers reads the string members a and b (the last one counts; a value of another
// type counts as "") into da and db, for scanMembers.
func stringMembers(a string, da *string, b string, db *string) func(key, d []byte, vi int) (int, bool, error) {
	return func(key, d []byte, vi int) (int, bool, error) {
		var dst *string
		switch string(key) {
		case a:
			dst = da
		case b:
			dst = db
		default:
			return 0, false, nil
		}
		v, end, err := anyString(d, vi)
		*dst = v
		return end, true, err
	}
}

// anyInt reads a value that counts only when it is an integer (0 otherwise).
func anyInt(d []byte, i int) (int64, int, error) {
	end, err := skipValue(d, i, 2)
	if err != nil {
		return 0, 0, err
	}
	if c := d[i]; c == '-' || (c >= '0' && c <= '9') {
		return parseInt(d[i:end]), end, nil
	}
	return 0, end, nil
}

// parseInt is the integer a JSON number's text spells, 0 when it is not one (a fraction, an
// exponent, out of range), as strconv.ParseInt.
func parseInt(b []byte) int64 {
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// anyString reads a value that counts only when it is a string.
func anyString(d []byte, i int) (string, int, error) {
	if d[i] == '"' {
		return readString(d, i)
	}
	end, err := skipValue(d, i, 2)
	return "", end, err
}

func scanMetadata(d []byte, i int, m *objectMeta, annotation string) (int, error) {
	if d[i] != '{' {
		return skipValue(d, i, 1)
	}
	i++
	for first := true; ; first = false {
		key, next, done, err := objectNext(d, i, first)
		if err != nil || done {
			return next, err
		}
		switch string(key) {
		case "name":
			m.Name, i, err = anyString(d, next)
		case "namespace":
			m.Namespace, i, err = anyString(d, next)
		case "uid":
			m.UID, i, err = anyString(d, next)
		case "resourceVersion":
			m.ResourceVersion, i, err = anyString(d, next)
		case "ownerReferences":
			m.Owner = ownerRef{}
			i, err = scanOwners(d, next, &m.Owner)
		case "annotations":
			m.TraceContext, m.Rollout.Revision = "", ""
			i, err = scanMembers(d, next, 2, stringMembers(annotation, &m.TraceContext, annotationRevision, &m.Rollout.Revision))
		case "labels":
			m.Rollout.TemplateHash, m.Rollout.RevisionHash = "", ""
			i, err = scanMembers(d, next, 2, stringMembers(labelTemplateHash, &m.Rollout.TemplateHash, labelRevisionHash, &m.Rollout.RevisionHash))
		case "generation":
			m.Rollout.Generation, i, err = anyInt(d, next)
		default:
			i, err = skipValue(d, next, 2)
		}
		if err != nil {
			return 0, err
		}
	}
}

// scanOwners finds the first controlling owner reference.
func scanOwners(d []byte, i int, owner *ownerRef) (int, error) {
	if d[i] != '[' {
		return skipValue(d, i, 2)
	}
	found := false
	i++
	for first := true; ; first = false {
		next, done, err := arrayNext(d, i, first)
		if err != nil || done {
			return next, err
		}
		if d[next] != '{' {
			if i, err = skipValue(d, next, 3); err != nil {
				return 0, err
			}
			continue
		}
		var ref ownerRef
		controller := false
		i = next + 1
		for f := true; ; f = false {
			key, vi, done, err := objectNext(d, i, f)
			if err != nil {
				return 0, err
			}
			if done {
				i = vi
				break
			}
			switch string(key) {
			case "apiVersion":
				ref.APIVersion, i, err = anyString(d, vi)
			case "kind":
				ref.Kind, i, err = anyString(d, vi)
			case "name":
				ref.Name, i, err = anyString(d, vi)
			case "uid":
				ref.UID, i, err = anyString(d, vi)
			case "controller":
				controller = d[vi] == 't'
				i, err = skipValue(d, vi, 4)
			default:
				i, err = skipValue(d, vi, 4)
			}
			if err != nil {
				return 0, err
			}
		}
		if controller && !found {
			*owner, found = ref, true
		}
	}
}

// delimitValue returns the offset after the value at d[i] (after space) without validating
// it: a string ends at its first unescaped quote, an object or array at its matching bracket,
// anything else at the byte that ends a scalar. It is skipValue for a body nobody reads, the
// request or response of an event the converter will filter (a read, a watch, a stage it
// does not trace): such bodies are most of a verbose cluster's bytes. It still finds the
// value's end exactly where skipValue would on valid JSON, and it still fails on what would
// lose that end: an unterminated string, a bracket closed by the other kind or never closed,
// nesting deeper than maxDepth, an empty scalar. The converter validates a delimited body
// (validDelimited) before it reads it, should the event be kept after all.
func delimitValue(d []byte, i int) (int, error) {
	if i >= len(d) {
		return 0, errAt(i, "unexpected end of input")
	}
	switch d[i] {
	case '"':
		return stringEnd(d, i)
	case '{', '[':
	default:
		start := i
		for i < len(d) && !scalarEnd[d[i]] {
			i++
		}
		if i == start {
			return 0, errAt(i, "invalid value")
		}
		return i, nil
	}
	// objects[k] bit b says whether the bracket open at depth 64k+b is a brace; bodies nest a
	// few levels, the rare deep one grows it.
	var small [4]uint64
	objects := small[:]
	depth := 0
	for i < len(d) {
		switch c := d[i]; c {
		case '"':
			end, err := stringEnd(d, i)
			if err != nil {
				return 0, err
			}
			i = end
			continue
		case '{', '[':
			if depth >= maxDepth {
				return 0, errAt(i, "nested too deeply")
			}
			if depth/64 == len(objects) {
				objects = append(objects, 0)
			}
			bit := uint64(1) << (depth % 64)
			if c == '{' {
				objects[depth/64] |= bit
			} else {
				objects[depth/64] &^= bit
			}
			depth++
		case '}', ']':
			depth--
			if (objects[depth/64]>>(depth%64)&1 == 1) != (c == '}') {
				return 0, errAt(i, "mismatched bracket")
			}
			if depth == 0 {
				return i + 1, nil
			}
		}
		i++
	}
	return 0, errAt(i, "unexpected end of input")
}

// scalarEnd holds the bytes that end a number or a literal: space, a separator, a bracket.
var scalarEnd = [256]bool{' ': true, '\t': true, '\n': true, '\r': true, ',': true, ':': true,
	'}': true, ']': true, '{': true, '[': true, '"': true}

// stringEnd returns the offset after the string at d[i] (a quote): after its first quote not
// escaped by a backslash. It looks at nothing else: escapes and control characters are for
// scanString to judge.
func stringEnd(d []byte, i int) (int, error) {
	start := i
	i++
	for {
		for i+8 <= len(d) && !quoteOrBackslash(binary.LittleEndian.Uint64(d[i:])) {
			i += 8
		}
		for ; i < len(d); i++ {
			if c := d[i]; c == '"' {
				return i + 1, nil
			} else if c == '\\' {
				i++ // the escaped byte cannot end the string
				break
			}
		}
		if i >= len(d) {
			return 0, errAt(start, "unterminated string")
		}
		i++
	}
}

// quoteOrBackslash reports whether any of the eight bytes of x is a quote or a backslash.
func quoteOrBackslash(x uint64) bool {
	return (bytesEqualTo(x, '"') | bytesEqualTo(x, '\\')) != 0
}
