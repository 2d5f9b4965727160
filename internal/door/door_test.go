package door

import (
	"context"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type otherKey struct{}

func TestOnlyAContextMarkedByTrustedIsTrusted(t *testing.T) {
	if IsTrusted(context.Background()) {
		t.Fatal("a plain context is trusted")
	}
	if IsTrusted(context.WithValue(context.Background(), otherKey{}, true)) {
		t.Fatal("a context with another key's true value is trusted")
	}
	ctx := Trusted(context.Background())
	if !IsTrusted(ctx) {
		t.Fatal("a marked context is not trusted")
	}
	type child struct{}
	if !IsTrusted(context.WithValue(ctx, child{}, 1)) {
		t.Fatal("a context derived from a marked one lost the mark")
	}
}
