//go:build dist

package distribution_test

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// The kind cluster of the README's laptop path (distribution/kind/kind-config.yaml) writes the
// audit log where the chart's daemonset mode reads it, in the format it reads, under the policy
// this repository ships, and mounts both into the apiserver's static pod.
func TestKindConfigFeedsTheDaemonsetMode(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("kind", "kind-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
		Nodes      []struct {
			Role        string `json:"role"`
			ExtraMounts []struct {
				HostPath      string `json:"hostPath"`
				ContainerPath string `json:"containerPath"`
				ReadOnly      bool   `json:"readOnly"`
			} `json:"extraMounts"`
			KubeadmConfigPatches []string `json:"kubeadmConfigPatches"`
		} `json:"nodes"`
	}
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Kind != "Cluster" || cfg.APIVersion != "kind.x-k8s.io/v1alpha4" || len(cfg.Nodes) != 1 || cfg.Nodes[0].Role != "control-plane" || len(cfg.Nodes[0].KubeadmConfigPatches) != 1 {
		t.Fatalf("want one control-plane node with one kubeadm patch: %+v", cfg)
	}
	node := cfg.Nodes[0]
	var patch struct {
		Kind      string `json:"kind"`
		APIServer struct {
			ExtraArgs    map[string]string `json:"extraArgs"`
			ExtraVolumes []struct {
				Name      string `json:"name"`
				HostPath  string `json:"hostPath"`
				MountPath string `json:"mountPath"`
				ReadOnly  bool   `json:"readOnly"`
				PathType  string `json:"pathType"`
			} `json:"extraVolumes"`
		} `json:"apiServer"`
	}
	if err := yaml.UnmarshalStrict([]byte(node.KubeadmConfigPatches[0]), &patch); err != nil {
		t.Fatal(err)
	}
	var values struct {
		Daemonset struct {
			AuditLogPath string `json:"auditLogPath"`
		} `json:"daemonset"`
	}
	vb, err := os.ReadFile(filepath.Join("helm", "kubetrail", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(vb, &values); err != nil {
		t.Fatal(err)
	}
	args := patch.APIServer.ExtraArgs
	if patch.Kind != "ClusterConfiguration" || args["audit-log-path"] != values.Daemonset.AuditLogPath || args["audit-log-format"] != "json" {
		t.Errorf("the apiserver writes %q as %q; the chart's daemonset mode reads JSON lines at %q", args["audit-log-path"], args["audit-log-format"], values.Daemonset.AuditLogPath)
	}
	mounted := map[string]string{} // node path → apiserver path
	for _, v := range patch.APIServer.ExtraVolumes {
		mounted[v.HostPath] = v.MountPath
	}
	if mounted[filepath.Dir(args["audit-log-path"])] != filepath.Dir(args["audit-log-path"]) {
		t.Errorf("the log's directory %s is not mounted into the apiserver: %v", filepath.Dir(args["audit-log-path"]), mounted)
	}
	policy := args["audit-policy-file"]
	if mounted[policy] != policy {
		t.Errorf("the policy %s is not mounted into the apiserver: %v", policy, mounted)
	}
	fromRepo := false
	for _, m := range node.ExtraMounts {
		if m.ContainerPath == policy {
			_, err := os.Stat(filepath.Join("..", m.HostPath))
			fromRepo = m.HostPath == "./distribution/audit-policy.yaml" && err == nil
		}
	}
	if !fromRepo {
		t.Errorf("the node's %s is not this repository's distribution/audit-policy.yaml: %+v", policy, node.ExtraMounts)
	}
}
