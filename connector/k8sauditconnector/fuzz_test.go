package k8sauditconnector

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/auditconv/auditconvtest"
	"github.com/kubetrail/kubetrail/internal/envelopetest"
)

// FuzzRead feeds arbitrary record bodies to format detection and every envelope's reader (the
// GKE mapping included): an error is fine, a panic or a GKE event that is not a valid audit
// event is not.
func FuzzRead(f *testing.F) {
	f.Add([]byte(auditconvtest.EventList("a")))
	f.Add([]byte(`{"records":[{"category":"kube-audit","properties":{"log":"{}"}}]}`))
	f.Add([]byte(`{"@type":"type.googleapis.com/google.cloud.audit.AuditLog","methodName":"io.k8s.core.v1.pods.delete","resourceName":"core/v1/namespaces/a/pods/b"}`))
	for _, body := range auditconvtest.FixtureBodies(f, "unschedulable") {
		items, err := envelopetest.Items(body)
		if err != nil {
			f.Fatal(err)
		}
		for _, item := range items[:min(3, len(items))] {
			f.Add([]byte(item))
			if entry, err := envelopetest.GKE("c", item); err == nil {
				f.Add(entry)
			}
		}
		if aks, err := envelopetest.AKS("c", items[:min(2, len(items))]); err == nil {
			f.Add(aks)
		}
	}
	conv := auditconv.New(auditconv.Options{Settings: auditconv.DefaultSettings()})
	f.Fuzz(func(t *testing.T, data []byte) {
		lr := plog.NewLogRecord()
		lr.Body().SetStr(string(data))
		for _, format := range []string{formatAuto, formatNative, formatAKS, formatGKE} {
			r := reader{conv: conv, format: format}
			d, err := r.read(lr, pcommon.NewMap())
			if err != nil {
				continue
			}
			for _, ev := range d.events {
				if d.format == formatGKE && ev.AuditID == "" {
					t.Fatalf("a GKE entry read as an event without auditID: %+v", ev)
				}
				if d.format == formatGKE && ev.ObjectRef != nil && (!auditconv.ValidResource(ev.ObjectRef.Resource) || slices.Contains([]string{".", ".."}, ev.ObjectRef.Namespace) || slices.Contains([]string{".", ".."}, ev.ObjectRef.Name)) {
					t.Fatalf("a GKE entry read with an objectRef the apiserver cannot name: %+v", ev.ObjectRef)
				}
			}
		}
		var doc map[string]json.RawMessage
		if json.Unmarshal(data, &doc) == nil {
			_ = detect(doc)
		}
	})
}

// FuzzResourceName: a GKE resourceName is read as an objectRef the apiserver could log, or
// refused; never a panic, an empty, '.' or '..' segment, or a resource that is no plural.
func FuzzResourceName(f *testing.F) {
	for _, s := range []string{"core/v1/namespaces/a/pods/b", "core/v1/namespaces/a/finalize", "core/v1/nodes/n/proxy/x/y", "apps/v1/../x", "core/v1/Secrets/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		ref, err := refOfResourceName(name)
		if err != nil {
			return
		}
		for _, s := range []string{ref.Namespace, ref.Name, ref.Subresource} {
			if s == "." || s == ".." || strings.Contains(s, "/") {
				t.Fatalf("%q read as %+v", name, ref)
			}
		}
		if !auditconv.ValidResource(ref.Resource) || ref.APIVersion == "" {
			t.Fatalf("%q read as %+v", name, ref)
		}
	})
}
