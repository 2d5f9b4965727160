package auditcapture

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const fixtures = "../fixtures"

// identities collects what a Fresh copy must never share with its recording: auditIDs, object UIDs
// (every "uid" outside the requesting user, whose identity is not an object's) and the names of
// objectRef, metadata and ownerReferences, in document order (maps by sorted key), with repeats.
func identities(t *testing.T, body []byte) (items int, seq []string) {
	t.Helper()
	var list struct {
		Items []any `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatalf("not valid JSON: %v", err)
	}
	var walk func(parent string, v any)
	walk = func(parent string, v any) {
		switch v := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				c := v[k]
				if k == "user" || k == "impersonatedUser" {
					continue
				}
				if s, ok := c.(string); ok && s != "" {
					switch {
					case k == "auditID", k == "uid":
						seq = append(seq, k+"="+s)
					case k == "name" && (parent == "objectRef" || parent == "metadata" || parent == "ownerReferences"):
						seq = append(seq, "name="+s)
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
	return len(list.Items), seq
}

func set(seq []string) map[string]bool {
	m := map[string]bool{}
	for _, s := range seq {
		m[s] = true
	}
	return m
}

func scenarioDirs(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(fixtures, "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no fixtures under %s: %v", fixtures, err)
	}
	return dirs
}

func TestFreshCopy(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC)
	for _, metadataOnly := range []bool{false, true} {
		for _, dir := range scenarioDirs(t) {
			name := filepath.Base(dir)
			if metadataOnly {
				name += "/metadata-only"
			}
			t.Run(name, func(t *testing.T) {
				c, err := Load(metadataOnly, dir)
				if err != nil {
					t.Fatal(err)
				}
				first := c.Values(CopyTag{Nonce: 7, N: 0}, now, Fresh)
				second := c.Values(CopyTag{Nonce: 7, N: 1}, now, Fresh)
				latest := time.Time{}
				for _, b := range c.Batches {
					tmplItems, tmplSeq := identities(t, b.Body)
					if len(tmplSeq) == 0 {
						t.Fatalf("%s: the recording names no identity", b.Source)
					}
					tmplIDs := set(tmplSeq)
					c1, c2 := b.Render(nil, first), b.Render(nil, second)

					t.Run("a copy is valid JSON with the recording's number of events", func(t *testing.T) {
						if items, _ := identities(t, c1); items != tmplItems {
							t.Errorf("%s: %d events in the copy, %d recorded", b.Source, items, tmplItems)
						}
					})
					t.Run("a copy shares no auditID, UID or object name with the recording", func(t *testing.T) {
						_, seq := identities(t, c1)
						for id := range set(seq) {
							if tmplIDs[id] {
								t.Errorf("%s: the copy still has %s", b.Source, id)
							}
						}
					})
					t.Run("a copy renames consistently: one recorded identity, one new one, everywhere", func(t *testing.T) {
						_, seq := identities(t, c1)
						if len(seq) != len(tmplSeq) {
							t.Fatalf("%s: %d identity occurrences in the copy, %d recorded", b.Source, len(seq), len(tmplSeq))
						}
						fwd, back := map[string]string{}, map[string]string{}
						for i := range seq {
							if v, ok := fwd[tmplSeq[i]]; ok && v != seq[i] {
								t.Errorf("%s: %s became both %s and %s", b.Source, tmplSeq[i], v, seq[i])
							}
							if v, ok := back[seq[i]]; ok && v != tmplSeq[i] {
								t.Errorf("%s: %s stands for both %s and %s", b.Source, seq[i], v, tmplSeq[i])
							}
							fwd[tmplSeq[i]], back[seq[i]] = seq[i], tmplSeq[i]
						}
					})
					t.Run("two copies share no auditID, UID or object name", func(t *testing.T) {
						_, s1 := identities(t, c1)
						_, s2 := identities(t, c2)
						ids2 := set(s2)
						for id := range set(s1) {
							if ids2[id] {
								t.Errorf("%s: both copies have %s", b.Source, id)
							}
						}
					})
					var list EventList
					if err := json.Unmarshal(c1, &list); err != nil {
						t.Fatal(err)
					}
					for _, it := range list.Items {
						for _, ts := range []string{it.RequestReceivedTimestamp, it.StageTimestamp} {
							tt, err := time.Parse(time.RFC3339Nano, ts)
							if err != nil {
								t.Fatalf("%s: copy timestamp %q: %v", b.Source, ts, err)
							}
							if tt.After(latest) {
								latest = tt
							}
						}
						if metadataOnly && (it.RequestObject != nil || it.ResponseObject != nil) {
							t.Errorf("%s: a metadata-only copy carries a body", b.Source)
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

func TestReplayCopy(t *testing.T) {
	c, err := Load(false, scenarioDirs(t)...)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC)
	passes := [][]string{c.Values(CopyTag{Nonce: 1, N: 0}, now, Replay), c.Values(CopyTag{Nonce: 1, N: 1}, now, Replay)}
	recorded := map[string]bool{}
	perPass := []map[string]bool{{}, {}}
	for _, b := range c.Batches {
		_, tmplSeq := identities(t, b.Body)
		for p, vals := range passes {
			copied := b.Render(nil, vals)
			if len(copied) != len(b.Body) {
				t.Errorf("%s pass %d: %d bytes, recorded %d: a replay copy must keep the byte length", b.Source, p, len(copied), len(b.Body))
			}
			_, seq := identities(t, copied)
			if len(seq) != len(tmplSeq) {
				t.Fatalf("%s pass %d: %d identity occurrences, recorded %d", b.Source, p, len(seq), len(tmplSeq))
			}
			for i := range seq {
				if strings.HasPrefix(tmplSeq[i], "auditID=") {
					if seq[i] == tmplSeq[i] {
						t.Errorf("%s pass %d: %s kept", b.Source, p, seq[i])
					}
					if len(seq[i]) != len(tmplSeq[i]) {
						t.Errorf("%s pass %d: %s became %s, another length", b.Source, p, tmplSeq[i], seq[i])
					}
					recorded[tmplSeq[i]] = true
					perPass[p][seq[i]] = true
				} else if seq[i] != tmplSeq[i] {
					t.Errorf("%s pass %d: replay changed %s to %s; only auditIDs change", b.Source, p, tmplSeq[i], seq[i])
				}
			}
		}
	}
	for p, ids := range perPass {
		if len(ids) != len(recorded) {
			t.Errorf("pass %d: %d distinct auditIDs, recorded %d: rewriting merged some", p, len(ids), len(recorded))
		}
		for id := range ids {
			if recorded[id] || (p == 1 && perPass[0][id]) {
				t.Errorf("pass %d: %s was already used", p, id)
			}
		}
	}
}

func TestTracedAuditIDsAreThoseOfTheCopysTracedEvents(t *testing.T) {
	c, err := Load(false, scenarioDirs(t)...)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, mode := range []Mode{Replay, Fresh} {
		vals := c.Values(CopyTag{Nonce: 7, N: 3}, now, mode)
		total := 0
		for _, b := range c.Batches {
			var list EventList
			if err := json.Unmarshal(b.Render(nil, vals), &list); err != nil {
				t.Fatal(err)
			}
			var want []string
			for i := range list.Items {
				if Traced(&list.Items[i]) {
					want = append(want, list.Items[i].AuditID)
				}
			}
			if got := b.TracedAuditIDs(nil, vals); !slices.Equal(got, want) {
				t.Errorf("%s, %s: TracedAuditIDs = %v, want the copy's traced auditIDs %v", mode, b.Source, got, want)
			}
			total += len(want)
		}
		if total == 0 {
			t.Errorf("%s: no traced event in the recorded scenarios", mode)
		}
	}
}

func TestNonUUIDAuditIDKeepsItsLength(t *testing.T) {
	for _, id := range []string{"a", "req-42", "0123456789abcdefXYZ"} {
		tk := token{kind: tokAudit, orig: id}
		a, b := sameLength(tk, 1), sameLength(tk, 2)
		if len(a) != len(id) || len(b) != len(id) || a == b {
			t.Errorf("%q -> %q, %q: want two different strings of length %d", id, a, b, len(id))
		}
	}
}

func TestJSONLinesCaptureEqualsTheRecordedFiles(t *testing.T) {
	dir := filepath.Join(fixtures, "deployment")
	fromDir, err := Load(false, dir)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	for _, b := range fromDir.Batches {
		if _, err := gz.Write(b.Body); err != nil {
			t.Fatal(err)
		}
		if _, err := gz.Write([]byte("\n")); err != nil {
			t.Fatal(err)
		}
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "capture.jsonl.gz")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile, err := Load(false, path)
	if err != nil {
		t.Fatal(err)
	}
	// The recorded files end with a newline, a line of the jsonl capture does not.
	if len(fromFile.Batches) != len(fromDir.Batches) || fromFile.Events != fromDir.Events || fromFile.Bytes != fromDir.Bytes-len(fromDir.Batches) {
		t.Fatalf("jsonl capture: %d batches, %d events, %d bytes; directory: %d, %d, %d",
			len(fromFile.Batches), fromFile.Events, fromFile.Bytes, len(fromDir.Batches), fromDir.Events, fromDir.Bytes)
	}
	now := time.Now()
	v1, v2 := fromDir.Values(CopyTag{N: 3}, now, Fresh), fromFile.Values(CopyTag{N: 3}, now, Fresh)
	for i := range fromDir.Batches {
		if !bytes.Equal(bytes.TrimSpace(fromDir.Batches[i].Render(nil, v1)), fromFile.Batches[i].Render(nil, v2)) {
			t.Errorf("batch %d renders differently from the jsonl capture", i)
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
	got := string((&Batch{Body: body, spans: spans}).Render(nil, []string{"demo-x"}))
	want := `{"metadata":{"name":"demo-x","labels":{"app":"demo"}},"spec":{"containers":[{"name" : "demo-x","image":"demo"}]}}`
	if got != want {
		t.Errorf("render =\n%s\nwant\n%s", got, want)
	}
}

func TestTracedFollowsTheReceiverDefaults(t *testing.T) {
	ev := func(stage, verb, group, resource string) *Event {
		e := &Event{AuditID: "x", Stage: stage, Verb: verb}
		e.ObjectRef = &struct {
			Resource string `json:"resource"`
			APIGroup string `json:"apiGroup"`
			Name     string `json:"name"`
			UID      string `json:"uid"`
		}{Resource: resource, APIGroup: group}
		return e
	}
	for _, tc := range []struct {
		name string
		ev   *Event
		want bool
	}{
		{"a completed create of a pod is traced", ev("ResponseComplete", "create", "", "pods"), true},
		{"a panicked patch is traced", ev("Panic", "patch", "apps", "deployments"), true},
		{"the RequestReceived stage is not", ev("RequestReceived", "create", "", "pods"), false},
		{"a get is not", ev("ResponseComplete", "get", "", "pods"), false},
		{"a watch is not", ev("ResponseComplete", "watch", "", "pods"), false},
		{"a lease renewal is not", ev("ResponseComplete", "update", "coordination.k8s.io", "leases"), false},
		{"a core Event is not", ev("ResponseComplete", "create", "", "events"), false},
		{"an events.k8s.io Event is not", ev("ResponseComplete", "create", "events.k8s.io", "events"), false},
		{"a non-resource request is not", &Event{AuditID: "x", Stage: "ResponseComplete", Verb: "create"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Traced(tc.ev); got != tc.want {
				t.Errorf("Traced = %v, want %v", got, tc.want)
			}
		})
	}
}

// BenchmarkCopy is a generator's own cost of one copy of the deployment recording: token values
// and every batch rendered.
func BenchmarkCopy(b *testing.B) {
	c, err := Load(false, fixtures+"/deployment")
	if err != nil {
		b.Fatal(err)
	}
	var buf []byte
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		vals := c.Values(CopyTag{N: uint64(i)}, now, Fresh)
		for j := range c.Batches {
			buf = c.Batches[j].Render(buf[:0], vals)
		}
	}
	b.ReportMetric(float64(b.N*c.Events)/b.Elapsed().Seconds(), "events/s")
}

// Rebatch keeps every event, in order, in full batches of n but the last; a fresh copy of the
// rebatched capture names the same new objects as one of the recording (one token table).
func TestRebatchKeepsTheEventsInOrder(t *testing.T) {
	c, err := Load(false, scenarioDirs(t)...)
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	r, err := c.Rebatch(n)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Batches) != (c.Events+n-1)/n || r.Events != c.Events || c.Events <= n {
		t.Fatalf("%d events in %d batches from %d in %d", r.Events, len(r.Batches), c.Events, len(c.Batches))
	}
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	auditIDs := func(c *Capture, mode Mode) (ids []string) {
		vals := c.Values(CopyTag{Nonce: 7, N: 3}, now, mode)
		for i, b := range c.Batches {
			var list EventList
			if err := json.Unmarshal(b.Render(nil, vals), &list); err != nil {
				t.Fatal(err)
			}
			if c == r && i < len(c.Batches)-1 && len(list.Items) != n {
				t.Fatalf("batch %d holds %d events, want %d", i, len(list.Items), n)
			}
			for _, it := range list.Items {
				id := it.AuditID
				if it.ObjectRef != nil {
					id += "/" + it.ObjectRef.Name + "/" + it.ObjectRef.UID
				}
				ids = append(ids, id)
			}
		}
		return ids
	}
	for _, mode := range []Mode{Replay, Fresh} {
		if got, want := auditIDs(r, mode), auditIDs(c, mode); !slices.Equal(got, want) {
			t.Errorf("%s: the rebatched copy's events differ from the recording's copy's", mode)
		}
	}
	if same, _ := c.Rebatch(0); same != c {
		t.Error("Rebatch(0) is not the capture itself")
	}
}
