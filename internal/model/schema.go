package model

import (
	"fmt"
	"strconv"
	"strings"
)

// The span model's version (docs/span-model.md). Every ResourceSpans and ScopeSpans a kubetrail
// component emits carries SchemaURL, whose last path segment is the version, as OpenTelemetry
// schema URLs are spelled. The major version changes when a span name, an attribute's name,
// meaning or place (span or Resource), an ID derivation or a link type changes in a way a
// reader of the previous version would misread; the minor version when something is added.
const (
	SpanModelVersion = "1.3.0"
	SpanModelMajor   = 1
	schemaURLPrefix  = "https://kubetrail.dev/schemas/"
	SchemaURL        = schemaURLPrefix + SpanModelVersion
)

// SchemaVersion returns the span-model version a schema URL names, and false when the URL is
// not kubetrail's (empty, or another schema's).
func SchemaVersion(url string) (version string, major int, ok bool) {
	v, found := strings.CutPrefix(url, schemaURLPrefix)
	if !found || v == "" {
		return "", 0, false
	}
	m, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(m)
	if err != nil || n < 0 {
		return "", 0, false
	}
	return v, n, true
}

// CheckSchema says whether a reader of this span model can read spans that carry url: nil for
// this major version; otherwise an error that names the version found, or says that spans
// without kubetrail's schema URL come from a kubetrail before span model 1.0.
func CheckSchema(url string) error {
	v, major, ok := SchemaVersion(url)
	switch {
	case !ok && url == "":
		return fmt.Errorf("the spans carry no schema URL: they come from a kubetrail before span model 1.0 (object identity on every span, names with actors); this kubetrail reads span model %d.x, read them with the kubetrail release that wrote them", SpanModelMajor)
	case !ok:
		return fmt.Errorf("the spans carry schema URL %q, not kubetrail's (%s<version>); this kubetrail reads span model %d.x", url, schemaURLPrefix, SpanModelMajor)
	case major != SpanModelMajor:
		return fmt.Errorf("the spans are of span model %s; this kubetrail reads span model %d.x: use a kubetrail that reads %d.x", v, SpanModelMajor, major)
	}
	return nil
}
