package auditconv

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
	"github.com/kubetrail/kubetrail/internal/auditconv/internal/jsonscan"

	"github.com/kubetrail/kubetrail/internal/model"
)

// diffFlat diffs two indexed bodies (the receiver diffs a cache entry against a body, diffCached).
func diffFlat(old, cur *flatBody) diffResult {
	w := getFlatWork()
	defer w.put()
	return w.diff(old, cur)
}

// compact is compactInto of fresh storage.
func (f *flatBody) compact() []byte { return f.compactInto(nil) }

// fixtureObjects returns every request and response object of the recorded webhook bodies,
// in arrival order.
func fixtureObjects(tb testing.TB) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, scenario := range []string{"conflict", "deployment", "job", "recreate", "secret", "unschedulable"} {
		for _, body := range auditconvtest.FixtureBodies(tb, scenario) {
			var list struct {
				Items []struct {
					RequestObject, ResponseObject json.RawMessage
				}
			}
			if err := json.Unmarshal(body, &list); err != nil {
				tb.Fatal(err)
			}
			for _, it := range list.Items {
				for _, raw := range []json.RawMessage{it.RequestObject, it.ResponseObject} {
					if len(raw) > 0 && raw[0] == '{' {
						out = append(out, raw)
					}
				}
			}
		}
	}
	return out
}

// checkFlat holds flatten, encodeFlat and compact to the tree they replace: a body indexes
// exactly when it parses, encodes as its tree does, and its compact copy is JSON without the
// managedFields that encodes the same.
func checkFlat(t *testing.T, raw []byte) (flatBody, jsonscan.Tree, bool) {
	t.Helper()
	f, ok := flatten(raw, nil)
	tr, treeOK := parseBody(raw)
	if ok != treeOK {
		t.Fatalf("flatten ok = %v, parseBody ok = %v for %.200q", ok, treeOK, raw)
	}
	if !ok {
		return f, nil, false
	}
	want := jsonscan.Marshal(tr)
	if got := encodeFlat(&f); got != want {
		t.Fatalf("encodeFlat differs from jsonscan.Marshal(parseBody):\n%s\n%s", got, want)
	}
	kept := f.compact()
	if !json.Valid(kept) {
		t.Fatalf("compact is not JSON: %.300q (cut %v of %.300q)", kept, f.cut, raw)
	}
	k, ok := flatten(kept, nil)
	if !ok || encodeFlat(&k) != want {
		t.Fatalf("compact encodes differently: %.300q", kept)
	}
	if nodes := f.keptNodes(nil); !reflect.DeepEqual(nodes, k.nodes) {
		t.Fatalf("keptNodes is not the index of the compact body %.300q", kept)
	}
	if f.cut[1] > 0 && len(kept) >= len(raw) {
		t.Fatal("compact kept the managedFields")
	}
	for _, keys := range []*contextKeys{newContextKeys(model.DefaultTraceContextAnnotations()), newContextKeys([]string{"a"})} {
		sm, ok := scanMeta(raw, keys)
		fm := f.meta(keys)
		if ok && bytes.Count(raw, []byte(`"kind"`)) > 1 {
			// With kind written twice, scanMeta reads a Pod's node and a Binding's target in the
			// input's order (see FuzzObjectMeta), the index as a map would.
			sm.NodeName, fm.NodeName, sm.Target, fm.Target = "", "", "", ""
		}
		if !ok || !reflect.DeepEqual(sm, fm) {
			t.Fatalf("meta from the index %+v, scanMeta %+v (%v)", fm, sm, ok)
		}
	}
	return f, tr, true
}

func TestFlatMatchesTrees(t *testing.T) {
	objects := fixtureObjects(t)
	if len(objects) < 100 {
		t.Fatalf("%d recorded objects, want the fixtures' hundreds", len(objects))
	}
	flats := make([]flatBody, 0, len(objects))
	trees := make([]jsonscan.Tree, 0, len(objects))
	withManagedFields := 0
	for _, raw := range objects {
		f, tr, ok := checkFlat(t, raw)
		if !ok {
			t.Fatalf("a recorded object does not index: %.200q", raw)
		}
		if f.cut[1] > 0 {
			withManagedFields++
		}
		flats, trees = append(flats, f), append(trees, tr)
	}
	if withManagedFields == 0 {
		t.Fatal("no recorded object had managedFields: the cut is untested")
	}
	// Every object against the next ten: the same object's successive writes (a rollout's
	// status updates, keyed lists of conditions and containers) and unrelated pairs alike.
	pairs, changed := 0, 0
	for i := range flats {
		for j := i + 1; j < len(flats) && j <= i+10; j++ {
			got := diffFlat(&flats[i], &flats[j])
			want := treeDiff(trees[i], trees[j])
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("objects %d and %d: diffFlat\n%+v\ntree diff\n%+v", i, j, got, want)
			}
			pairs++
			if got.Total > 0 {
				changed++
			}
		}
	}
	if changed == 0 || changed == pairs {
		t.Fatalf("%d of %d pairs differ: the pairs must include both changes and none", changed, pairs)
	}
}

