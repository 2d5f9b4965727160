package k8sobjectlinkprocessor

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/kubetrail/kubetrail/internal/storagetest"
)

// The storage setting's failure paths: a missing or wrong extension stops the collector at
// Start with an error naming it; unreadable stored spans are reported, cleared, and not fatal.
func TestStorageFailures(t *testing.T) {
	storageID := component.MustNewID("file_storage")
	start := func(t *testing.T, o *observed, exts map[component.ID]component.Component) error {
		t.Helper()
		cfg := memoryConfig()
		cfg.Storage = &storageID
		p, err := newProcessor(o.set, cfg, new(consumertest.TracesSink), newFakeClock(t0))
		if err != nil {
			t.Fatal(err)
		}
		err = p.Start(context.Background(), &storagetest.Host{Host: componenttest.NewNopHost(), Extensions: exts})
		if err == nil {
			t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
		}
		return err
	}
	t.Run("a storage extension that is not configured fails Start, naming it", func(t *testing.T) {
		err := start(t, newObserved(t), nil)
		if err == nil || !strings.Contains(err.Error(), `"file_storage" is not configured`) {
			t.Fatalf("Start = %v", err)
		}
	})
	t.Run("an extension that is not a storage extension fails Start, naming it", func(t *testing.T) {
		err := start(t, newObserved(t), map[component.ID]component.Component{storageID: notStorage{}})
		if err == nil || !strings.Contains(err.Error(), "not a storage extension") {
			t.Fatalf("Start = %v", err)
		}
	})
	t.Run("unreadable stored spans are logged as lost and cleared; Start succeeds", func(t *testing.T) {
		o := newObserved(t)
		disk := storagetest.NewMemClient()
		if err := disk.Set(context.Background(), unsentKey, []byte("not a protobuf \xff\xff\xff")); err != nil {
			t.Fatal(err)
		}
		if err := start(t, o, map[component.ID]component.Component{storageID: &storagetest.Extension{Client: disk}}); err != nil {
			t.Fatal(err)
		}
		if o.logs.FilterMessageSnippet("unreadable").Len() != 1 {
			t.Fatal("the loss must be logged")
		}
		if disk.Keys() != 0 {
			t.Fatal("the unreadable value must be cleared")
		}
	})
}

// notStorage is an extension that offers no storage.
type notStorage struct {
	component.StartFunc
	component.ShutdownFunc
}
