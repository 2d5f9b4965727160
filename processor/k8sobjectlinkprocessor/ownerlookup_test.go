package k8sobjectlinkprocessor

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/kubetrail/kubetrail/internal/model"
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
