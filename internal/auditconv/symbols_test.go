package auditconv

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

func TestSymbolsReturnTheirBytesAndRecur(t *testing.T) {
	a := symbols.of([]byte("system:serviceaccounts"))
	b := symbols.of([]byte("system:serviceaccounts"))
	if a != "system:serviceaccounts" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatal("a recurring value must come back as the same string")
	}
	long := strings.Repeat("x", maxSymbolBytes+1)
	if l1, l2 := symbols.of([]byte(long)), symbols.of([]byte(long)); l1 != long || unsafe.StringData(l1) == unsafe.StringData(l2) {
		t.Fatal("a value over maxSymbolBytes is a string of its own, never stored")
	}
	if symbols.of(nil) != "" {
		t.Fatal("empty")
	}
	// Many goroutines, more values than slots: every answer is its input (go test -race).
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 3 * symbolSlots {
				v := fmt.Sprintf("v%d-%d", g%2, i)
				if got := symbols.of([]byte(v)); got != v {
					t.Errorf("of(%q) = %q", v, got)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestRecurringAnnotationValuesComeFromTheSymbols: the authorizer's reason recurs in event after
// event, quotes escaped and longer than most symbols; decoded twice, it is one string, and its
// escapes are resolved without an allocation of their own.
func TestRecurringAnnotationValuesComeFromTheSymbols(t *testing.T) {
	const reason = `RBAC: allowed by ClusterRoleBinding "system:controller:deployment-controller" of ClusterRole "system:controller:deployment-controller" to ServiceAccount "deployment-controller/kube-system"`
	if len(reason) <= 128 || len(reason) > maxSymbolBytes {
		t.Fatalf("the reason is %d bytes: the test wants one over the old bound and within maxSymbolBytes", len(reason))
	}
	quoted, _ := json.Marshal(reason)
	body := []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` +
		`{"auditID":"a1","annotations":{"authorization.k8s.io/reason":` + string(quoted) + `}},` +
		`{"auditID":"a2","annotations":{"authorization.k8s.io/reason":` + string(quoted) + `}}]}`)
	evs, err := decodeBody(body)
	if err != nil || len(evs) != 2 || len(evs[0].Annotations) != 1 || len(evs[1].Annotations) != 1 {
		t.Fatalf("decoded %d events, err %v", len(evs), err)
	}
	a, b := evs[0].Annotations[0].Value, evs[1].Annotations[0].Value
	if a != reason || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatalf("the reason must come back resolved, as one string: %q", a)
	}
	escaped := quoted[1 : len(quoted)-1]
	if n := testing.AllocsPerRun(100, func() { _ = symbols.ofQuoted(escaped, false) }); n != 0 {
		t.Fatalf("%v allocations to look up a held value with escapes", n)
	}
}
