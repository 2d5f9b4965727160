//go:build dist

package distribution_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kubetrail/kubetrail/internal/tlstest"
)

// The webhook's authentication through the real binary: with the receiver settings the shipped
// manifest and the Helm chart render (tls with client_ca_file, allowed_client_names), a client
// without a certificate, with one another CA signed, or with one the CA signed for another name,
// fails the TLS handshake; the apiserver's name gets 200. The certificates come
// from this test (crypto/x509), from the chart's rendering and from gen-certs.sh.

// tlsDir is where the manifest and the chart mount the webhook's tls.crt, tls.key and ca.crt.
const tlsDir = "/etc/otelcol-kubetrail-tls/"

// kubeconfig is what the apiserver reads from its audit webhook kubeconfig.
type kubeconfig struct {
	server, serverName     string
	caPEM, certPEM, keyPEM []byte
}

func parseKubeconfig(t *testing.T, raw []byte) kubeconfig {
	t.Helper()
	var kc struct {
		Clusters []struct {
			Cluster struct {
				Server   string `json:"server"`
				TLSName  string `json:"tls-server-name"`
				CAData   string `json:"certificate-authority-data"`
				Insecure bool   `json:"insecure-skip-tls-verify"`
			} `json:"cluster"`
		} `json:"clusters"`
		Users []struct {
			User struct {
				CertData string `json:"client-certificate-data"`
				KeyData  string `json:"client-key-data"`
			} `json:"user"`
		} `json:"users"`
	}
	if err := yaml.Unmarshal(raw, &kc); err != nil || len(kc.Clusters) != 1 || len(kc.Users) != 1 {
		t.Fatalf("kubeconfig with one cluster and one user: %v\n%s", err, raw)
	}
	c, u := kc.Clusters[0].Cluster, kc.Users[0].User
	if c.Insecure {
		t.Errorf("the kubeconfig skips the server's certificate check")
	}
	dec := func(what, s string) []byte {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(b) == 0 {
			t.Fatalf("kubeconfig %s: %v\n%s", what, err, raw)
		}
		return b
	}
	return kubeconfig{server: c.Server, serverName: c.TLSName, caPEM: dec("certificate-authority-data", c.CAData),
		certPEM: dec("client-certificate-data", u.CertData), keyPEM: dec("client-key-data", u.KeyData)}
}

// verifyCertificates: the serving certificate and the client certificate are key pairs, both
// chain to caPEM, the first for serverName and server auth, the second for client auth with CN
// clientName.
func verifyCertificates(t *testing.T, caPEM, serverPEM, serverKey, clientPEM, clientKey []byte, serverName, clientName string) {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatalf("ca.crt holds no certificate")
	}
	for _, c := range []struct {
		what      string
		cert, key []byte
		opts      x509.VerifyOptions
	}{
		{"serving", serverPEM, serverKey, x509.VerifyOptions{Roots: roots, DNSName: serverName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}},
		{"client", clientPEM, clientKey, x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}},
	} {
		pair, err := tls.X509KeyPair(c.cert, c.key)
		if err != nil {
			t.Errorf("%s certificate and key: %v", c.what, err)
			continue
		}
		if _, err := pair.Leaf.Verify(c.opts); err != nil {
			t.Errorf("%s certificate (CN %s) does not verify: %v", c.what, pair.Leaf.Subject.CommonName, err)
		}
		if c.what == "client" && pair.Leaf.Subject.CommonName != clientName {
			t.Errorf("client certificate CN %q, want %q", pair.Leaf.Subject.CommonName, clientName)
		}
	}
}

// webhook is a collector serving the k8s_audit webhook over TLS.
type webhook struct {
	port int
	out  string
}

