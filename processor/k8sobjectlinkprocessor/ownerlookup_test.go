package k8sobjectlinkprocessor

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/processor/processortest"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kubetrail/kubetrail/internal/model"
	olmetadata "github.com/kubetrail/kubetrail/processor/k8sobjectlinkprocessor/internal/metadata"
)

// fakeMetadata serves the given objects' metadata, with their owners as controller references.
func fakeMetadata(t *testing.T, objs ...model.Object) metadata.Interface {
	t.Helper()
	var rt []runtime.Object
	scheme := metadatafake.NewTestScheme()
	for _, o := range objs {
		gv := schema.GroupVersion{Group: o.Group, Version: o.Version}
		scheme.AddKnownTypeWithName(gv.WithKind(o.Kind), &metav1.PartialObjectMetadata{})
		m := &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: o.APIVersion(), Kind: o.Kind},
			ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace, UID: types.UID(o.UID)},
		}
		if !o.Owner.IsZero() {
			yes := true
			m.OwnerReferences = []metav1.OwnerReference{{APIVersion: o.Owner.APIVersion, Kind: o.Owner.Kind,
				Name: o.Owner.Name, UID: types.UID(o.Owner.UID), Controller: &yes}}
		}
		rt = append(rt, m)
	}
	return metadatafake.NewSimpleMetadataClient(scheme, rt...)
}

func TestOwnerLookupAnswers(t *testing.T) {
	recreated := podA1
	recreated.UID = "another-uid"
	tests := []struct {
		name  string
		obj   model.Object
		want  lookupResult
		owner string
	}{
		{"an object with a controller reference names its owner", withoutOwner(podA1), lookupOwner, "rs-a"},
		{"an object without one is a root", deploy, lookupRoot, ""},
		{"a missing object is unknown", withoutOwner(podB1), lookupUnknown, ""},
		{"an object recreated under the same name is unknown", withoutOwner(recreated), lookupUnknown, ""},
	}
	l := newOwnerLookup(fakeMetadata(t, podA1, deploy), time.Minute, time.Second, func() time.Time { return t0 })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, owner, err := l.lookup(context.Background(), tt.obj)
			if err != nil || res != tt.want || owner.UID != tt.owner {
				t.Fatalf("lookup = %v, %+v, %v; want %v owner %q", res, owner, err, tt.want, tt.owner)
			}
		})
	}
}

func TestForbiddenOwnerLookupsAreAPermanentErrorAndSpansStillFlow(t *testing.T) {
	fake := fakeMetadata(t).(*metadatafake.FakeMetadataClient)
	fake.PrependReactor("get", "*", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "demo-a-1", errors.New("RBAC"))
	})
	host := &statusHost{Host: componenttest.NewNopHost()}
	cfg := memoryConfig()
	sink := new(consumertest.TracesSink)
	p, err := newProcessor(processortest.NewNopSettings(olmetadata.Type), cfg, sink, newFakeClock(t0))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), host); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	p.lookup = newOwnerLookup(fake, time.Minute, time.Second, func() time.Time { return t0 })
	h := &harness{t: t, p: p, sink: sink}
	h.consume(event(withoutOwner(podA1), "e1", t0.Add(time.Second)), event(withoutOwner(podB1), "e2", t0.Add(time.Second)))
	assertChild(t, h.one("Pod default/demo-a-1"), h.activitySpan("event e1"))
	st := host.statuses()
	if len(st) != 1 || st[0] != componentstatus.StatusPermanentError {
		t.Fatalf("want exactly one permanent error status, got %v", st)
	}
}
