package auditconv

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/kubetrail/kubetrail/internal/model"
)

// FuzzObjectMeta holds the Kubernetes readers of a body to encoding/json on arbitrary input
// (the generic scanner has its own, jsonscan.FuzzScan): a body accepted by the event decoder only
// when it is valid JSON, a patch's precondition as encoding/json reads it, the same identity read
// by scanMeta as by metaOf on the tree, and parseBody's tree without managedFields.
func FuzzObjectMeta(f *testing.F) {
	for _, seed := range fixtureSeeds(f) {
		f.Add(seed)
	}
	f.Add([]byte(`{"metadata":{"name":"a","ownerReferences":[{"controller":true,"uid":"u"}],"managedFields":[{}]},"kind":"Pod","metadata":{"uid":"x"}}`))
	f.Add([]byte(`{"a":[1,2.5e-3,-0,true,false,null,"\u00e9\ud800"],"b":{}}`))
	// KEP-5915's carrier: indexed keys out of order, a duplicate, an escaped key, a non-string.
	f.Add([]byte(`{"metadata":{"annotations":{"tracing.k8s.io/traceparent.1":"b","tracing.k8s.io\/traceparent":"a","tracing.k8s.io/tracestate":"s","trace.kubernetes.io/context":7,"tracing.k8s.io/traceparent.9":"x","tracing.k8s.io/traceparent":"c"}}}`))
	f.Add([]byte(`{"spec":{"nodeName":"n","x":[1]},"kind":"Pod","metadata":{"annotations":{"trace.kubernetes.io/context":"00-x","trace.kubernetes.io/context":7}},"spec":{"nodeName":"m"}}`))
	f.Add([]byte(`{"kind":"Binding","target":{"kind":"Node","name":"n","name":"o"},"metadata":{"annotations":null}}`))
	f.Add([]byte(` {"metadata" : {"resourceVersion":"1","labels":{"a b":"c\" d"}},"metadata":{"resourceVersion":"2"}}`))
	f.Add([]byte(`{"metadata":{"resourceVersion":null},"spec":{"x":"\\"}}`))
	f.Add([]byte(`{"spec":{"replicas":3},"metadata":{"labels":{"a":"b"},"resourceVersion":"4711"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		valid := json.Valid(data)
		if _, err := decodeBody(data); err == nil && !valid {
			t.Fatal("decodeBody accepted invalid JSON")
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
		var want map[string]any
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if !valid || dec.Decode(&want) != nil || want == nil {
			return
		}
		keys := newContextKeys(model.DefaultTraceContextAnnotations())
		wantMeta := metaOf(want, keys)
		sm, ok := scanMeta(data, keys)
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
		if !ok || !reflect.DeepEqual(sm, wantMeta) {
			t.Fatalf("scanMeta = %+v (%v), metaOf = %+v", sm, ok, wantMeta)
		}
		body, _ := parseBody(data)
		stripNoise(want)
		if !reflect.DeepEqual(body, want) {
			t.Fatal("parseBody differs from jsonscan.ParseTree + stripNoise")
		}
	})
}
