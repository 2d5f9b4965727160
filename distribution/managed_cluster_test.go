//go:build dist

package distribution_test

import (
	"path/filepath"
	"testing"
)

// TestChartManagedNamesOneCluster: in every managed values file, the k8s_audit connector and
// k8s_event_spans name the release's cluster alike (clusterName), and nothing lets a name read
// from the records (an EKS log group, Azure's upper-case resourceId) decide instead, so that the
// audit spans and the Events' spans of the cluster meet. The connector's extensions (an encoding
// extension) are configured and started.
func TestChartManagedNamesOneCluster(t *testing.T) {
	for _, file := range managedValuesFiles(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			objs := renderChartWith(t, []string{file}, "clusterName=prod-eu-1")
			cfg, _ := collectorConfig(t, objs)
			connector, _ := dig(cfg, "connectors", "k8s_audit").(map[string]any)
			events, _ := dig(cfg, "receivers", "k8s_event_spans").(map[string]any)
			if connector == nil || events == nil {
				t.Fatalf("connector %v, k8s_event_spans %v", connector, events)
			}
			if connector["cluster"] != "prod-eu-1" || events["cluster"] != "prod-eu-1" {
				t.Errorf("connector cluster %v, k8s_event_spans cluster %v, want both prod-eu-1", connector["cluster"], events["cluster"])
			}
			if a, ok := connector["cluster_attribute"]; ok {
				t.Errorf("cluster_attribute %v lets the records name another cluster", a)
			}
			started := map[string]bool{}
			list, _ := dig(cfg, "service", "extensions").([]any)
			for _, e := range list {
				started[e.(string)] = true
			}
			for id := range dig(cfg, "extensions").(map[string]any) {
				if !started[id] {
					t.Errorf("extension %s is configured but not started (service.extensions %v)", id, list)
				}
			}
		})
	}
}
