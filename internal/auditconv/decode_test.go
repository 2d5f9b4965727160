package auditconv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"

	"github.com/kubetrail/kubetrail/internal/model"
)

// stdBody is the reference the scanner is held to: the same events decoded by encoding/json
// through struct tags (the receiver's decoder before the scanner replaced it).
type stdBody struct {
	Kind       string  `json:"kind"`
	APIVersion string  `json:"apiVersion"`
	Items      []Event `json:"items"`
	Event
}

func stdDecode(data []byte) ([]Event, error) {
	var b stdBody
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, err
	}
	if b.Kind == kindEventList {
		return b.Items, nil
	}
	return []Event{b.Event}, nil
}

// sameAnnotations compares the scanner's annotations of the events with encoding/json's map of
// the same data, and clears them so that the rest can be compared with reflect.DeepEqual.
func sameAnnotations(t *testing.T, data []byte, got []Event) {
	t.Helper()
	var ref struct {
		Kind        string            `json:"kind"`
		Annotations map[string]string `json:"annotations"`
		Items       []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"items"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	want := []map[string]string{ref.Annotations}
	if ref.Kind == kindEventList {
		want = want[:0]
		for _, it := range ref.Items {
			want = append(want, it.Annotations)
		}
	}
	for i := range got {
		m := map[string]string{}
		for _, a := range got[i].Annotations {
			m[a.Key] = a.Value
		}
		if len(m) != len(want[i]) || (len(m) > 0 && !reflect.DeepEqual(m, want[i])) {
			t.Fatalf("event %d: annotations %v, encoding/json %v", i, m, want[i])
		}
		got[i].Annotations = nil
	}
}

// TestDecoderMatchesEncodingJSON decodes every recorded webhook body and audit log line of
// every scenario with both decoders: the events must be equal field for field.
func TestDecoderMatchesEncodingJSON(t *testing.T) {
	bodies, err := filepath.Glob(filepath.Join(fixturesDir, "*", "audit-webhook", "*.json"))
	if err != nil || len(bodies) == 0 {
		t.Fatal("no recorded webhook bodies")
	}
	events := 0
	for _, p := range bodies {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeBody(data)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		want, err := stdDecode(data)
		if err != nil {
			t.Fatal(err)
		}
		sameAnnotations(t, data, got)
		for i := range got {
			got[i].spare = nil // where objectRef and responseStatus live; compared through them
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: the scanner's events differ from encoding/json's", p)
		}
		events += len(got)
	}
	logs, _ := filepath.Glob(filepath.Join(fixturesDir, "*", "audit.log"))
	for _, p := range logs {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			got, err := decodeLine(sc.Bytes(), nil)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			want, _ := stdDecode(sc.Bytes())
			got.spare = nil
			one := []Event{got}
			sameAnnotations(t, sc.Bytes(), one)
			if !reflect.DeepEqual(one[0], want[0]) {
				t.Fatalf("%s: line %q decodes differently", p, sc.Bytes()[:80])
			}
			events++
		}
		_ = f.Close()
	}
	if events < 500 {
		t.Fatalf("only %d events compared", events)
	}
}

func TestDecoderRefusesMalformedBodies(t *testing.T) {
	for _, body := range []string{
		``, `{`, `{"kind":"EventList",`, `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[}`,
		`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{"verb":"get",}]}`,
		`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]} x`,
		`{"kind":"Event","apiVersion":"audit.k8s.io/v1","requestObject":{"a":01}}`,
		`{"kind":"Event","apiVersion":"audit.k8s.io/v1","responseObject":{"a":"\x"}}`,
		"{\"kind\":\"Event\",\"apiVersion\":\"audit.k8s.io/v1\",\"verb\":\"a\x01\"}",
		`{"kind":"Event","apiVersion":"audit.k8s.io/v1","requestObject":[1,]}`,
		`{"kind":"Event","apiVersion":"audit.k8s.io/v1","requestObject":tru}`,
		strings.Repeat("[", maxDepth+1),
	} {
		if _, err := decodeBody([]byte(body)); err == nil || errors.Is(err, errWrongKind) {
			t.Errorf("%.60q: err = %v, want a syntax error", body, err)
		}
		if json.Valid([]byte(body)) {
			t.Fatalf("%.60q is valid JSON: the table is wrong", body)
		}
	}
	for _, body := range []string{`[]`, `null`, `"x"`, `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":{}}`, `{"kind":1,"apiVersion":"audit.k8s.io/v1"}`} {
		if _, err := decodeBody([]byte(body)); !errors.Is(err, errWrongKind) {
			t.Errorf("%q: err = %v, want the wrong-kind error", body, err)
		}
	}
}

