package k8sconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     APIConfig
		wantErr string
	}{
		{"service account is valid", APIConfig{AuthType: AuthTypeServiceAccount}, ""},
		{"kubeconfig with a context is valid", APIConfig{AuthType: AuthTypeKubeConfig, Context: "kind"}, ""},
		{"empty auth type names the key", APIConfig{}, "auth_type must be set"},
		{"unknown auth type names the value", APIConfig{AuthType: "token"}, `auth_type "token"`},
		{"tls needs a certificate", APIConfig{AuthType: AuthTypeTLS}, "cert_file and key_file"},
		{"context needs kubeConfig", APIConfig{AuthType: AuthTypeServiceAccount, Context: "x"}, "context is only"},
		{"negative qps", APIConfig{AuthType: AuthTypeNone, KubeAPIQPS: -1}, "kube_api_qps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestKubeConfigContextAndRateLimits(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters:
- {name: a, cluster: {server: "https://127.0.0.1:1111"}}
- {name: b, cluster: {server: "https://127.0.0.1:2222"}}
users: [{name: u, user: {token: t}}]
contexts:
- {name: ca, context: {cluster: a, user: u}}
- {name: cb, context: {cluster: b, user: u}}
current-context: ca
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kc)
	cfg, err := APIConfig{AuthType: AuthTypeKubeConfig, Context: "cb", KubeAPIQPS: 50, KubeAPIBurst: 100}.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:2222" || cfg.QPS != 50 || cfg.Burst != 100 {
		t.Fatalf("host=%s qps=%v burst=%d", cfg.Host, cfg.QPS, cfg.Burst)
	}
	if _, err := (APIConfig{AuthType: AuthTypeKubeConfig, Context: "missing"}).RESTConfig(); err == nil {
		t.Fatal("an unknown context must be an error")
	}
}

func TestDiscoveryMapperLearnsCRDsAndRateLimitsRefresh(t *testing.T) {
	client := fake.NewClientset()
	disc := client.Discovery().(*fakediscovery.FakeDiscovery)
	disc.Resources = []*metav1.APIResourceList{{
		GroupVersion: "example.com/v1",
		APIResources: []metav1.APIResource{
			{Name: "widgets", Kind: "Widget", Namespaced: true},
			{Name: "widgets/status", Kind: "Widget", Namespaced: true},
		},
	}}
	now := time.Unix(1000, 0)
	m := NewDiscoveryMapper(disc, time.Minute)
	defer m.Close()
	m.now = func() time.Time { return now }

	info, ok := m.ByResource("example.com", "widgets")
	if !ok || info.Kind != "Widget" || !info.Namespaced || info.Version != "v1" {
		t.Fatalf("ByResource = %+v, %v", info, ok)
	}
	calls := len(disc.Actions())
	if _, ok := m.ByKind("example.com", "Gadget"); ok {
		t.Fatal("unknown kind must not be found")
	}
	if len(disc.Actions()) != calls {
		t.Fatal("a miss within minRefresh must not call discovery again")
	}
	now = now.Add(2 * time.Minute)
	m.ByKind("example.com", "Gadget")
	if len(disc.Actions()) == calls {
		t.Fatal("a miss after minRefresh must refresh")
	}
}

// hangingDiscovery answers ServerGroups only when released, like an apiserver that stopped
// answering.
type hangingDiscovery struct {
	*fakediscovery.FakeDiscovery
	release chan struct{}
}

func (h hangingDiscovery) ServerGroups() (*metav1.APIGroupList, error) {
	<-h.release
	return h.FakeDiscovery.ServerGroups()
}

func TestDiscoveryMapperDoesNotStallCallersOnASlowApiserver(t *testing.T) {
	disc := fake.NewClientset().Discovery().(*fakediscovery.FakeDiscovery)
	disc.Resources = []*metav1.APIResourceList{{
		GroupVersion: "example.com/v1",
		APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget", Namespaced: true}},
	}}
	h := hangingDiscovery{FakeDiscovery: disc, release: make(chan struct{})}
	m := NewDiscoveryMapper(h, time.Minute)
	m.maxWait = 20 * time.Millisecond

	if _, ok := m.ByKind("example.com", "Widget"); ok {
		t.Fatal("nothing can be known while discovery hangs")
	}
	if _, ok := m.ByKind("example.com", "Widget"); ok {
		t.Fatal("a second caller must not be answered from a refresh still running")
	}
	close(h.release)
	m.Close() // waits for the refresh in flight: no goroutine outlives the component
	if info, ok := m.ByKind("example.com", "Widget"); !ok || info.Resource != "widgets" {
		t.Fatalf("after the refresh ended: %+v, %v", info, ok)
	}
}
