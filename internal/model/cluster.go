package model

import (
	"fmt"
	"regexp"
)

// clusterNamePattern is the one rule for a cluster name, used by every component: the audit
// webhook carries it as one URL path segment (/audit/{cluster}), every span carries it as the
// k8s.cluster.name resource attribute, and it is part of every object key. So no '/', no
// spaces, no percent-encoding, and the length and shape of a DNS label (letters of either case
// and '_' allowed, since existing cluster names use them).
var clusterNamePattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// ValidClusterName reports whether s is a valid cluster name.
func ValidClusterName(s string) bool { return clusterNamePattern.MatchString(s) }

// ValidateClusterName returns an error quoting s and stating the rule when s is not a valid
// cluster name. Callers prefix the key that holds it.
func ValidateClusterName(s string) error {
	if ValidClusterName(s) {
		return nil
	}
	return fmt.Errorf("%q is not a valid cluster name (1-63 letters, digits, '.', '_' or '-', starting and ending with a letter or digit)", s)
}