// startTLSWebhook runs the binary with a k8s_audit receiver whose tls and allowed_client_names are
// the given ones (from a shipped or rendered config), their files moved from tlsDir into dir.
func startTLSWebhook(t *testing.T, dir string, receiver map[string]any) webhook {
	t.Helper()
	tlsSettings, _ := receiver["tls"].(map[string]any)
	names := receiver["allowed_client_names"]
	if tlsSettings == nil || tlsSettings["client_ca_file"] == nil || names == nil {
		t.Fatalf("the receiver config has no tls with client_ca_file and allowed_client_names: %v", receiver)
	}
	moved := map[string]any{}
	for k, v := range tlsSettings {
		if s, ok := v.(string); ok && strings.HasPrefix(s, tlsDir) {
			v = filepath.Join(dir, strings.TrimPrefix(s, tlsDir))
		}
		moved[k] = v
	}
	w := webhook{port: freePort(t), out: filepath.Join(dir, "traces.jsonl")}
	healthPort := freePort(t)
	cfg := map[string]any{
		"extensions": map[string]any{"health_check": map[string]any{"endpoint": fmt.Sprintf("127.0.0.1:%d", healthPort)}},
		"receivers": map[string]any{"k8s_audit": map[string]any{
			"endpoint": fmt.Sprintf("127.0.0.1:%d", w.port), "cluster": "disttest",
			"tls": moved, "allowed_client_names": names,
		}},
		"exporters": map[string]any{"file": map[string]any{"path": w.out, "format": "json"}},
		"service": map[string]any{
			"extensions": []any{"health_check"},
			"telemetry":  map[string]any{"metrics": map[string]any{"level": "none"}},
			"pipelines":  map[string]any{"traces": map[string]any{"receivers": []any{"k8s_audit"}, "exporters": []any{"file"}}},
		},
	}
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	startCollectorFile(t, path, healthPort)
	return w
}

// writeFiles writes name -> content into dir.
func writeFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// tlsConfig trusts caPEM, presents certPEM/keyPEM (none when nil), and checks the server's
// certificate for serverName, as the apiserver's client does with its kubeconfig.
func tlsConfig(t *testing.T, caPEM []byte, serverName string, certPEM, keyPEM []byte) *tls.Config {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	cfg := &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}
	if certPEM != nil {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// mountedFiles are the files a Secret volume with items puts in the pod: path -> the Secret's data.
func mountedFiles(t *testing.T, volume any, secret map[string]any) map[string][]byte {
	t.Helper()
	items, _ := dig(volume, "secret", "items").([]any)
	if len(items) == 0 || secret == nil {
		t.Fatalf("no Secret volume with items (%v), or no Secret (%v)", volume, secret != nil)
	}
	files := map[string][]byte{}
	for _, item := range items {
		path, _ := dig(item, "path").(string)
		key, _ := dig(item, "key").(string)
		files[path] = secretData(t, secret, key)
	}
	return files
}

// client is an HTTPS client with tlsConfig's settings.
func client(t *testing.T, caPEM []byte, serverName string, certPEM, keyPEM []byte) *http.Client {
	t.Helper()
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig(t, caPEM, serverName, certPEM, keyPEM), DisableKeepAlives: true}}
}

