package objecttrace

// Version is the version of this package: kubetrail's one release version, builder-config.yaml's
// dist.version (docs/releasing.md), which TestOneVersion checks it against. It is the
// instrumentation scope version of the spans a Tracer starts.
func Version() string {
	return "0.1.0"
}