// TestDecoderMarksBadItems: an item that is JSON but not an event is returned marked, so the
// converter can refuse it alone; the items around it decode as usual.
func TestDecoderMarksBadItems(t *testing.T) {
	good := strings.TrimSuffix(auditconvtest.EventList("good"), "]}")
	body := good + `,42,{"auditID":"t","requestReceivedTimestamp":"yesterday"},{"auditID":"v","verb":5},` +
		`{"auditID":"c","responseStatus":{"code":"201"}},{"auditID":"g","user":{"groups":[1]}},null]}`
	events, err := decodeBody([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"", "item: not an object", "requestReceivedTimestamp: not an RFC 3339 timestamp",
		"verb: not a string", "responseStatus.code: not a number", "user.groups: not a string", ""}
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d", len(events), len(want))
	}
	for i, ev := range events {
		if ev.Invalid != want[i] {
			t.Errorf("item %d (%s): Invalid = %q, want %q", i, ev.AuditID, ev.Invalid, want[i])
		}
	}
	if events[0].AuditID != "good" || events[0].ObjectRef == nil || events[0].ObjectRef.Name != "cm" {
		t.Fatalf("the good item decoded as %+v", events[0])
	}
}

func TestStringsDecodeAsEncodingJSON(t *testing.T) {
	for _, lit := range []string{
		`"plain"`, `"tab\there"`, `"\u003cb\u003e \u0026"`, `"\ud83d\ude00 pair"`, `"\ud83d lone high"`,
		`"\ude00 lone low"`, `"\ud83d\u0041 high then A"`, "\"bad utf8 \xff\xfe\"", `"\/ \\ \" \b\f\n\r"`,
		`"é ü 中文"`, "\"\u2028 line sep\"",
	} {
		got, end, err := readString([]byte(lit), 0)
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
		if q := string(appendQuoted(nil, want)); q != strings.TrimSuffix(buf.String(), "\n") {
			t.Errorf("%q: quoted as %s, encoding/json says %s", want, q, buf.String())
		}
	}
}

