package k8sauditreceiver

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
	attrAdmissionPolicyFails = "k8s.audit.admission.policy_failures"
	attrPodSecurityPrefix    = "k8s.audit.pod_security."
	attrLatencyPrefix        = "k8s.audit.latency."
)

const (
	annAuthzDecision       = "authorization.k8s.io/decision"
	annAuthzReason         = "authorization.k8s.io/reason"
	annMutationPrefix      = "mutation.webhook.admission.k8s.io/"
	annPolicyFailure       = "validation.policy.admission.k8s.io/validation_failure"
	annPodSecurityPrefix   = "pod-security.kubernetes.io/"
	annLatencyPrefix       = "apiserver.latency.k8s.io/"
	maxAnnotationValueSize = 4 << 10
)

// The scanner already made every string valid UTF-8 (see unquote).

// putAnnotations turns the annotations the receiver understands into span attributes; others
// are left out (an audit policy or a webhook can write any number of them).
//   - authorization decision and reason;
//   - mutating admission webhooks, in call order (round, then index), and those that changed
//     the object (the annotations mutation.webhook.admission.k8s.io/round_<r>_index_<i>, whose
//     value is {"configuration","webhook","mutated"});
//   - validating admission policy failures, as the apiserver wrote them (JSON);
//   - Pod Security (enforce-policy, audit-violations, exempt), under k8s.audit.pod_security.*;
//   - the latency breakdown of slow requests (apiserver.latency.k8s.io/<stage>, Go durations) as
//     numbers of seconds under k8s.audit.latency.<stage>, so that a backend can aggregate them.
func putAnnotations(attrs pcommon.Map, anns []annotation) {
	var calls []webhookCall
	for _, a := range anns {
		switch {
		case a.Key == annAuthzDecision:
			putNonEmpty(attrs, attrAuthzDecision, a.Value)
		case a.Key == annAuthzReason:
			putNonEmpty(attrs, attrAuthzReason, clipAnnotation(a.Value))
		case a.Key == annPolicyFailure:
			putNonEmpty(attrs, attrAdmissionPolicyFails, clipAnnotation(a.Value))
		case strings.HasPrefix(a.Key, annMutationPrefix):
			var m struct {
				Webhook string `json:"webhook"`
				Mutated bool   `json:"mutated"`
			}
			if json.Unmarshal([]byte(a.Value), &m) != nil || m.Webhook == "" {
				continue
			}
			round, index := callOrder(a.Key[len(annMutationPrefix):])
			calls = append(calls, webhookCall{round: round, index: index, webhook: m.Webhook, mutated: m.Mutated})
		case strings.HasPrefix(a.Key, annPodSecurityPrefix):
			if name := attrName(a.Key[len(annPodSecurityPrefix):]); name != "" {
				putNonEmpty(attrs, attrPodSecurityPrefix+name, clipAnnotation(a.Value))
			}
		case strings.HasPrefix(a.Key, annLatencyPrefix):
			name := attrName(a.Key[len(annLatencyPrefix):])
			d, err := time.ParseDuration(a.Value)
			if name != "" && err == nil && d >= 0 {
				attrs.PutDouble(attrLatencyPrefix+name, d.Seconds())
			}
		}
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

func clipAnnotation(s string) string {
	if len(s) <= maxAnnotationValueSize {
		return s
	}
	cut := maxAnnotationValueSize
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut]
}
