package jsonscan

import (
	"bytes"
	"strings"
	"testing"
)

// TestDelimitValue: where delimiting ends a value, and what it still refuses.
func TestDelimitValue(t *testing.T) {
	deep := strings.Repeat(`[{"a":`, 300) + "1" + strings.Repeat("}]", 300)
	for _, tt := range []struct {
		in   string
		end  int // -1: refused
		note string
	}{
		{`"a\"b\\"x`, 8, "escaped quote and backslash"},
		{`"abcdefghijklmnop\"qrstuvwxyz"`, 30, "an escape past the first eight bytes"},
		{`{"k":"}]","v":[1,{"w":"\\"}]},`, 29, "brackets inside strings"},
		{`{"n":01,"s":"\q"} `, 17, "malformed inside, delimited"},
		{`12.5e3,`, 6, "a number"},
		{`true}`, 4, "a literal"},
		{deep + ",", len(deep), "nesting past the first 256 levels"},
		{`"abc\`, -1, "a backslash at the end"},
		{`"abcdefghij`, -1, "unterminated string"},
		{`{"a":[1}`, -1, "an array closed by a brace"},
		{`[{"a":1]`, -1, "an object closed by a bracket"},
		{`{"a":1`, -1, "never closed"},
		{`,`, -1, "no value"},
		{strings.Repeat("[", MaxDepth+1), -1, "nested too deeply"},
	} {
		end, err := DelimitValue([]byte(tt.in), 0)
		if tt.end < 0 {
			if err == nil {
				t.Errorf("%s: %q delimited at %d, want refused", tt.note, tt.in, end)
			}
			continue
		}
		if err != nil || end != tt.end {
			t.Errorf("%s: %q delimited at %d (%v), want %d", tt.note, tt.in, end, err, tt.end)
		}
	}
}

// TestStringStopFindsEveryStopByte puts each byte value at each place of a word of plain
// letters (and of high bytes, which carry borrows differently): stringStop must flag exactly
// the quote, the backslash and the control characters, quoteOrBackslash the first two.
func TestStringStopFindsEveryStopByte(t *testing.T) {
	for _, fill := range []byte{'a', 0xC3, 0x20, 0x7F} {
		for pos := range 8 {
			for b := range 256 {
				word := bytes.Repeat([]byte{fill}, 8)
				word[pos] = byte(b)
				x := uint64(0)
				for i := 7; i >= 0; i-- {
					x = x<<8 | uint64(word[i])
				}
				want := b == '"' || b == '\\' || b < 0x20
				if got := stringStop(x); got != want {
					t.Fatalf("byte %#x at %d among %#x: stringStop = %v, want %v", b, pos, fill, got, want)
				}
				if got, want := quoteOrBackslash(x), b == '"' || b == '\\'; got != want {
					t.Fatalf("byte %#x at %d among %#x: quoteOrBackslash = %v, want %v", b, pos, fill, got, want)
				}
			}
		}
	}
}
