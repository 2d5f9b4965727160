package k8sauditreceiver

import (
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
