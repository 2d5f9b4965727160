package auditconv

// goldenScope is the instrumentation scope the golden files were recorded with: the k8s_audit
// receiver's, the door the captures came in by.
const goldenScope = "github.com/kubetrail/kubetrail/receiver/k8sauditreceiver"

// defaultSettings returns a copy of the defaults, for a test to change.
func defaultSettings() *Settings {
	s := DefaultSettings()
	return &s
}

// newConverter is a Converter of settings s under the golden scope.
func newConverter(s *Settings, version string) *Converter {
	return New(Options{Settings: *s, ScopeName: goldenScope, ScopeVersion: version})
}
