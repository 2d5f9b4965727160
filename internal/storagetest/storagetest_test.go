package storagetest

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemClientKeepsWhatWasWrittenAcrossClose(t *testing.T) {
	ctx := context.Background()
	c := NewMemClient()
	value := []byte("v1")
	if err := c.Set(ctx, "a", value); err != nil {
		t.Fatal(err)
	}
	value[0] = 'X' // the caller's buffer must not alias the stored value
	get, del := storage.GetOperation("a"), storage.DeleteOperation("b")
	if err := c.Batch(ctx, storage.SetOperation("b", []byte("v2")), get, del); err != nil {
		t.Fatal(err)
	}
	if string(get.Value) != "v1" || c.Keys() != 1 {
		t.Fatalf("batch get = %q, keys = %d", get.Value, c.Keys())
	}
	_ = c.Close(ctx)
	if got, _ := c.Get(ctx, "a"); string(got) != "v1" || c.Closed() != 1 {
		t.Fatalf("after close: %q, closed %d", got, c.Closed())
	}
	if got, err := c.Get(ctx, "missing"); got != nil || err != nil {
		t.Fatalf("a missing key must be nil, nil; got %q, %v", got, err)
	}
}
