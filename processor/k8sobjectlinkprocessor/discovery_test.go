package k8sobjectlinkprocessor

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/config/configoptional"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/processor/processortest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8sclock "k8s.io/utils/clock"

	"github.com/kubetrail/kubetrail/internal/k8sconfig"
	"github.com/kubetrail/kubetrail/internal/model"
	"github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/metadata"
)

func TestOwnerLookupMapsCRDOwnersThroughDiscoveryAcrossRestarts(t *testing.T) {
	cs := fake.NewClientset()
	disc := cs.Discovery().(*fakediscovery.FakeDiscovery)
	disc.Resources = []*metav1.APIResourceList{{
		GroupVersion: "argoproj.io/v1alpha1",
		APIResources: []metav1.APIResource{{Name: "rollouts", Kind: "Rollout", Namespaced: true}},
	}}
	cfg := createDefaultConfig()
	cfg.OwnerLookup = configoptional.Some(OwnerLookupConfig{APIConfig: k8sconfig.APIConfig{AuthType: k8sconfig.AuthTypeServiceAccount}, Cluster: "c1", CacheTTL: time.Minute, Timeout: time.Second})
	p, err := newProcessor(processortest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop(), k8sclock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	p.newLookupClients = func() (*k8sconfig.Clients, error) {
		return &k8sconfig.Clients{Kube: cs, Metadata: fakeMetadata(t), Discovery: disc}, nil
	}
	rs := model.Object{Cluster: "c1", Group: "apps", Version: "v1", Resource: "replicasets", Kind: "ReplicaSet", Namespace: "default", Name: "web-7d9", UID: "rs-uid",
		Owner: model.Owner{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout", Name: "web", UID: "ro-uid"}}
	for i := range 2 {
		if err := p.Start(context.Background(), componenttest.NewNopHost()); err != nil {
			t.Fatal(err)
		}
		owner, ok := rs.OwnerObject(p.mapper)
		if !ok || owner.Resource != "rollouts" || owner.Namespace != "default" || owner.Version != "v1alpha1" {
			t.Errorf("start %d: a CRD owner must get its resource from discovery, got %+v", i+1, owner)
		}
		if err := p.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
