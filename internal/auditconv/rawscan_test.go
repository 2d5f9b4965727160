package auditconv

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"unsafe"
)

// scanMatchesDecode checks that ScanEventList splits data into the events decodeBody reads:
// as many, each Raw a valid JSON value that is a slice of data and whose objectRef is the key.
func scanMatchesDecode(t *testing.T, data []byte) {
	t.Helper()
	decoded, decErr := decodeBody(data)
	raws, scanErr := ScanEventList(data, 0, nil)
	if (decErr == nil) != (scanErr == nil) {
		t.Fatalf("the decoder says %v, the scanner %v", decErr, scanErr)
	}
	if decErr != nil {
		return
	}
	if len(raws) != len(decoded) {
		t.Fatalf("%d events scanned, %d decoded", len(raws), len(decoded))
	}
	for i, r := range raws {
		if !json.Valid(r.Raw) {
			t.Fatalf("event %d: not valid JSON: %.200s", i, r.Raw)
		}
		off := uintptr(unsafe.Pointer(unsafe.SliceData(r.Raw))) - uintptr(unsafe.Pointer(unsafe.SliceData(data)))
		if len(r.Raw) == 0 || off > uintptr(len(data)-len(r.Raw)) || !bytes.Equal(data[off:int(off)+len(r.Raw)], r.Raw) {
			t.Fatalf("event %d is not a slice of the body", i)
		}
		var want ObjectKey
		if ref := decoded[i].ObjectRef; ref != nil {
			want = ObjectKey{APIGroup: ref.APIGroup, Resource: ref.Resource, Namespace: ref.Namespace, Name: ref.Name}
			// A generateName create is keyed by the name its response gave the object.
			var resp struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if want.Name == "" && want.Resource != "" && hasBody(decoded[i].ResponseObject) {
				if err := json.Unmarshal(decoded[i].ResponseObject, &resp); err == nil {
					want.Name = resp.Metadata.Name
				}
			}
		}
		if r.Key != want {
			t.Fatalf("event %d: key %+v, the decoder's objectRef %+v", i, r.Key, want)
		}
	}
}

// Every recorded webhook body splits into the events the converter decodes, each one's bytes
// as the apiserver sent them.
func TestScanEventListAgreesWithTheDecoderOnTheRecordedBodies(t *testing.T) {
	n := 0
	for _, scenario := range scenarios(t) {
		posts, err := filepath.Glob(filepath.Join(fixturesDir, scenario, "audit-webhook", "*.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range posts {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			scanMatchesDecode(t, data)
			raws, _ := ScanEventList(data, 0, nil)
			n += len(raws)
		}
	}
	if n == 0 {
		t.Fatal("no events scanned")
	}
}

// A generateName create names no object in its objectRef: it is keyed by the name the
// apiserver gave the object (its responseObject's), as the object's later writes are, so the
// edge puts them in one Kafka partition. Without a response body, or for a list, the key stays
// nameless.
func TestACreatedObjectIsKeyedByItsGivenName(t *testing.T) {
	body := []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[
		{"verb":"create","objectRef":{"resource":"pods","namespace":"demo","apiVersion":"v1"},
		 "responseObject":{"kind":"Pod","apiVersion":"v1","metadata":{"generateName":"web-","labels":{"name":"x"},"name":"web-\u0061bc","namespace":"demo"},"spec":{"containers":[{"name":"c"}]}}},
		{"verb":"create","objectRef":{"resource":"pods","namespace":"demo","apiVersion":"v1"}},
		{"verb":"list","objectRef":{"resource":"pods","namespace":"demo","apiVersion":"v1"},
		 "responseObject":{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"web-abc"}}]}},
		{"verb":"patch","objectRef":{"resource":"pods","namespace":"demo","name":"web-abc","subresource":"status"},
		 "responseObject":{"metadata":{"name":"other"}}},
		{"verb":"get","requestURI":"/healthz","responseObject":{"metadata":{"name":"n"}}}
	]}`)
	raws, err := ScanEventList(body, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"web-abc", "", "", "web-abc", ""}
	if len(raws) != len(want) {
		t.Fatalf("%d events", len(raws))
	}
	for i, r := range raws {
		if r.Key.Name != want[i] {
			t.Errorf("event %d: keyed by name %q, want %q", i, r.Key.Name, want[i])
		}
	}
	// The same for one Event alone (an audit log line, or a body of one Event).
	ev, err := ScanEvent([]byte(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","verb":"create","objectRef":{"resource":"pods","namespace":"demo"},"responseObject":{"metadata":{"name":"web-abc"}}}`))
	if err != nil || ev.Key.Name != "web-abc" {
		t.Errorf("one Event: keyed by name %q (%v), want web-abc", ev.Key.Name, err)
	}
}

func TestScanEventListRefusesWhatTheDecoderRefuses(t *testing.T) {
	for _, body := range []string{
		``, `[]`, `null`, `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{]}`,
		`{"kind":"EventList","apiVersion":"audit.k8s.io/v2","items":[]}`,
		`{"kind":"Pod","apiVersion":"audit.k8s.io/v1"}`,
		`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":{}}`,
		`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]} x`,
		`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[null,{},1,{"objectRef":{"resource":3,"name":"a\u0062"}}]}`,
		`{"items":[{"objectRef":{"apiGroup":"apps","resource":"deployments","namespace":"d","name":"w"}}],"kind":"EventList","apiVersion":"audit.k8s.io/v1"}`,
		`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{},{}],"items":[{"objectRef":{"name":"second"}}]}`,
	} {
		scanMatchesDecode(t, []byte(body))
	}
	raws, err := ScanEventList([]byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{},{},{}]}`), 2, nil)
	if tm, ok := errors.AsType[*TooManyItemsError](err); !ok || tm.Max != 2 || raws != nil {
		t.Fatalf("3 items over a limit of 2: %v, %v", raws, err)
	}
	ev, err := ScanEvent([]byte(` {"kind":"Event","apiVersion":"audit.k8s.io/v1","objectRef":{"resource":"pods","namespace":"n","name":"p"}} `))
	if err != nil || string(ev.Raw[:1]) != "{" || ev.Raw[len(ev.Raw)-1] != '}' || ev.Key != (ObjectKey{Resource: "pods", Namespace: "n", Name: "p"}) {
		t.Fatalf("ScanEvent: %+v %v", ev, err)
	}
}

// FuzzScanEventList: whatever the body, the scanner accepts exactly what the decoder accepts
// and splits it into the same events.
func FuzzScanEventList(f *testing.F) {
	for _, seed := range fixtureSeeds(f) {
		f.Add(seed)
	}
	f.Add([]byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[null,{"objectRef":{"name":"\u00e9"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		scanMatchesDecode(t, data)
	})
}
