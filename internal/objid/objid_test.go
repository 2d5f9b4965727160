package objid

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestTraceStateRoundTrip(t *testing.T) {
	w := time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)
	for _, cluster := range []string{"", "prod-eu-1", "a,b=c%d e", "ünï"} {
		ref := ObjectRef{Cluster: cluster, UID: "0b7c6f0e-8d1a-4d4e-9a57-3c2f0e6f9a10", Window: w}
		v, err := EncodeTraceState(ref)
		if err != nil {
			t.Fatalf("%q: %v", cluster, err)
		}
		if strings.ContainsAny(v, ",= ") {
			t.Errorf("%q: value %q holds a character W3C forbids", cluster, v)
		}
		got, err := DecodeTraceState(v)
		if err != nil || got != ref {
			t.Errorf("%q: decoded %+v, %v; want %+v", cluster, got, err, ref)
		}
	}
}

func TestTraceStateRefusals(t *testing.T) {
	if _, err := EncodeTraceState(ObjectRef{Cluster: "c"}); !errors.Is(err, ErrNoUID) {
		t.Errorf("no UID: %v", err)
	}
	if _, err := EncodeTraceState(ObjectRef{Cluster: strings.Repeat("c", 250), UID: "u"}); !errors.Is(err, ErrTraceStateSize) {
		t.Errorf("long cluster: %v", err)
	}
	for _, v := range []string{"", "2/0/u/c", "1/zz!/u/c", "1/0//c", "1/0/u", "1/0/u/c%4", "1/0/u/c%zz"} {
		if _, err := DecodeTraceState(v); err == nil {
			t.Errorf("%q decoded", v)
		}
	}
}

func TestFindTraceState(t *testing.T) {
	v, ok := FindTraceState("congo=t61rcWkgMzE, kubetrail=1/0/u/c ,rojo=00f067aa0ba902b7")
	if !ok || v != "1/0/u/c" {
		t.Errorf("got %q %v", v, ok)
	}
	if _, ok := FindTraceState("congo=t61rcWkgMzE"); ok {
		t.Error("found a member that is not there")
	}
}

func TestWindowStart(t *testing.T) {
	at := time.Date(2026, 11, 27, 14, 29, 59, 0, time.UTC)
	if got := WindowStart(at, 30*time.Minute); !got.Equal(time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)) {
		t.Errorf("got %v", got)
	}
	if got := WindowStart(time.Unix(-1, 0), time.Minute); got.Unix() != -60 {
		t.Errorf("before the epoch: %v", got)
	}
}
