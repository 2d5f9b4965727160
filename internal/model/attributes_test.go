package model

import (
	"strings"
	"testing"
)

// TestSemconvNamesUnchanged pins the attribute names whose values come from the semantic
// conventions package: moving to a newer semconv version must not rename what the spans carry.
func TestSemconvNamesUnchanged(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{AttrClusterName, "k8s.cluster.name"},
		{AttrServiceName, "service.name"},
		{AttrNamespaceName, "k8s.namespace.name"},
		{AttrNodeName, "k8s.node.name"},
		{AttrUserName, "user.name"},
		{AttrUserAgent, "user_agent.original"},
		{AttrClientAddress, "client.address"},
		{AttrHTTPStatusCode, "http.response.status_code"},
		{AttrURLPath, "url.path"},
	} {
		if tc.got != tc.want {
			t.Errorf("attribute %q, want %q", tc.got, tc.want)
		}
	}
	want := map[[2]string]string{
		{"", "Pod"}: "pod", {"", "Node"}: "node",
		{"apps", "Deployment"}: "deployment", {"apps", "ReplicaSet"}: "replicaset",
		{"apps", "StatefulSet"}: "statefulset", {"apps", "DaemonSet"}: "daemonset",
		{"batch", "Job"}: "job", {"batch", "CronJob"}: "cronjob",
	}
	if len(semconvKinds) != len(want) {
		t.Errorf("%d kinds with semantic-convention names, want %d", len(semconvKinds), len(want))
	}
	for gk, kind := range want {
		got := semconvKinds[gk]
		if got.name != "k8s."+kind+".name" || got.uid != "k8s."+kind+".uid" {
			t.Errorf("%s: %q and %q, want k8s.%s.name and k8s.%s.uid", strings.Join(gk[:], "/"), got.name, got.uid, kind, kind)
		}
	}
}