func TestFlatEdgeCases(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		// Duplicate keys: the last counts, as in a map.
		{`{"a":1,"a":2}`, `{"a":2}`},
		// Escaped keys and strings equal to plain ones are the same value.
		{`{"\u0061":"x\u0079"}`, `{"a":"xy"}`},
		{`{"metad\u0061ta":{"managedFields":[1],"name":"n"}}`, `{"metadata":{"name":"m"}}`},
		// managedFields first, last, alone, twice, and not under the root's metadata.
		{`{"metadata":{"managedFields":[{"a":1}] , "name":"n"}}`, `{"metadata":{"name":"n","managedFields":[]}}`},
		{`{"metadata":{"managedFields":{}}}`, `{"metadata":{"managedFields":null,"x":1,"managedFields":2}}`},
		{`{"spec":{"metadata":{"managedFields":[1]}}}`, `{"spec":{"metadata":{}}}`},
		{`{"metadata":[1]}`, `{"metadata":"x"}`},
		// Numbers compare by their text, literals by kind.
		{`{"n":1,"m":1.0,"t":true,"z":null}`, `{"n":1,"m":1,"t":false,"z":null}`},
		// Lists keyed by name or type, and lists that are not (duplicate, empty, non-string keys).
		{`{"l":[{"name":"a","v":1},{"name":"b"}]}`, `{"l":[{"name":"b"},{"name":"a","v":2},{"name":"c"}]}`},
		{`{"l":[{"name":"a"},{"name":"a"}]}`, `{"l":[{"name":"a"}]}`},
		{`{"l":[{"name":""}]}`, `{"l":[{"name":"x"}]}`},
		{`{"l":[{"name":1,"type":"t"}]}`, `{"l":[{"name":2,"type":"u"}]}`},
		{`{"l":[{"name":"a","name":"b"}]}`, `{"l":[{"name":"b"}]}`},
		{`{"l":[]}`, `{"l":[1]}`},
		{`{"l":[1,[2],{"a":3}]}`, `{"l":[1,[3]]}`},
		// Keys that need quoting in a path, and list keys with dots and colons.
		{`{"metadata":{"labels":{"app.kubernetes.io/name":"a","":"e"}}}`, `{"metadata":{"labels":{"app.kubernetes.io/name":"b"}}}`},
		{`{"l":[{"name":"10.0.0.1:80","v":1},{"name":"a b"}]}`, `{"l":[{"name":"10.0.0.1:80","v":2},{"name":"a b","v":1}]}`},
		// Noise and non-ASCII text.
		{`{"metadata":{"resourceVersion":"1","generation":1},"s":"é\u2028"}`, `{"metadata":{"resourceVersion":"2","generation":2},"s":"e"}`},
		// Members aligned (diffAligned) and nearly so: unsorted keys edited at two levels, a
		// differing key that appears twice (the last counts), an equal last copy of a key
		// whose first copy differs, more than maxAligned edits, an escaped key.
		{`{"z":1,"y":{"x":1,"w":2},"a":[1]}`, `{"z":2,"y":{"x":1,"w":3},"a":[2]}`},
		{`{"a":1,"b":2,"a":3}`, `{"a":1,"b":2,"a":4}`},
		{`{"a":1,"b":2,"a":3}`, `{"a":5,"b":2,"a":3}`},
		{`{"i":1,"h":1,"g":1,"f":1,"e":1,"d":1,"c":1,"b":1,"a":1}`, `{"i":2,"h":2,"g":2,"f":2,"e":2,"d":2,"c":2,"b":2,"a":2}`},
		{`{"\u0062":1,"a":1}`, `{"\u0062":2,"a":1}`},
	} {
		a, ta, okA := checkFlat(t, []byte(tc.a))
		b, tb, okB := checkFlat(t, []byte(tc.b))
		if !okA || !okB {
			t.Fatalf("%s / %s: does not index", tc.a, tc.b)
		}
		for _, dir := range [][2]int{{0, 1}, {1, 0}} {
			x, y, tx, ty := &a, &b, ta, tb
			if dir[0] == 1 {
				x, y, tx, ty = &b, &a, tb, ta
			}
			if got, want := diffFlat(x, y), treeDiff(tx, ty); !reflect.DeepEqual(got, want) {
				t.Errorf("%s -> %s: diffFlat %+v, tree diff %+v", x.d, y.d, got, want)
			}
		}
	}
	for _, bad := range []string{``, `[]`, `"x"`, `{"a":}`, `{"a":1} x`, `{"a":1`, `{"metadata":{"managedFields":[}}`} {
		if _, ok := flatten([]byte(bad), nil); ok {
			t.Errorf("flatten accepted %q", bad)
		}
	}
}

