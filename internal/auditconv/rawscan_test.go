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
