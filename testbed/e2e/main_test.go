//go:build e2e

package e2e

import (
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestMain brings the testbed up once (control plane, Jaeger, collector), runs every scenario,
// runs the tests, prints the summary and tears everything down, also on SIGINT/SIGTERM.
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
