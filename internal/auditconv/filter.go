package auditconv

import "strings"

// The filters: which events become spans, decided from the members the apiserver writes before
// the bodies, so that the decoder can ask before it reads a body (see Event.body).

// The stages an event is converted at.
const (
	stageResponseComplete = "ResponseComplete"
	stagePanic            = "Panic"
)

var (
	writeVerbs = map[string]bool{"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true}
	readVerbs  = map[string]bool{"get": true, "list": true, "watch": true}
)

// The reasons of otelcol_k8s_audit_filtered_events (ReasonStage…ReasonDryRun).
const (
	reasonStage             = "stage"
	reasonReadVerb          = "read_verb"
	reasonVerb              = "verb"
	reasonNonResource       = "non_resource"
	reasonExcludedResource  = "excluded_resource"
	reasonExcludedUserAgent = "excluded_user_agent"
	// reasonDryRun: a write made with ?dryRun=All (kubectl --dry-run=server) changed nothing.
	reasonDryRun = "dry_run"
)

// filters are the conversion's filters (Settings: include_read_verbs, exclude_resources,
// exclude_user_agents).
type filters struct {
	includeReads bool
	exclude      grSet
	excludeUA    []string
}

// filterReason is the filter that drops the event (a reason of the filtered metric), or ""
// when the filters keep it. It reads the members the apiserver writes before the bodies
// (stage, verb, request URI, user agent, objectRef), so the decoder can ask it before it reaches
// a body (see Event.body).
func (f *filters) filterReason(ev *Event) string {
	if ev.Stage != stageResponseComplete && ev.Stage != stagePanic {
		return reasonStage
	}
	ref := ev.ObjectRef
	if ref == nil || ref.Resource == "" {
		return reasonNonResource
	}
	switch {
	case writeVerbs[ev.Verb]:
	case readVerbs[ev.Verb]:
		if !f.includeReads {
			return reasonReadVerb
		}
	default:
		return reasonVerb
	}
	if dryRun(ev.RequestURI) {
		return reasonDryRun
	}
	if f.exclude.match(ref.APIGroup, ref.Resource, ref.Subresource) {
		return reasonExcludedResource
	}
	for _, p := range f.excludeUA {
		if strings.HasPrefix(ev.UserAgent, p) {
			return reasonExcludedUserAgent
		}
	}
	return ""
}

// dryRun reports whether a request URI asks for a dry run (?dryRun=All, as kubectl
// --dry-run=server sends): the apiserver audits it like a write, but nothing was written, so it
// is no part of the object's story.
func dryRun(requestURI string) bool {
	_, query, ok := strings.Cut(requestURI, "?")
	for ok {
		var param string
		param, query, ok = strings.Cut(query, "&")
		if v, isDryRun := strings.CutPrefix(param, "dryRun="); isDryRun && v != "" {
			return true
		}
	}
	return false
}

// grSet is a set of group/resource entries as the exclusion and redaction lists spell them.
type grSet map[[2]string]struct{}

func (s grSet) match(group, resource, subresource string) bool {
	if len(s) == 0 {
		return false
	}
	if _, ok := s[[2]string{group, resource}]; ok {
		return true
	}
	if _, ok := s[[2]string{group, "*"}]; ok {
		return true
	}
	if subresource != "" {
		_, ok := s[[2]string{group, resource + "/" + subresource}]
		return ok
	}
	return false
}
