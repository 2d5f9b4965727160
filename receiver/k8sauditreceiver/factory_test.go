package k8sauditreceiver

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/internal/metadata"
)

func TestFactory(t *testing.T) {
	f := NewFactory()
	if f.Type().String() != "k8s_audit" || f.TracesStability() != metadata.TracesStability {
		t.Fatalf("type %s, stability %s", f.Type(), f.TracesStability())
	}
	cfg := f.CreateDefaultConfig()
	if err := componenttest.CheckConfigStruct(cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.(*Config).Validate(); err != nil {
		t.Fatalf("the default configuration must be valid: %v", err)
	}
	r, err := f.CreateTraces(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
	if err != nil || r == nil {
		t.Fatalf("CreateTraces = %v, %v", r, err)
	}
}
