// Package k8sauditreceivertest feeds recorded audit-webhook bodies through a real k8s_audit receiver, for
// tests of what comes after it (the processor's goldens, the command-line viewer).
package k8sauditreceivertest

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver"
)

// PostCapture starts a k8s_audit receiver (cluster "testbed"; window as given, 0 for the
// default) feeding next, posts each file of posts to its webhook in order, requires a 2xx for
// each, and shuts the receiver down.
func PostCapture(t testing.TB, posts []string, window time.Duration, next consumer.Traces) {
	t.Helper()
	f := k8sauditreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*k8sauditreceiver.Config)
	if window > 0 {
		cfg.Conversion.Window = window
	}
	endpoint := freeAddr(t)
	cfg.ServerConfig.NetAddr.Endpoint = endpoint
	rcv, err := f.CreateTraces(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, next)
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	for _, post := range posts {
		body, err := os.ReadFile(post)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post("http://"+endpoint+"/audit/testbed", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s: webhook answered %d", post, resp.StatusCode)
		}
	}
	if err := rcv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// freeAddr is a loopback address nothing listens on now.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
