package model

import (
	"strings"
	"testing"
)

func TestClusterNameRule(t *testing.T) {
	for name, want := range map[string]bool{
		"prod-eu-1": true, "kind": true, "a": true, "dev.local": true, "a_b": true, "Prod1": true,
		strings.Repeat("x", 63): true,
		"":                      false, "prod/eu": false, "-lead": false, "trail-": false, "with space": false,
		"..": false, "%2F": false, "ünïcode": false, strings.Repeat("x", 64): false,
	} {
		if got := ValidClusterName(name); got != want {
			t.Errorf("ValidClusterName(%q) = %v, want %v", name, got, want)
		}
		err := ValidateClusterName(name)
		if (err == nil) != want {
			t.Errorf("ValidateClusterName(%q) = %v, want valid=%v", name, err, want)
		}
		if err != nil && !strings.Contains(err.Error(), "not a valid cluster name") {
			t.Errorf("ValidateClusterName(%q) = %q: does not state the rule", name, err)
		}
	}
}