// post sends body to the webhook and returns the status, or the error of a refused connection.
func post(c *http.Client, url string, body []byte) (int, error) {
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// auditBatch is a recorded webhook batch with writes that become spans, and their audit IDs.
func auditBatch(t *testing.T) ([]byte, map[string]bool) {
	t.Helper()
	for _, b := range recordedBodies(t, "deployment") {
		if want := expectedAuditIDs(t, [][]byte{b}); len(want) > 0 {
			return b, want
		}
	}
	t.Fatal("no recorded batch with a write")
	return nil, nil
}

// requireRefused: a client with cfg (a certificate the webhook must not accept, or none) gets no
// HTTP answer: over TLS 1.2 the handshake itself fails (the server checks the client's
// certificate before its Finished); over TLS 1.3, the apiserver's default, the client's side of
// the handshake completes first and the server's alert ends the connection before any answer.
func requireRefused(t *testing.T, what string, w webhook, cfg *tls.Config, body []byte) {
	t.Helper()
	tls12 := cfg.Clone()
	tls12.MaxVersion = tls.VersionTLS12
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", fmt.Sprintf("127.0.0.1:%d", w.port), tls12)
	if err == nil {
		conn.Close()
		t.Errorf("%s: the TLS 1.2 handshake succeeded", what)
	} else if !strings.Contains(err.Error(), "tls:") {
		t.Errorf("%s: the TLS 1.2 connection failed, but not in the handshake: %v", what, err)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	if code, err := post(c, fmt.Sprintf("https://127.0.0.1:%d/audit/disttest", w.port), body); err == nil {
		t.Errorf("%s: answered %d over TLS 1.3, want the connection refused", what, code)
	}
}

// requireAuthenticatedOnly runs the checks every configuration must pass: no certificate and a
// certificate of another CA fail the handshake, plain HTTP gets no 2xx, the apiserver's
// certificate gets 200 for a recorded batch and its spans are exported.
func requireAuthenticatedOnly(t *testing.T, w webhook, caPEM []byte, serverName string, certPEM, keyPEM []byte) {
	t.Helper()
	body, want := auditBatch(t)
	url := fmt.Sprintf("https://127.0.0.1:%d/audit/disttest", w.port)

	requireRefused(t, "no client certificate", w, tlsConfig(t, caPEM, serverName, nil, nil), body)
	stranger := tlstest.NewCA(t, "another-ca")
	cert, key := stranger.Issue(t, "kube-apiserver-audit", x509.ExtKeyUsageClientAuth, nil, nil)
	requireRefused(t, "a certificate of another CA with the allowed name", w, tlsConfig(t, caPEM, serverName, cert, key), body)

	plain := &http.Client{Timeout: 10 * time.Second}
	if code, err := post(plain, strings.Replace(url, "https:", "http:", 1), body); err == nil && code/100 == 2 {
		t.Errorf("plain HTTP answered %d", code)
	}

	if code, err := post(client(t, caPEM, serverName, certPEM, keyPEM), url, body); err != nil || code != http.StatusOK {
		t.Fatalf("the apiserver's certificate: %d, %v; want 200", code, err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		got := exportedAuditIDs(t, w.out)
		if len(got) >= len(want) {
			for id := range want {
				if got[id] != 1 {
					t.Errorf("audit event %s exported %d times, want once", id, got[id])
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exported %d audit spans, want %d", len(got), len(want))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// manifestReceiver is the k8s_audit receiver of distribution/kubernetes/kubetrail.yaml.
func manifestReceiver(t *testing.T) map[string]any {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(clusterConfig(t)), &cfg); err != nil {
		t.Fatal(err)
	}
	r, _ := dig(cfg, "receivers", "k8s_audit").(map[string]any)
	return r
}

// TestTLSWebhookRequiresAnAllowedClientCertificate: the shipped manifest's receiver settings with
// certificates made here: no certificate, another CA's, or one the CA signed for another name (a
// kubelet's) fails the handshake, before a header of the request is read; the apiserver's gets
// 200.
func TestTLSWebhookRequiresAnAllowedClientCertificate(t *testing.T) {
	requireBinary(t)
	receiver := manifestReceiver(t)
	if got := receiver["allowed_client_names"]; !reflect.DeepEqual(got, []any{"kube-apiserver-audit"}) {
		t.Fatalf("the manifest's allowed_client_names %v, want [kube-apiserver-audit]", got)
	}
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "kubetrail-test-ca")
	serverCert, serverKey := ca.Issue(t, "otelcol-kubetrail.kubetrail.svc", x509.ExtKeyUsageServerAuth, []string{"otelcol-kubetrail.kubetrail.svc"}, nil)
	writeFiles(t, dir, map[string][]byte{"tls.crt": serverCert, "tls.key": serverKey, "ca.crt": ca.PEM})
	w := startTLSWebhook(t, dir, receiver)

	body, _ := auditBatch(t)
	for _, name := range []string{"system:node:worker-1", "kube-apiserver-audit-2", "Kube-Apiserver-Audit"} {
		cert, key := ca.Issue(t, name, x509.ExtKeyUsageClientAuth, nil, nil)
		requireRefused(t, fmt.Sprintf("a CA-signed certificate for %q", name), w, tlsConfig(t, ca.PEM, "otelcol-kubetrail.kubetrail.svc", cert, key), body)
	}
	cert, key := ca.Issue(t, "kube-apiserver-audit", x509.ExtKeyUsageClientAuth, nil, nil)
	requireAuthenticatedOnly(t, w, ca.PEM, "otelcol-kubetrail.kubetrail.svc", cert, key)
}

// TestChartCertificatesAuthenticateTheAPIServer: the certificates the chart generates, with the
// receiver config it renders, through the binary: the client of the kubeconfig it renders for
// the apiserver (tls-server-name, CA, client certificate) gets 200, and nobody else gets in.
func TestChartCertificatesAuthenticateTheAPIServer(t *testing.T) {
	requireBinary(t)
	objs := renderChart(t, "clusterName=chart-test", controlPlaneCIDRs)
	cfg, _ := collectorConfig(t, objs)
	receiver, _ := dig(cfg, "receivers", "k8s_audit").(map[string]any)
	dir := t.TempDir()
	writeFiles(t, dir, mountedFiles(t, tlsVolume(objs["StatefulSet/kt-kubetrail"]), objs["Secret/kt-kubetrail-tls"]))
	w := startTLSWebhook(t, dir, receiver)
	kc := parseKubeconfig(t, secretData(t, objs["Secret/kt-kubetrail-apiserver-kubeconfig"], "audit-webhook-kubeconfig.yaml"))
	u, err := url.Parse(kc.server)
	if err != nil || u.Scheme != "https" || u.Path != "/audit/chart-test" {
		t.Fatalf("kubeconfig server %q (%v)", kc.server, err)
	}
	requireAuthenticatedOnly(t, w, kc.caPEM, kc.serverName, kc.certPEM, kc.keyPEM)
}

// TestTLSManifestWithGenCertsScript: distribution/kubernetes/gen-certs.sh makes the Secrets, the
// NetworkPolicy and the kubeconfig the manifest needs: the Secret is the one the StatefulSet
// mounts, with the keys it mounts; the Redis password Secret is the one the collector and Redis
// read; only the collector pods reach Redis; the manifest's Service has no NodePort; and the
// manifest's receiver with the script's certificates lets the script's kubeconfig in, and nobody
// else.
func TestTLSManifestWithGenCertsScript(t *testing.T) {
	requireBinary(t)
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("gen-certs.sh needs openssl (Debian package openssl, on every machine image here)")
	}
	out := filepath.Join(t.TempDir(), "secrets")
	script := filepath.Join(root, "distribution", "kubernetes", "gen-certs.sh")
	if b, err := exec.Command(script, "--cluster", "disttest", "--out", out).CombinedOutput(); err == nil || !strings.Contains(string(b), "--control-plane-cidr is required") {
		t.Errorf("gen-certs.sh without --control-plane-cidr: %v\n%s", err, b)
	}
	cmd := exec.Command(script, "--cluster", "disttest", "--control-plane-cidr", "10.0.0.0/24", "--control-plane-cidr", "10.0.1.7/32",
		"--server-host", "10.96.0.50", "--out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gen-certs.sh: %v\n%s", err, b)
	}

	manifest := map[string]map[string]any{}
	generated := map[string]map[string]any{}
	for into, files := range map[*map[string]map[string]any][]string{
		&manifest:  {filepath.Join(root, "distribution", "kubernetes", "kubetrail.yaml")},
		&generated: {filepath.Join(out, "secrets.yaml"), filepath.Join(out, "networkpolicy.yaml")},
	} {
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, doc := range strings.Split(string(raw), "\n---\n") {
				var obj map[string]any
				if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				if obj != nil {
					(*into)[obj["kind"].(string)+"/"+dig(obj, "metadata", "name").(string)] = obj
				}
			}
		}
	}

	svc := manifest["Service/otelcol-kubetrail"]
	if ty := dig(svc, "spec", "type"); ty != "ClusterIP" || dig(svc, "spec", "ports", 0, "nodePort") != nil {
		t.Errorf("the manifest's webhook Service is %v with nodePort %v, want a ClusterIP", ty, dig(svc, "spec", "ports", 0, "nodePort"))
	}
	sts := manifest["StatefulSet/otelcol-kubetrail"]
	tlsSecret := generated["Secret/otelcol-kubetrail-tls"]
	vol := tlsVolume(sts)
	if name := dig(vol, "secret", "secretName"); tlsSecret == nil || name != "otelcol-kubetrail-tls" {
		t.Fatalf("the StatefulSet mounts %v, the script made %v", name, keys(generated))
	}
	dir := t.TempDir()
	files := mountedFiles(t, vol, tlsSecret)
	writeFiles(t, dir, files)

	ref := map[string]any{"secretKeyRef": map[string]any{"name": "redis-auth", "key": "password"}}
	for _, c := range []any{dig(sts, "spec", "template", "spec", "containers", 0), dig(manifest["Deployment/redis"], "spec", "template", "spec", "containers", 0)} {
		if got := envFrom(c, "REDIS_PASSWORD"); !reflect.DeepEqual(got, ref) {
			t.Errorf("%v REDIS_PASSWORD from %v, want %v", dig(c, "name"), got, ref)
		}
	}
	if pw := secretData(t, generated["Secret/redis-auth"], "password"); len(pw) < 32 {
		t.Errorf("Redis password of %d characters", len(pw))
	}
	redisPolicy := manifest["NetworkPolicy/redis"]
	if got, want := dig(redisPolicy, "spec", "podSelector", "matchLabels"), dig(manifest["Deployment/redis"], "spec", "template", "metadata", "labels"); got == nil || !reflect.DeepEqual(got, want) {
		t.Errorf("the Redis NetworkPolicy selects %v, the Redis pods are %v", got, want)
	}
	if got, want := dig(redisPolicy, "spec", "ingress"), []any{map[string]any{
		"ports": []any{map[string]any{"protocol": "TCP", "port": float64(6379)}},
		"from":  []any{map[string]any{"podSelector": map[string]any{"matchLabels": dig(sts, "spec", "template", "metadata", "labels")}}},
	}}; !reflect.DeepEqual(got, want) {
		t.Errorf("the Redis NetworkPolicy admits %v, want only the collector pods to 6379: %v", got, want)
	}

	np := generated["NetworkPolicy/otelcol-kubetrail"]
	if got, want := dig(np, "spec", "podSelector", "matchLabels"), dig(sts, "spec", "template", "metadata", "labels"); !reflect.DeepEqual(got, want) {
		t.Errorf("NetworkPolicy selects %v, the pods are %v", got, want)
	}
	wantFrom := []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.0/24"}}, map[string]any{"ipBlock": map[string]any{"cidr": "10.0.1.7/32"}}}
	if rules := dig(np, "spec", "ingress").([]any); len(rules) != 1 || dig(rules[0], "ports", 0, "port") != float64(9880) || !reflect.DeepEqual(dig(rules[0], "from"), wantFrom) {
		t.Errorf("NetworkPolicy ingress %v, want port 9880 from %v only", rules, wantFrom)
	}

	raw, err := os.ReadFile(filepath.Join(out, "audit-webhook-kubeconfig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kc := parseKubeconfig(t, raw)
	if kc.server != "https://10.96.0.50:9880/audit/disttest" || kc.serverName != "otelcol-kubetrail.kubetrail.svc" {
		t.Errorf("kubeconfig server %q, tls-server-name %q", kc.server, kc.serverName)
	}
	if !bytes.Equal(kc.caPEM, files["ca.crt"]) {
		t.Errorf("the kubeconfig's CA is not the Secret's ca.crt")
	}
	verifyCertificates(t, files["ca.crt"], files["tls.crt"], files["tls.key"], kc.certPEM, kc.keyPEM, kc.serverName, "kube-apiserver-audit")

	// Run again: the certificates and the password stay, so the Secrets and the kubeconfig on the
	// nodes stay valid.
	before, _ := os.ReadFile(filepath.Join(out, "secrets.yaml"))
	if b, err := exec.Command(script, "--cluster", "disttest", "--no-network-policy", "--out", out).CombinedOutput(); err != nil {
		t.Fatalf("gen-certs.sh again: %v\n%s", err, b)
	}
	if after, _ := os.ReadFile(filepath.Join(out, "secrets.yaml")); !bytes.Equal(before, after) {
		t.Errorf("a second run changed the Secrets")
	}

	w := startTLSWebhook(t, dir, manifestReceiver(t))
	requireAuthenticatedOnly(t, w, kc.caPEM, kc.serverName, kc.certPEM, kc.keyPEM)
}
