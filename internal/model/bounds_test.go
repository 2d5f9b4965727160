package model

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBoundIdentityKeepsShortValuesAndCutsLongOnesApart(t *testing.T) {
	if got := BoundIdentity("demo", MaxNameBytes); got != "demo" {
		t.Fatalf("a short value changed: %q", got)
	}
	a := strings.Repeat("é", 300) + "a"
	b := strings.Repeat("é", 300) + "b"
	ca, cb := BoundIdentity(a, MaxNameBytes), BoundIdentity(b, MaxNameBytes)
	if len(ca) > MaxNameBytes || !utf8.ValidString(ca) {
		t.Fatalf("cut value of %d bytes, valid UTF-8 %v", len(ca), utf8.ValidString(ca))
	}
	if ca == cb {
		t.Fatal("two long values that begin alike were merged")
	}
	if BoundIdentity(ca, MaxNameBytes) != ca || BoundIdentity(a, MaxNameBytes) != ca {
		t.Fatal("bounding is not stable")
	}
	o := Object{Cluster: "c1", Name: strings.Repeat("n", 200<<10), Owner: Owner{UID: strings.Repeat("u", 200<<10)}}
	o.Bound()
	if !o.Bounded() || len(o.Name) > MaxNameBytes || len(o.Owner.UID) > MaxTokenBytes {
		t.Fatalf("an object of 200 KB strings stays %d and %d bytes", len(o.Name), len(o.Owner.UID))
	}
}
