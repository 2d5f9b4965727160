package main

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"
)

const fixtures = "../../fixtures"

// identities collects what a copy must never share with its recording: auditIDs, object UIDs
// (every "uid" outside the requesting user, whose identity is not an object's) and the names of
// objectRef, metadata and ownerReferences.
func identities(t *testing.T, body []byte) (items int, ids map[string]bool) {
	t.Helper()
	var list struct {
		Items []any `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatalf("not valid JSON: %v", err)
	}
	ids = map[string]bool{}
	var walk func(parent string, v any)
	walk = func(parent string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				if k == "user" || k == "impersonatedUser" {
					continue
				}
				if s, ok := c.(string); ok && s != "" {
					switch {
					case k == "auditID", k == "uid":
						ids[k+"="+s] = true
					case k == "name" && (parent == "objectRef" || parent == "metadata" || parent == "ownerReferences"):
						ids["name="+s] = true
					}
				}
				walk(k, c)
			}
		case []any:
			for _, c := range v {
				walk(parent, c)
			}
		}
	}
	walk("", list.Items)
	return len(list.Items), ids
}

func TestCopy(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(fixtures, "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no fixtures under %s: %v", fixtures, err)
	}
	now := time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC)
	for _, metadataOnly := range []bool{false, true} {
		for _, dir := range dirs {
			name := filepath.Base(dir)
			if metadataOnly {
				name += "/metadata-only"
			}
			t.Run(name, func(t *testing.T) {
				s, err := loadScenario(dir, metadataOnly)
				if err != nil {
					t.Fatal(err)
				}
				first := s.values(copyTag{nonce: 7, n: 0}, now)
				second := s.values(copyTag{nonce: 7, n: 1}, now)
				latest := time.Time{}
				for _, b := range s.batches {
					tmplItems, tmplIDs := identities(t, b.body)
					if len(tmplIDs) == 0 {
						t.Fatalf("%s: the recording names no identity", b.file)
					}
					c1, c2 := b.render(nil, first), b.render(nil, second)

					t.Run("a copy is valid JSON with the recording's number of events", func(t *testing.T) {
						if items, _ := identities(t, c1); items != tmplItems {
							t.Errorf("%s: %d events in the copy, %d recorded", b.file, items, tmplItems)
						}
					})
					t.Run("a copy shares no auditID, UID or object name with the recording", func(t *testing.T) {
						_, ids := identities(t, c1)
						for id := range ids {
							if tmplIDs[id] {
								t.Errorf("%s: the copy still has %s", b.file, id)
							}
						}
						if len(ids) != len(tmplIDs) {
							t.Errorf("%s: %d distinct identities in the copy, %d recorded: rewriting merged or split some", b.file, len(ids), len(tmplIDs))
						}
					})
					t.Run("two copies share no auditID, UID or object name", func(t *testing.T) {
						_, ids1 := identities(t, c1)
						_, ids2 := identities(t, c2)
						for id := range ids1 {
							if ids2[id] {
								t.Errorf("%s: both copies have %s", b.file, id)
							}
						}
					})
					var list eventList
					if err := json.Unmarshal(c1, &list); err != nil {
						t.Fatal(err)
					}
					for _, it := range list.Items {
						for _, ts := range []string{it.RequestReceivedTimestamp, it.StageTimestamp} {
							tt, err := time.Parse(time.RFC3339Nano, ts)
							if err != nil {
								t.Fatalf("%s: copy timestamp %q: %v", b.file, ts, err)
							}
							if tt.After(latest) {
								latest = tt
							}
						}
						if metadataOnly && (it.RequestObject != nil || it.ResponseObject != nil) {
							t.Errorf("%s: a metadata-only copy carries a body", b.file)
						}
					}
				}
				if !latest.Equal(now) {
					t.Errorf("the copy's latest timestamp is %s, want the copy's now %s", latest, now)
				}
			})
		}
	}
}

func TestMetadataOnlySetsLevel(t *testing.T) {
	body, err := stripBodies([]byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[` +
		`{"level":"RequestResponse","auditID":"a","requestObject":{"x":1},"responseObject":{"y":2}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0]["level"] != "Metadata" || list.Items[0]["requestObject"] != nil ||
		list.Items[0]["responseObject"] != nil || list.Items[0]["auditID"] != "a" {
		t.Errorf("stripped event = %v", list.Items)
	}
}

func TestNameOnlyReplacedAsNameValue(t *testing.T) {
	body := []byte(`{"metadata":{"name":"demo","labels":{"app":"demo"}},"spec":{"containers":[{"name" : "demo","image":"demo"}]}}`)
	spans := findSpans(body, []token{{kind: tokName, orig: "demo"}})
	got := string((&batch{body: body, spans: spans}).render(nil, []string{"demo-x"}))
	want := `{"metadata":{"name":"demo-x","labels":{"app":"demo"}},"spec":{"containers":[{"name" : "demo-x","image":"demo"}]}}`
	if got != want {
		t.Errorf("render =\n%s\nwant\n%s", got, want)
	}
}

// BenchmarkCopy is the generator's own cost of one scenario copy: token values and every batch
// rendered.
func BenchmarkCopy(b *testing.B) {
	s, err := loadScenario(fixtures+"/deployment", false)
	if err != nil {
		b.Fatal(err)
	}
	var buf []byte
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		vals := s.values(copyTag{n: uint64(i)}, now)
		for j := range s.batches {
			buf = s.batches[j].render(buf[:0], vals)
		}
	}
	b.ReportMetric(float64(b.N*s.events)/b.Elapsed().Seconds(), "events/s")
}
