package jsonscan

import (
	"encoding/binary"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth bounds nesting, as encoding/json does, so a hostile body cannot exhaust the stack.
const MaxDepth = 10000

// SyntaxError is malformed JSON at a byte offset of the body.
type SyntaxError struct {
	off int
	msg string
}

// Error says where and what.
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at offset %d: %s", e.off, e.msg)
}

// ErrorAt is a *SyntaxError at offset off.
func ErrorAt(off int, msg string) error { return &SyntaxError{off: off, msg: msg} }

// SkipSpace returns the offset of the first byte at or after i that is not JSON whitespace.
func SkipSpace(d []byte, i int) int {
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

// ScanString checks the string starting at d[i] (a quote) and returns the offset after its
// closing quote; plain is true when its bytes between the quotes are its value (printable
// ASCII without escapes).
func ScanString(d []byte, i int) (end int, plain bool, err error) {
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
					return 0, false, ErrorAt(i, "unterminated string")
				}
				switch d[i+1] {
				case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
					i += 2
				case 'u':
					if i+6 > len(d) || hex4(d[i+2:i+6]) < 0 {
						return 0, false, ErrorAt(i, "invalid \\u escape")
					}
					i += 6
				default:
					return 0, false, ErrorAt(i, "invalid escape in string")
				}
				break bytes
			case c < 0x20:
				return 0, false, ErrorAt(i, "control character in string")
			default:
				high |= uint64(c)
				i++
			}
		}
		if i >= len(d) {
			return 0, false, ErrorAt(start, "unterminated string")
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

// Unquote decodes the body of a string scanned by ScanString (without its quotes) that is
// not plain: escapes resolved, a lone surrogate and invalid UTF-8 replaced by U+FFFD.
func Unquote(s []byte) []byte { return AppendUnquoted(make([]byte, 0, len(s)), s) }

// AppendUnquoted appends what Unquote returns to out.
func AppendUnquoted(out, s []byte) []byte {
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

// ReadString reads the string at d[i] and returns its value and the offset after it.
func ReadString(d []byte, i int) (string, int, error) {
	end, plain, err := ScanString(d, i)
	if err != nil {
		return "", 0, err
	}
	if plain {
		return string(d[i+1 : end-1]), end, nil
	}
	return string(Unquote(d[i+1 : end-1])), end, nil
}

// ScanNumber checks the number at d[i] and returns the offset after it.
func ScanNumber(d []byte, i int) (int, error) {
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
		return 0, ErrorAt(start, "invalid value")
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return 0, ErrorAt(i, "invalid number")
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
			return 0, ErrorAt(i, "invalid number")
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	return i, nil
}

// ScanLiteral checks that the literal lit (true, false, null) stands at d[i] and returns the
// offset after it.
func ScanLiteral(d []byte, i int, lit string) (int, error) {
	if len(d)-i < len(lit) || string(d[i:i+len(lit)]) != lit {
		return 0, ErrorAt(i, "invalid value")
	}
	return i + len(lit), nil
}

// ObjectNext advances an object scan: i is just after '{' (first) or after a member's value.
// It returns the next key and the offset of its value, or done at the closing brace (end is
// then the offset after it).
func ObjectNext(d []byte, i int, first bool) (key []byte, next int, done bool, err error) {
	var k MemberKey
	if k, next, done, err = ObjectMember(d, i, first); err != nil || done {
		return nil, next, done, err
	}
	return k.Value(d), next, false, nil
}

// MemberKey is where a member's key stands: d[At] is its opening quote, d[End-1] its closing
// one; Plain as ScanString says.
type MemberKey struct {
	At, End int
	Plain   bool
}

// Value is the key decoded: a slice of d when plain, which callers only compare.
func (k MemberKey) Value(d []byte) []byte {
	if k.Plain {
		return d[k.At+1 : k.End-1]
	}
	return Unquote(d[k.At+1 : k.End-1])
}

// KeyIs reports whether the key k of d is name, decoding it only when it is not plain.
func KeyIs(d []byte, k MemberKey, name string) bool {
	if k.Plain {
		return string(d[k.At+1:k.End-1]) == name
	}
	return string(k.Value(d)) == name
}

// ObjectMember is ObjectNext that leaves the key where it stands.
func ObjectMember(d []byte, i int, first bool) (key MemberKey, next int, done bool, err error) {
	i = SkipSpace(d, i)
	if i >= len(d) {
		return key, 0, false, ErrorAt(i, "unexpected end of object")
	}
	if d[i] == '}' {
		return key, i + 1, true, nil
	}
	if !first {
		if d[i] != ',' {
			return key, 0, false, ErrorAt(i, "expected , or } in object")
		}
		i = SkipSpace(d, i+1)
	}
	if i >= len(d) || d[i] != '"' {
		return key, 0, false, ErrorAt(i, "expected a string key")
	}
	key.At = i
	if key.End, key.Plain, err = ScanString(d, i); err != nil {
		return key, 0, false, err
	}
	i = SkipSpace(d, key.End)
	if i >= len(d) || d[i] != ':' {
		return key, 0, false, ErrorAt(i, "expected : after object key")
	}
	// Callers look at d[next] to dispatch on the value's first byte.
	if i = SkipSpace(d, i+1); i >= len(d) {
		return key, 0, false, ErrorAt(i, "unexpected end of input")
	}
	return key, i, false, nil
}

// ArrayNext advances an array scan like ObjectNext: it returns the offset of the next element,
// or done (next is then the offset after the closing bracket).
func ArrayNext(d []byte, i int, first bool) (next int, done bool, err error) {
	i = SkipSpace(d, i)
	if i >= len(d) {
		return 0, false, ErrorAt(i, "unexpected end of array")
	}
	if d[i] == ']' {
		return i + 1, true, nil
	}
	if !first {
		if d[i] != ',' {
			return 0, false, ErrorAt(i, "expected , or ] in array")
		}
		if i = SkipSpace(d, i+1); i >= len(d) {
			return 0, false, ErrorAt(i, "unexpected end of array")
		}
	}
	return i, false, nil
}

// SkipValue checks the value at d[i] (after space) and returns the offset after it.
func SkipValue(d []byte, i, depth int) (int, error) {
	if i >= len(d) {
		return 0, ErrorAt(i, "unexpected end of input")
	}
	switch c := d[i]; c {
	case '"':
		end, _, err := ScanString(d, i)
		return end, err
	case '{':
		if depth >= MaxDepth {
			return 0, ErrorAt(i, "nested too deeply")
		}
		i++
		for first := true; ; first = false {
			// The key is only checked, never decoded: managedFields' keys (k:{\"type\":...})
			// are full of escapes.
			_, next, done, err := ObjectMember(d, i, first)
			if err != nil || done {
				return next, err
			}
			if i, err = SkipValue(d, next, depth+1); err != nil {
				return 0, err
			}
		}
	case '[':
		if depth >= MaxDepth {
			return 0, ErrorAt(i, "nested too deeply")
		}
		i++
		for first := true; ; first = false {
			next, done, err := ArrayNext(d, i, first)
			if err != nil || done {
				return next, err
			}
			if i, err = SkipValue(d, next, depth+1); err != nil {
				return 0, err
			}
		}
	case 't':
		return ScanLiteral(d, i, "true")
	case 'f':
		return ScanLiteral(d, i, "false")
	case 'n':
		return ScanLiteral(d, i, "null")
	default:
		return ScanNumber(d, i)
	}
}

// DelimitValue returns the offset after the value at d[i] (after space) without validating
// it: a string ends at its first unescaped quote, an object or array at its matching bracket,
// anything else at the byte that ends a scalar. It is SkipValue for a body nobody reads, the
// request or response of an event the converter will filter (a read, a watch, a stage it
// does not trace): such bodies are most of a verbose cluster's bytes. It still finds the
// value's end exactly where SkipValue would on valid JSON, and it still fails on what would
// lose that end: an unterminated string, a bracket closed by the other kind or never closed,
// nesting deeper than MaxDepth, an empty scalar. The converter validates a delimited body
// (validDelimited) before it reads it, should the event be kept after all.
func DelimitValue(d []byte, i int) (int, error) {
	if i >= len(d) {
		return 0, ErrorAt(i, "unexpected end of input")
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
			return 0, ErrorAt(i, "invalid value")
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
			if depth >= MaxDepth {
				return 0, ErrorAt(i, "nested too deeply")
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
				return 0, ErrorAt(i, "mismatched bracket")
			}
			if depth == 0 {
				return i + 1, nil
			}
		}
		i++
	}
	return 0, ErrorAt(i, "unexpected end of input")
}

// scalarEnd holds the bytes that end a number or a literal: space, a separator, a bracket.
var scalarEnd = [256]bool{' ': true, '\t': true, '\n': true, '\r': true, ',': true, ':': true,
	'}': true, ']': true, '{': true, '[': true, '"': true}

// stringEnd returns the offset after the string at d[i] (a quote): after its first quote not
// escaped by a backslash. It looks at nothing else: escapes and control characters are for
// ScanString to judge.
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
			return 0, ErrorAt(start, "unterminated string")
		}
		i++
	}
}

// quoteOrBackslash reports whether any of the eight bytes of x is a quote or a backslash.
func quoteOrBackslash(x uint64) bool {
	return (bytesEqualTo(x, '"') | bytesEqualTo(x, '\\')) != 0
}