// TestDiffAlignedTakesEditedObjects: two bodies of one object whose members are in the same
// order are diffed by walking only the members that changed; anything else is left to the
// sorted walk, having diffed nothing.
func TestDiffAlignedTakesEditedObjects(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{`{"z":1,"y":{"x":1,"w":2},"a":3}`, `{"z":2,"y":{"x":1,"w":3},"a":3}`, true},
		{`{"z":1,"a":1}`, `{"z":1,"a":1,"b":1}`, false},       // a member added
		{`{"z":1,"a":1}`, `{"a":1,"z":1}`, false},             // reordered
		{`{"a":1,"b":2,"a":3}`, `{"a":1,"b":2,"a":4}`, false}, // a changed key twice
		{`{"\u0062":1,"a":1}`, `{"\u0062":2,"a":1}`, false},   // an escaped key
		{`{"a":1,"b":1,"c":1,"d":1,"e":1,"f":1,"g":1,"h":1,"i":1}`, `{"a":2,"b":2,"c":2,"d":2,"e":2,"f":2,"g":2,"h":2,"i":2}`, false},
	} {
		a, _, _ := checkFlat(t, []byte(tc.a))
		b, _, _ := checkFlat(t, []byte(tc.b))
		w := getFlatWork()
		got := w.diffAligned(&a, &b, nil, 0, 0)
		if got != tc.want {
			t.Errorf("%s -> %s: diffAligned = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if len(w.ents) != 0 || (!got && w.d.Total != 0) {
			t.Errorf("%s -> %s: %d entries left pushed, %d changes from a walk that was given up", tc.a, tc.b, len(w.ents), w.d.Total)
		}
		if got && w.d.Total != 2 {
			t.Errorf("%s -> %s: %d changes, want 2", tc.a, tc.b, w.d.Total)
		}
		w.d = diffResult{}
		w.put()
	}
}

// FuzzFlat holds flatten, encodeFlat, compact and diffFlat to the trees they replaced on
// arbitrary pairs of bodies.
func FuzzFlat(f *testing.F) {
	seeds := fixtureObjects(f)
	for i := 0; i+1 < len(seeds) && i < 40; i += 2 {
		f.Add(seeds[i], seeds[i+1])
	}
	f.Add([]byte(`{"metadata":{"managedFields":[1],"name":"a"},"l":[{"name":"x","v":1}]}`), []byte(`{"metadata":{"name":"b"},"l":[{"name":"x","v":2},{"name":"y"}]}`))
	f.Add([]byte(`{"a":"\ud800","a":[{"type":"t"}]}`), []byte(`{"a":[{"type":"t","x":null}]}`))
	f.Add([]byte(`{"metadata":{"annotations":{"tracing.k8s.io/traceparent.1":"b","tracing.k8s.io\/traceparent":"a","tracing.k8s.io/tracestate.1":1,"tracing.k8s.io/traceparent":"c"}}}`), []byte(`{"metadata":{"annotations":{"trace.kubernetes.io/context":"d"}}}`))
	f.Add([]byte(`{"kind":"Pod","metadata":{"name":"p","ownerReferences":[1,{"controller":false,"uid":"a"},{"controller":true,"uid":"b"},{"controller":true,"uid":"c"}],"annotations":{"a":7,"a":"x"}},"spec":{"nodeName":"n"}}`), []byte(`{"kind":"Binding","target":{"name":"n","name":2}}`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		fa, ta, okA := checkFlat(t, a)
		fb, tb, okB := checkFlat(t, b)
		if !okA || !okB {
			return
		}
		if got, want := diffFlat(&fa, &fb), treeDiff(ta, tb); !reflect.DeepEqual(got, want) {
			t.Fatalf("diffFlat %+v, tree diff %+v", got, want)
		}
		for _, e := range []*cacheEntry{{body: fa.compact()}, {body: fa.compact(), nodes: fa.keptNodes(nil)}} {
			if got, ok := diffCached(e, &fb); !ok || !reflect.DeepEqual(got, treeDiff(ta, tb)) {
				t.Fatalf("the kept body (index kept: %v) diffs differently: %+v", e.nodes != nil, got)
			}
		}
		if bytes.Contains(a, []byte("managedFields")) && fa.cut[1] == 0 && bytes.Contains(fa.compact(), []byte(`"metadata":{"managedFields"`)) {
			t.Fatal("managedFields kept")
		}
	})
}
