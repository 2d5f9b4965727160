//go:build e2e

package e2e

import (
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMain brings the testbed up once (control plane, Jaeger, collector), runs every scenario,
// runs the tests (those that call AfterOthers last, one at a time), prints the summary and tears
// everything down, also on SIGINT/SIGTERM.
func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	t0 := time.Now()
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	env, err := setup()
	envMu.Lock()
	current = env
	envMu.Unlock()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sig
		log.Printf("e2e: %v: tearing down", s)
		if env != nil {
			env.teardown()
		}
		os.Exit(130)
	}()

	code := 1
	if err != nil {
		log.Printf("e2e: setup failed: %v", err)
	} else {
		code = m.Run()
	}
	if env != nil {
		s := env.summary(time.Since(t0), code != 0 || err != nil)
		fmt.Print(s)
		_ = os.WriteFile(filepath.Join(env.OutDir, "summary.txt"), []byte(s), 0o644)
		env.teardown()
	}
	return code
}

// afterOthersMu lets the tests that call AfterOthers run one at a time.
var afterOthersMu sync.Mutex

// AfterOthers makes t run after every test of the package that does not call it, and alone among
// those that do. A test calls it first when what it leaves in Jaeger would disturb other tests'
// checks (extra collectors emitting duplicate object spans into a shared window). It relies on
// the testing package's documented rule for parallel tests: a top-level test that calls
// t.Parallel is paused until every sequential top-level test has finished; the mutex then keeps
// the paused tests from running together.
func AfterOthers(t *testing.T) {
	t.Helper()
	t.Parallel()
	afterOthersMu.Lock()
	t.Cleanup(afterOthersMu.Unlock)
}
