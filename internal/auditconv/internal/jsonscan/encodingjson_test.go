package jsonscan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
)

// FuzzScan holds the scanner to encoding/json on arbitrary input: the same verdict on validity
// (and DelimitValue to SkipValue's end on valid input), the same compact text, the same trees
// and the same encoding of them.
func FuzzScan(f *testing.F) {
	for _, seed := range fixtureItems(f) {
		f.Add(seed)
	}
	f.Add([]byte(`{"metadata":{"name":"a","ownerReferences":[{"controller":true,"uid":"u"}],"managedFields":[{}]},"kind":"Pod","metadata":{"uid":"x"}}`))
	f.Add([]byte(`{"a":[1,2.5e-3,-0,true,false,null,"\u00e9\ud800"],"b":{}}`))
	f.Add([]byte(` {"metadata" : {"resourceVersion":"1","labels":{"a b":"c\" d"}},"metadata":{"resourceVersion":"2"}}`))
	f.Add([]byte(`{"metadata":{"resourceVersion":null},"spec":{"x":"\\"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		valid := json.Valid(data)
		end, err := SkipValue(data, SkipSpace(data, 0), 0)
		if scanned := err == nil && SkipSpace(data, end) == len(data); scanned != valid {
			t.Fatalf("SkipValue says valid=%v, encoding/json %v", scanned, valid)
		}
		// Delimiting finds the end validation finds, on any valid JSON.
		dend, derr := DelimitValue(data, SkipSpace(data, 0))
		if valid && (derr != nil || dend != end) {
			t.Fatalf("DelimitValue ends at %d (%v), SkipValue at %d", dend, derr, end)
		}
		if derr == nil && (dend <= SkipSpace(data, 0) || dend > len(data)) {
			t.Fatalf("DelimitValue ends at %d, outside the input", dend)
		}
		// Compact gives what json.Compact gives, or the input when that fails.
		var compact bytes.Buffer
		wantText := string(data)
		if json.Compact(&compact, data) == nil {
			wantText = compact.String()
		}
		if got := Compact(data); got != wantText {
			t.Fatalf("Compact = %q, json.Compact %q", got, wantText)
		}
		got, ok := ParseTree(data)
		var want map[string]any
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		wantOK := valid && dec.Decode(&want) == nil && want != nil
		if ok != wantOK {
			t.Fatalf("ParseTree ok = %v, encoding/json %v", ok, wantOK)
		}
		if !ok {
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("trees differ:\n%#v\n%#v", got, want)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(want); err != nil {
			t.Fatal(err)
		}
		if m := Marshal(got); m != strings.TrimSuffix(buf.String(), "\n") {
			t.Fatalf("encoding differs:\n%s\n%s", m, buf.String())
		}
	})
}

// fixtureItems are audit events of the recorded scenarios, one of each request shape (verb,
// resource, subresource, status code) under 8 KiB: real bodies, escapes and nesting included.
func fixtureItems(f *testing.F) [][]byte {
	seen := map[string]bool{}
	var items [][]byte
	for _, scenario := range []string{"secret", "conflict", "deployment"} {
		for _, body := range auditconvtest.FixtureBodies(f, scenario) {
			var list struct {
				Items []json.RawMessage `json:"items"`
			}
			if err := json.Unmarshal(body, &list); err != nil {
				f.Fatal(err)
			}
			for _, item := range list.Items {
				var shape struct {
					Verb      string `json:"verb"`
					ObjectRef struct {
						Resource, Subresource string
					} `json:"objectRef"`
					ResponseStatus struct{ Code int } `json:"responseStatus"`
				}
				if json.Unmarshal(item, &shape) != nil || len(item) > 8<<10 {
					continue
				}
				key := fmt.Sprint(shape.Verb, shape.ObjectRef.Resource, shape.ObjectRef.Subresource, shape.ResponseStatus.Code)
				if seen[key] {
					continue
				}
				seen[key] = true
				items = append(items, item)
			}
		}
	}
	return items
}

// TestStringsDecodeAsEncodingJSON: strings read as encoding/json reads them (escapes, surrogate
// pairs, invalid UTF-8) and quoted as it quotes them with HTML escaping off.
func TestStringsDecodeAsEncodingJSON(t *testing.T) {
	for _, lit := range []string{
		`"plain"`, `"tab\there"`, `"\u003cb\u003e \u0026"`, `"\ud83d\ude00 pair"`, `"\ud83d lone high"`,
		`"\ude00 lone low"`, `"\ud83d\u0041 high then A"`, "\"bad utf8 \xff\xfe\"", `"\/ \\ \" \b\f\n\r"`,
		`"é ü 中文"`, "\"\u2028 line sep\"",
	} {
		got, end, err := ReadString([]byte(lit), 0)
		if err != nil || end != len(lit) {
			t.Fatalf("%q: end %d err %v", lit, end, err)
		}
		var want string
		if err := json.Unmarshal([]byte(lit), &want); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%q: got %q, want %q", lit, got, want)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(want)
		if q := string(AppendQuoted(nil, want)); q != strings.TrimSuffix(buf.String(), "\n") {
			t.Errorf("%q: quoted as %s, encoding/json says %s", want, q, buf.String())
		}
	}
}
