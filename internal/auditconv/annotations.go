package auditconv

import (
	"cmp"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// Attributes made of the audit event's annotations: what the apiserver decided and measured
// about the request besides its outcome.
const (
	attrAuthzDecision        = "k8s.audit.authorization.decision"
	attrAuthzReason          = "k8s.audit.authorization.reason"
	attrAdmissionWebhooks    = "k8s.audit.admission.webhooks"
	attrAdmissionMutatedBy   = "k8s.audit.admission.mutated_by"
	attrAdmissionPatchedBy   = "k8s.audit.admission.patched_by"
	attrAdmissionPatches     = "k8s.audit.admission.patches"
	attrAdmissionPatchesCut  = "k8s.audit.admission.patches.truncated"
	attrAdmissionPolicyFails = "k8s.audit.admission.policy_failures"
	attrPodSecurityPrefix    = "k8s.audit.pod_security."
	attrLatencyPrefix        = "k8s.audit.latency."
)

const (
	annAuthzDecision       = "authorization.k8s.io/decision"
	annAuthzReason         = "authorization.k8s.io/reason"
	authzAllow             = "allow"
	annMutationPrefix      = "mutation.webhook.admission.k8s.io/"
	annPatchPrefix         = "patch.webhook.admission.k8s.io/"
	annPolicyFailure       = "validation.policy.admission.k8s.io/validation_failure"
	annPodSecurityPrefix   = "pod-security.kubernetes.io/"
	annLatencyPrefix       = "apiserver.latency.k8s.io/"
	maxAnnotationValueSize = 4 << 10
)

// The scanner already made every string valid UTF-8 (see jsonscan.Unquote).

// putAnnotations turns the annotations the receiver understands into span attributes; others
// are left out (an audit policy or a webhook can write any number of them).
//   - authorization decision and reason;
//   - mutating admission webhooks, in call order (round, then index), and those that changed
//     the object (the annotations mutation.webhook.admission.k8s.io/round_<r>_index_<i>, whose
//     value is {"configuration","webhook","mutated"});
//   - the patches those webhooks applied (patch.webhook.admission.k8s.io/round_<r>_index_<i>,
//     {"configuration","webhook","patch","patchType"}, logged at Request level and above): the
//     webhooks, in call order, and their JSON patches, redacted like a patch request's body
//     (redactor.patchText: every value of a redacted resource's, env values and annotations
//     the rules name in any other's), all of them together within the body bound (maxBodyBytes);
//   - validating admission policy failures, as the apiserver wrote them (JSON), scrubbed of the
//     values redaction masks in the bodies (a policy's message may quote one);
//   - Pod Security (enforce-policy, audit-violations scrubbed likewise, exempt), under
//     k8s.audit.pod_security.*;
//   - the latency breakdown of slow requests (apiserver.latency.k8s.io/<stage>, Go durations) as
//     numbers of seconds under k8s.audit.latency.<stage>, so that a backend can aggregate them.
//
// red and whole redact the webhooks' patches (whole: the resource's values are all redacted);
// scrub is Converter.scrub. Every value is cut at its bound (bounds.go), noted in cut; at most
// maxWebhooks calls of each kind and maxKeyedAttributes Pod Security and latency attributes
// each are kept, and a name part longer than maxKeyNameBytes is no attribute.
func putAnnotations(attrs pcommon.Map, anns []annotation, red *redactor, whole bool, scrub func(string) string, cut *cuts) {
	var calls, patches []webhookCall
	var decision, reason string
	var podSecurity, latency int
	for _, a := range anns {
		switch {
		case a.Key == annAuthzDecision:
			decision = a.Value
		case a.Key == annAuthzReason:
			reason = a.Value
		case a.Key == annPolicyFailure:
			putNonEmpty(attrs, attrAdmissionPolicyFails, cut.text(attrAdmissionPolicyFails, scrub(a.Value), maxAnnotationValueSize))
		case strings.HasPrefix(a.Key, annMutationPrefix) && len(calls) == maxWebhooks:
			cut.note(attrAdmissionWebhooks)
		case strings.HasPrefix(a.Key, annPatchPrefix) && len(patches) == maxWebhooks:
			cut.note(attrAdmissionPatchedBy)
		case strings.HasPrefix(a.Key, annMutationPrefix):
			var m struct {
				Webhook string `json:"webhook"`
				Mutated bool   `json:"mutated"`
			}
			if json.Unmarshal([]byte(a.Value), &m) != nil || m.Webhook == "" {
				continue
			}
			round, index := callOrder(a.Key[len(annMutationPrefix):])
			calls = append(calls, webhookCall{round: round, index: index, webhook: cut.text(attrAdmissionWebhooks, m.Webhook, maxTokenBytes), mutated: m.Mutated})
		case strings.HasPrefix(a.Key, annPatchPrefix):
			var p struct {
				Webhook string          `json:"webhook"`
				Patch   json.RawMessage `json:"patch"`
			}
			if json.Unmarshal([]byte(a.Value), &p) != nil || p.Webhook == "" {
				continue
			}
			round, index := callOrder(a.Key[len(annPatchPrefix):])
			patches = append(patches, webhookCall{round: round, index: index, webhook: cut.text(attrAdmissionPatchedBy, p.Webhook, maxTokenBytes), patch: webhookPatch(p.Patch, red, whole)})
		case strings.HasPrefix(a.Key, annPodSecurityPrefix):
			if name := keyName(a.Key[len(annPodSecurityPrefix):]); name != "" && podSecurity < maxKeyedAttributes {
				podSecurity++
				v := a.Value
				if name == "audit_violations" {
					v = scrub(v)
				}
				key := attrPodSecurityPrefix + name
				putNonEmpty(attrs, key, cut.text(key, v, maxAnnotationValueSize))
			}
		case strings.HasPrefix(a.Key, annLatencyPrefix):
			name := keyName(a.Key[len(annLatencyPrefix):])
			d, err := time.ParseDuration(a.Value)
			if name != "" && err == nil && d >= 0 && latency < maxKeyedAttributes {
				latency++
				attrs.PutDouble(attrLatencyPrefix+name, d.Seconds())
			}
		}
	}
	putPatches(attrs, patches)
	putNonEmpty(attrs, attrAuthzDecision, cut.text(attrAuthzDecision, decision, maxShortBytes))
	if decision != authzAllow {
		// Why a request was allowed is the same long sentence on every request of a user
		// (which binding of which role): a tracing reader needs it when it was not.
		putNonEmpty(attrs, attrAuthzReason, cut.text(attrAuthzReason, reason, maxAnnotationValueSize))
	}
	if len(calls) == 0 {
		return
	}
	sortCalls(calls)
	webhooks := attrs.PutEmptySlice(attrAdmissionWebhooks)
	webhooks.EnsureCapacity(len(calls))
	var mutated pcommon.Slice
	for _, c := range calls {
		webhooks.AppendEmpty().SetStr(c.webhook)
		if c.mutated {
			if mutated == (pcommon.Slice{}) {
				mutated = attrs.PutEmptySlice(attrAdmissionMutatedBy)
			}
			mutated.AppendEmpty().SetStr(c.webhook)
		}
	}
}

// webhookCall is one mutating webhook call an annotation records, with its place in the
// admission chain: the reinvocation round, then the webhook's index in that round.
type webhookCall struct {
	round, index int
	webhook      string
	mutated      bool
	patch        string // the patch as exported (webhookPatch), for a patch annotation
}

// webhookPatch is the text a webhook's patch is exported as: compact JSON, with what the
// redaction rules name masked (for a redacted resource, every value: a JSON patch, the only
// type the apiserver applies, loses them all). No patch gives "".
func webhookPatch(raw json.RawMessage, red *redactor, whole bool) string {
	if len(raw) == 0 {
		return ""
	}
	return validText(red.patchText(raw, whole, maskConstant))
}

// putPatches sets the webhooks that patched the object and their patches, as two parallel
// arrays in call order. The patches share one budget, the body bound: the patch that exceeds
// it is cut, those after it are left "", and the span says so.
func putPatches(attrs pcommon.Map, patches []webhookCall) {
	if len(patches) == 0 {
		return
	}
	sortCalls(patches)
	names := attrs.PutEmptySlice(attrAdmissionPatchedBy)
	texts := attrs.PutEmptySlice(attrAdmissionPatches)
	names.EnsureCapacity(len(patches))
	texts.EnsureCapacity(len(patches))
	budget, truncated := maxBodyBytes, false
	for _, p := range patches {
		names.AppendEmpty().SetStr(p.webhook)
		text, cut := clipText(p.patch, budget)
		budget -= len(text)
		if cut {
			// What the cut left of the budget (part of a character) is no room for the next.
			budget, truncated = 0, true
		}
		texts.AppendEmpty().SetStr(text)
	}
	if truncated {
		attrs.PutBool(attrAdmissionPatchesCut, true)
	}
}

// sortCalls puts calls in call order. The apiserver writes its annotations as a JSON object with
// sorted keys, so round_0_index_10 comes before round_0_index_2.
func sortCalls(calls []webhookCall) {
	slices.SortStableFunc(calls, func(a, b webhookCall) int {
		return cmp.Or(cmp.Compare(a.round, b.round), cmp.Compare(a.index, b.index))
	})
}

// callOrder reads round_<r>_index_<i>; a name of another shape sorts last.
func callOrder(name string) (round, index int) {
	r, i, ok := strings.Cut(strings.TrimPrefix(name, "round_"), "_index_")
	rn, err1 := strconv.Atoi(r)
	in, err2 := strconv.Atoi(i)
	if !ok || !strings.HasPrefix(name, "round_") || err1 != nil || err2 != nil {
		return math.MaxInt, math.MaxInt
	}
	return rn, in
}

// keyName is attrName of an annotation's name part, or "" when it is longer than
// maxKeyNameBytes: the attribute's name would come from the sender.
func keyName(s string) string {
	if len(s) > maxKeyNameBytes {
		return ""
	}
	return attrName(s)
}

// attrName makes an annotation's name (enforce-policy, etcd) an attribute name segment
// (enforce_policy): lower-case letters, digits and underscores only; "" when nothing is left.
func attrName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case r == '-' || r == '_' || r == '.':
			b.WriteByte('_')
		}
	}
	return b.String()
}
