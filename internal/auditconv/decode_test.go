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
	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"
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
		strings.Repeat("[", jsonscan.MaxDepth+1),
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
	events, err := decodeBodyInto([]byte(auditconvtest.EventList("a", "b", "c")), *p, &conv.filters)
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
	events, err = decodeBodyInto([]byte(auditconvtest.EventList("x", "y")), *p, &conv.filters)
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
	if _, err := decodeBodyInto([]byte(broken), *p, &conv.filters); err == nil {
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
			events, err := decodeBodyInto(body, nil, &conv.filters)
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