// FuzzJSONScan holds the scanner to encoding/json on arbitrary input: the same verdict on
// validity (and delimitValue to skipValue's end on valid input), the same trees, the same encoding of them, the same identity read by scanMeta as
// by metaOf on the tree, and a body accepted by the event decoder only when it is valid JSON.
func FuzzJSONScan(f *testing.F) {
	for _, seed := range fixtureSeeds(f) {
		f.Add(seed)
	}
	f.Add([]byte(`{"metadata":{"name":"a","ownerReferences":[{"controller":true,"uid":"u"}],"managedFields":[{}]},"kind":"Pod","metadata":{"uid":"x"}}`))
	f.Add([]byte(`{"a":[1,2.5e-3,-0,true,false,null,"\u00e9\ud800"],"b":{}}`))
	f.Add([]byte(`{"spec":{"nodeName":"n","x":[1]},"kind":"Pod","metadata":{"annotations":{"trace.kubernetes.io/context":"00-x","trace.kubernetes.io/context":7}},"spec":{"nodeName":"m"}}`))
	f.Add([]byte(`{"kind":"Binding","target":{"kind":"Node","name":"n","name":"o"},"metadata":{"annotations":null}}`))
	f.Add([]byte(` {"metadata" : {"resourceVersion":"1","labels":{"a b":"c\" d"}},"metadata":{"resourceVersion":"2"}}`))
	f.Add([]byte(`{"metadata":{"resourceVersion":null},"spec":{"x":"\\"}}`))
	f.Add([]byte(`{"spec":{"replicas":3},"metadata":{"labels":{"a":"b"},"resourceVersion":"4711"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		valid := json.Valid(data)
		end, err := skipValue(data, skipSpace(data, 0), 0)
		if scanned := err == nil && skipSpace(data, end) == len(data); scanned != valid {
			t.Fatalf("skipValue says valid=%v, encoding/json %v", scanned, valid)
		}
		// Delimiting finds the end validation finds, on any valid JSON.
		dend, derr := delimitValue(data, skipSpace(data, 0))
		if valid && (derr != nil || dend != end) {
			t.Fatalf("delimitValue ends at %d (%v), skipValue at %d", dend, derr, end)
		}
		if derr == nil && (dend <= skipSpace(data, 0) || dend > len(data)) {
			t.Fatalf("delimitValue ends at %d, outside the input", dend)
		}
		if _, err := decodeBody(data); err == nil && !valid {
			t.Fatal("decodeBody accepted invalid JSON")
		}
		// A patch's text is what json.Compact gives, or the input when that fails.
		var compact bytes.Buffer
		wantText := string(data)
		if json.Compact(&compact, data) == nil {
			wantText = compact.String()
		}
		if got := compactJSON(data); got != wantText {
			t.Fatalf("compactJSON = %q, json.Compact %q", got, wantText)
		}
		// A patch's precondition is what encoding/json reads, where the two agree on which
		// members count: encoding/json also matches keys in another case (the apiserver does
		// not) and merges a metadata given twice (a map keeps the last).
		var patch struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		lower := bytes.ToLower(data)
		once := func(key string) bool { return bytes.Count(lower, []byte(key)) <= 1 }
		if valid && json.Unmarshal(data, &patch) == nil && once(`"metadata"`) && once(`"resourceversion"`) && !bytes.Contains(data, []byte(`\u`)) {
			if got := patchPrecondition(data); got != patch.Metadata.ResourceVersion {
				t.Fatalf("patchPrecondition = %q, encoding/json %q", got, patch.Metadata.ResourceVersion)
			}
		}
		got, ok := parseTree(data)
		var want map[string]any
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		wantOK := valid && dec.Decode(&want) == nil && want != nil
		if ok != wantOK {
			t.Fatalf("parseTree ok = %v, encoding/json %v", ok, wantOK)
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
		if m := marshalJSON(got); m != strings.TrimSuffix(buf.String(), "\n") {
			t.Fatalf("encoding differs:\n%s\n%s", m, buf.String())
		}
		wantMeta := metaOf(want, model.DefaultTraceContextAnnotation)
		sm, ok := scanMeta(data, model.DefaultTraceContextAnnotation)
		if ok && bytes.Count(data, []byte(`"kind"`)) > 1 {
			// The scanner reads a Pod's node and a Binding's target only when no other kind
			// precedes them; with kind written twice, that order is the input's, not the tree's.
			if sm.NodeName == "" {
				wantMeta.NodeName = ""
			}
			if sm.Target == "" {
				wantMeta.Target = ""
			}
		}
		if !ok || sm != wantMeta {
			t.Fatalf("scanMeta = %+v (%v), metaOf = %+v", sm, ok, wantMeta)
		}
		body, _ := parseBody(data)
		stripNoise(want)
		if !reflect.DeepEqual(body, want) {
			t.Fatal("parseBody differs from parseTree + stripNoise")
		}
	})
}

// TestPooledEventsComeBackZeroed: a pooled event slice must hold nothing of an earlier batch,
// neither after a batch that decoded nor after one that failed half way through its items: its
// events are zero but for the storage they keep (list backing arrays, cleared; spare, zeroed).
func TestPooledEventsComeBackZeroed(t *testing.T) {
	zeroed := func(events []Event) bool {
		for _, ev := range events[:cap(events)] {
			if len(ev.User.Groups)+len(ev.SourceIPs)+len(ev.Annotations) != 0 ||
				slices.ContainsFunc(ev.User.Groups[:cap(ev.User.Groups)], func(s string) bool { return s != "" }) ||
				slices.ContainsFunc(ev.SourceIPs[:cap(ev.SourceIPs)], func(s string) bool { return s != "" }) ||
				slices.ContainsFunc(ev.Annotations[:cap(ev.Annotations)], func(a annotation) bool { return a != annotation{} }) ||
				(ev.spare != nil && *ev.spare != (eventStorage{})) {
				return false
			}
			ev.User.Groups, ev.SourceIPs, ev.Annotations, ev.spare = nil, nil, nil, nil
			if !reflect.DeepEqual(ev, Event{}) {
				return false
			}
		}
		return true
	}
	p := new([]Event)
	conv := newConverter(defaultSettings(), "test")
	events, err := decodeBodyInto([]byte(auditconvtest.EventList("a", "b", "c")), *p, conv)
	if err != nil || len(events) != 3 {
		t.Fatalf("decode: %v, %d events", err, len(events))
	}
	spares := make([]*eventStorage, len(events))
	for i := range events {
		if spares[i] = events[i].spare; spares[i] == nil {
			t.Fatal("an event with an objectRef has no storage")
		}
	}
	PutEvents(p, events)
	if cap(*p) < 3 || !zeroed(*p) {
		t.Fatal("after a batch, the pooled slice must be its storage, zeroed")
	}
	// The next batch is decoded into the same events, and so into the same storage.
	events, err = decodeBodyInto([]byte(auditconvtest.EventList("x", "y")), *p, conv)
	if err != nil || len(events) != 2 || events[0].AuditID != "x" || events[1].AuditID != "y" {
		t.Fatalf("decode again: %v, %d events", err, len(events))
	}
	for i := range events {
		if events[i].spare != spares[i] {
			t.Fatalf("event %d of the next batch did not reuse the storage of the one before it", i)
		}
	}
	PutEvents(p, events)
	if !zeroed(*p) {
		t.Fatal("after the next batch, the pooled slice must be zeroed again")
	}
	broken := strings.TrimSuffix(auditconvtest.EventList("d", "e"), "]}") + `,{"auditID":`
	if _, err := decodeBodyInto([]byte(broken), *p, conv); err == nil {
		t.Fatal("a truncated body must not decode")
	}
	PutEvents(p, nil)
	if !zeroed(*p) {
		t.Fatal("after a failed batch, what it decoded before failing must be cleared")
	}
}

// TestResponsesIndexedWhileDecoding: the index built while a webhook batch is decoded is the
// index flatten builds of the response body alone, for every response the converter indexes,
// and the events are otherwise what decodeBody returns.
func TestResponsesIndexedWhileDecoding(t *testing.T) {
	indexed := 0
	conv := newConverter(defaultSettings(), "test")
	for _, scenario := range []string{"conflict", "deployment", "job", "recreate", "secret", "unschedulable"} {
		for _, body := range auditconvtest.FixtureBodies(t, scenario) {
			events, err := decodeBodyInto(body, nil, conv)
			if err != nil {
				t.Fatal(err)
			}
			plain, _ := decodeBody(body)
			for i := range events {
				ev := &events[i]
				f, ok := ev.takeResponseIndex()
				kept := conv.filterReason(ev) == ""
				if want := kept && ev.indexWhileDecoding() && hasBody(ev.ResponseObject) && ev.ResponseObject[0] == '{'; ok != want {
					t.Fatalf("%s: indexed %v, want %v", ev.AuditID, ok, want)
				}
				if want := bodySet(0); !kept {
					if hasBody(ev.RequestObject) {
						want |= requestBody
					}
					if hasBody(ev.ResponseObject) {
						want |= responseBody
					}
					if ev.delimited&want != want {
						t.Fatalf("%s: filtered, its bodies %b delimited, want %b", ev.AuditID, ev.delimited, want)
					}
				} else if ev.delimited != 0 {
					t.Fatalf("%s: kept, yet its bodies %b were only delimited", ev.AuditID, ev.delimited)
				}
				ev.delimited = 0
				if !reflect.DeepEqual(*ev, plain[i]) {
					t.Fatalf("%s: the event differs from decodeBody's", ev.AuditID)
				}
				if !ok {
					continue
				}
				indexed++
				g, gok := flatten(ev.ResponseObject, nil)
				if !gok || !bytes.Equal(f.d, ev.ResponseObject) || !reflect.DeepEqual(f.nodes, g.nodes) || f.cut != g.cut {
					t.Fatalf("%s: the index built while decoding is not the body's", ev.AuditID)
				}
			}
		}
	}
	if indexed < 100 {
		t.Fatalf("%d responses indexed while decoding, want the fixtures' hundreds of writes", indexed)
	}
}

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
		{strings.Repeat("[", maxDepth+1), -1, "nested too deeply"},
	} {
		end, err := delimitValue([]byte(tt.in), 0)
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
