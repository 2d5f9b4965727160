package trail

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Escape makes span data safe to print on a terminal: every control character (C0 such as ESC,
// BEL, CR, LF and NUL; DEL; the C1 range U+0080–U+009F), every character that reorders or
// hides text (the bidi embeddings, overrides and isolates U+202A–U+202E and U+2066–U+2069, the
// marks U+200E, U+200F and U+061C, the line and paragraph separators U+2028 and U+2029) and
// every byte that is not UTF-8 is written as Go's %q writes it, without the quotes: \x1b, \a,
// \r, \n, \x00, \u0085, \u202e, \xff. Span data comes from audit events that anyone allowed to
// write to the apiserver (or to a log pipeline) shapes, so a name or message must not set a
// terminal's title, clear its screen, forge lines of the tree or reorder what a reader sees
// (kubectl escapes what it prints for the same reason). Printable text, including the tree's
// own marks (·, ✗, →, …), passes unchanged, so does a backslash: the output is for reading,
// and -o json is the lossless form.
func Escape(s string) string {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if unsafeRune(r, size) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s // the common case: nothing to escape, no copy
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r, size):
			q := strconv.QuoteRune(r) // '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func unsafeRune(r rune, size int) bool {
	if r == utf8.RuneError && size == 1 {
		return true // not UTF-8
	}
	if unicode.IsControl(r) { // C0, DEL, C1
		return true
	}
	switch {
	case r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x200E, r == 0x200F, r == 0x061C, r == 0x2028, r == 0x2029:
		return true
	}
	return false
}

// lines writes the text outputs one line at a time, each escaped as a whole (Escape): the
// format strings are this package's and hold no control characters, the arguments are span
// data, so escaping the formatted line escapes exactly what came from the spans. The only
// newline written is the one that ends the line.
type lines struct{ w io.Writer }

func (l lines) printf(format string, a ...any) {
	fmt.Fprint(l.w, Escape(fmt.Sprintf(format, a...))+"\n")
}

func (l lines) blank() { fmt.Fprint(l.w, "\n") }
