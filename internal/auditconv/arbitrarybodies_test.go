package auditconv

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
)

// FuzzDecode feeds arbitrary bodies to the webhook's decoder and the converter behind it:
// whatever an apiserver (or anyone reaching the port) sends, the receiver answers and never
// panics.
func FuzzDecode(f *testing.F) {
	// Whole recorded bodies are too large for the mutator to make progress; one real event
	// of each shape (verb, subresource, outcome) seeds it instead.
	for _, seed := range fixtureSeeds(f) {
		f.Add(seed)
	}
	f.Add([]byte(auditconvtest.EventList("a", "b")))
	f.Add([]byte(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","stage":"ResponseComplete","verb":"update","auditID":"x",` +
		`"objectRef":{"resource":"deployments","subresource":"scale","name":"d"},"responseObject":{"kind":"Scale","spec":{"replicas":3}},` +
		`"requestObject":[{"op":"replace","path":"/data/x","value":1}],"requestReceivedTimestamp":"2026-11-21T10:00:00Z","responseStatus":{"code":409}}`))
	f.Add([]byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[null,{}]}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`null`))
	cfg := defaultSettings()
	cfg.DiffCacheSize = 64
	c := newConverter(cfg, "fuzz")
	f.Fuzz(func(t *testing.T, data []byte) {
		// As the webhook decodes: response bodies indexed while decoding, the bodies of events
		// the filters drop only delimited, the events' storage returned to the pool after the
		// batch. Whatever the strict decoder accepts, it accepts too; it may accept more (a
		// malformed body of a filtered event), never fewer.
		events, err := decodeBodyInto(data, nil, &c.filters)
		if _, plainErr := decodeBody(data); plainErr == nil && err != nil {
			t.Fatalf("reading bodies as the converter does refused a valid body: %v", err)
		}
		if err != nil {
			if events != nil {
				t.Fatal("a refused body must yield no events")
			}
			return
		}
		defer PutEvents(new([]Event), events)
		var st Stats
		td := c.convert("fuzz", events, &st)
		kept := len(events)
		for _, n := range st.filtered {
			kept -= n
		}
		for _, n := range st.dropped {
			kept -= n
		}
		if td.SpanCount() != kept {
			t.Fatalf("%d events, %d spans, filtered %v, dropped %v: every event is a span or counted", len(events), td.SpanCount(), st.filtered, st.dropped)
		}
	})
}

func fixtureSeeds(f *testing.F) [][]byte {
	seen := map[string]bool{}
	var seeds [][]byte
	for _, scenario := range []string{"secret", "conflict", "deployment"} {
		for _, body := range auditconvtest.FixtureBodies(f, scenario) {
			var list struct {
				Items []json.RawMessage `json:"items"`
			}
			if err := json.Unmarshal(body, &list); err != nil {
				f.Fatal(err)
			}
			for _, item := range list.Items {
				var ev Event
				if err := json.Unmarshal(item, &ev); err != nil || ev.ObjectRef == nil || ev.ResponseStatus == nil {
					continue
				}
				shape := fmt.Sprint(ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Subresource, ev.ResponseStatus.Code)
				if seen[shape] || len(item) > 8<<10 {
					continue
				}
				seen[shape] = true
				seeds = append(seeds, append([]byte(`{"kind":"Event","apiVersion":"audit.k8s.io/v1",`), item[1:]...))
			}
		}
	}
	return seeds
}
