package k8sauditreceiver

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configtls"

	"github.com/kubetrail/kubetrail/internal/tlstest"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and client certificates it signed,
// written to files the way an operator configures them.
type testPKI struct {
	dir  string
	ca   *tlstest.CA
	pool *x509.CertPool
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir(), ca: tlstest.NewCA(t, "test-ca"), pool: x509.NewCertPool()}
	p.pool.AppendCertsFromPEM(p.ca.PEM)
	p.write(t, "ca.crt", p.ca.PEM)
	return p
}

func (p *testPKI) write(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue signs a certificate; it returns the files' paths and the pair for a client.
func (p *testPKI) issue(t *testing.T, name, cn string, dnsNames []string, ips []net.IP, usage x509.ExtKeyUsage) (certFile, keyFile string, pair tls.Certificate) {
	t.Helper()
	certPEM, keyPEM := p.ca.Issue(t, cn, usage, dnsNames, ips)
	certFile, keyFile = p.write(t, name+".crt", certPEM), p.write(t, name+".key", keyPEM)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, pair
}

func TestWebhookClientNames(t *testing.T) {
	pki := newTestPKI(t)
	serverCert, serverKey, _ := pki.issue(t, "server", "otelcol-kubetrail", nil, []net.IP{net.IPv4(127, 0, 0, 1)}, x509.ExtKeyUsageServerAuth)
	_, _, apiserver := pki.issue(t, "apiserver", "kube-apiserver-audit", nil, nil, x509.ExtKeyUsageClientAuth)
	_, _, bySAN := pki.issue(t, "by-san", "someone", []string{"audit.kube-system.svc"}, nil, x509.ExtKeyUsageClientAuth)
	_, _, other := pki.issue(t, "other", "kubelet", []string{"node-1"}, nil, x509.ExtKeyUsageClientAuth)

	var postBody func(t *testing.T, env *webhookEnv, cert *tls.Certificate, body string) (int, error)
	start := func(t *testing.T, allowed []string) *webhookEnv {
		return startWebhook(t, func(cfg *Config) {
			cfg.ServerConfig.TLS = configoptional.Some(configtls.ServerConfig{
				Config:       configtls.Config{CertFile: serverCert, KeyFile: serverKey},
				ClientCAFile: filepath.Join(pki.dir, "ca.crt"),
			})
			cfg.AllowedClientNames = allowed
		})
	}
	post := func(t *testing.T, env *webhookEnv, cert *tls.Certificate) (int, error) {
		t.Helper()
		return postBody(t, env, cert, eventList("a1"))
	}
	postBody = func(t *testing.T, env *webhookEnv, cert *tls.Certificate, body string) (int, error) {
		t.Helper()
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool, MinVersion: tls.VersionTLS12}}
		if cert != nil {
			tr.TLSClientConfig.Certificates = []tls.Certificate{*cert}
		}
		defer tr.CloseIdleConnections()
		url := strings.Replace(env.url, "http://", "https://", 1) + "/audit"
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}

	t.Run("without allowed_client_names any certificate the CA signed is accepted, and none is refused", func(t *testing.T) {
		env := start(t, nil)
		for _, c := range []*tls.Certificate{&apiserver, &other} {
			if code, err := post(t, env, c); err != nil || code != http.StatusOK {
				t.Fatalf("code = %d, err = %v", code, err)
			}
		}
		if _, err := post(t, env, nil); err == nil {
			t.Fatal("a client without a certificate was served")
		}
	})
	t.Run("with allowed_client_names only those names are served; the handshake of others fails, counted", func(t *testing.T) {
		env := start(t, []string{"kube-apiserver-audit", "audit.kube-system.svc"})
		if code, err := post(t, env, &apiserver); err != nil || code != http.StatusOK {
			t.Fatalf("allowed common name: code = %d, err = %v", code, err)
		}
		if code, err := post(t, env, &bySAN); err != nil || code != http.StatusOK {
			t.Fatalf("allowed DNS name: code = %d, err = %v", code, err)
		}
		if code, err := post(t, env, &other); err == nil || !strings.Contains(err.Error(), "bad certificate") {
			t.Fatalf("other name: code = %d, err = %v, want the TLS alert bad certificate", code, err)
		}
		if n := env.counted(t, "otelcol_k8s_audit_refused_connections", reasonClientNotAllowed); n != 1 {
			t.Fatalf("refused connections %s = %d, want 1", reasonClientNotAllowed, n)
		}
		if n := env.counted(t, "otelcol_k8s_audit_rejected_requests", reasonClientNotAllowed); n != 0 {
			t.Fatalf("rejected requests %s = %d, want 0: no request of the refused client is read", reasonClientNotAllowed, n)
		}
		if got := env.next.ids(); len(got) != 2 {
			t.Fatalf("spans from %v, want two (the refused POST must not reach the pipeline)", got)
		}
	})
	t.Run("a refused client that sends a large batch gets no answer: nothing of it is read", func(t *testing.T) {
		env := start(t, []string{"kube-apiserver-audit"})
		ids := make([]string, 4000) // about 2 MB
		for i := range ids {
			ids[i] = fmt.Sprintf("big-%d", i)
		}
		for range 5 {
			if code, err := postBody(t, env, &other, eventList(ids...)); err == nil {
				t.Fatalf("other name, large body: code = %d, want a failed handshake", code)
			}
		}
		if n := env.counted(t, "otelcol_k8s_audit_refused_connections", reasonClientNotAllowed); n != 5 {
			t.Fatalf("refused connections %s = %d, want 5", reasonClientNotAllowed, n)
		}
		if got := env.next.ids(); len(got) != 0 {
			t.Fatalf("spans from %v, want none", got)
		}
	})
}
