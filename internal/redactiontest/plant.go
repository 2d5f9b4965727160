// Package redactiontest plants credentials into recorded audit captures (audit.k8s.io/v1
// EventLists), in every place kubetrail's redaction promises to mask them, for the tests that
// search the exported bytes for them: internal/auditconv's and the built binary's
// (distribution/redaction_test.go).
package redactiontest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

// Prefix starts every planted value, so that a test can search for any part of one (a value
// cut at a length bound is still found).
const Prefix = "ktplanted"

// Names under which the credentials are planted.
const (
	EnvPassword   = "APP_DB_PASSWORD"       // a literal env value, in every container
	EnvToken      = "APP_API_TOKEN"         // another
	EnvWebhook    = "VAULT_TOKEN"           // the env value a mutating webhook's patch adds
	EnvPlain      = "APP_LOG_LEVEL"         // a harmless name: its value is exported
	PlainValue    = "debug-level-visible"   // … and this is it
	AnnotationKey = "example.com/api-token" // an object annotation whose value is masked
	SecretKey     = "password"              // a Secret data key
	webhookName   = "inject.example.com"
)

// Planter rewrites captures and remembers every value it planted.
type Planter struct {
	n      int
	Values []string // every planted value, in planting order
}

func (p *Planter) value(what string) string {
	p.n++
	v := fmt.Sprintf("%s-%s-%04d-q7z", Prefix, what, p.n)
	p.Values = append(p.Values, v)
	return v
}

// Forms returns every form of a planted value a leak could take: as written, and base64 (a
// Secret's data). Searching for Prefix finds any part of them but base64's.
func Forms(v string) []string {
	return []string{v, base64.StdEncoding.EncodeToString([]byte(v))}
}

// Capture rewrites one webhook body. In every item's request and response bodies it plants:
//   - in every container list (a Pod's, a pod template's, a patch's), two literal env values of
//     credential names (APP_DB_PASSWORD, APP_API_TOKEN) beside a harmless one (APP_LOG_LEVEL),
//     names no recorded container has (the secret scenario's DB_PASSWORD and API_TOKEN come from
//     a Secret, valueFrom), so that env lists stay keyed by name;
//   - on every object, and on every pod template, the annotation example.com/api-token;
//   - in a Secret, a new value of every data and stringData key, and in the last-applied
//     annotation of any object, the same plants inside;
//   - fresh values each time, so that writes change them and diffs show it.
//
// On a Pod or Secret create it adds a mutating webhook's patch annotation that sets a
// credential (an env value, an annotation, a Secret key); on a failed request with a body it
// appends the planted env value to the error message and causes, as a webhook denying the
// request might quote it.
func (p *Planter) Capture(body []byte) ([]byte, error) {
	var list map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&list); err != nil {
		return nil, err
	}
	items, _ := list["items"].([]any)
	for _, it := range items {
		ev, ok := it.(map[string]any)
		if !ok {
			continue
		}
		var echoed []string
		for _, k := range []string{"requestObject", "responseObject"} {
			if obj, ok := ev[k].(map[string]any); ok {
				echoed = append(echoed, p.object(obj, 0)...)
			}
		}
		ref, _ := ev["objectRef"].(map[string]any)
		resource, _ := ref["resource"].(string)
		sub, _ := ref["subresource"].(string)
		if ev["verb"] == "create" && sub == "" && (resource == "pods" || resource == "secrets") {
			p.webhookPatch(ev, resource)
		}
		if st, ok := ev["responseStatus"].(map[string]any); ok && len(echoed) > 0 {
			if n, _ := st["code"].(json.Number); code(n) >= 400 {
				msg, _ := st["message"].(string)
				st["message"] = msg + fmt.Sprintf("; denied: env %s has the literal value %q", EnvPassword, echoed[0])
				st["details"] = map[string]any{"causes": []any{map[string]any{
					"field": "spec.containers[0].env[0].value", "reason": "FieldValueForbidden",
					"message": "literal credential " + echoed[0],
				}}}
			}
		}
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(list); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

func code(n json.Number) int64 {
	c, _ := n.Int64()
	return c
}

// object plants into one body (or a last-applied annotation's object) and returns the env
// values it planted.
func (p *Planter) object(obj map[string]any, depth int) []string {
	kind, _ := obj["kind"].(string)
	switch kind {
	case "Status", "DeleteOptions", "Scale", "Binding", "Eviction":
		return nil
	}
	var envs []string
	p.walk(obj, &envs)
	if md, ok := obj["metadata"].(map[string]any); ok {
		p.annotate(md, depth)
	}
	if kind == "Secret" {
		for _, f := range []string{"data", "stringData"} {
			m, ok := obj[f].(map[string]any)
			if !ok {
				continue
			}
			for k := range m {
				v := p.value("secret-" + f)
				if f == "data" {
					m[k] = base64.StdEncoding.EncodeToString([]byte(v))
				} else {
					m[k] = v
				}
			}
		}
	}
	return envs
}

// walk adds env entries to every container list and the annotation to every pod template.
func (p *Planter) walk(v any, envs *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			if list, ok := c.([]any); ok && (k == "containers" || k == "initContainers") {
				for _, el := range list {
					ctr, ok := el.(map[string]any)
					if !ok {
						continue
					}
					pw, tok := p.value("env-password"), p.value("env-token")
					*envs = append(*envs, pw, tok)
					env, _ := ctr["env"].([]any)
					ctr["env"] = append(env,
						map[string]any{"name": EnvPassword, "value": pw},
						map[string]any{"name": EnvToken, "value": tok},
						map[string]any{"name": EnvPlain, "value": PlainValue})
				}
				continue
			}
			if tmpl, ok := c.(map[string]any); ok && k == "template" {
				if md, ok := tmpl["metadata"].(map[string]any); ok {
					p.annotate(md, 1)
				} else if _, ok := tmpl["spec"]; ok {
					tmpl["metadata"] = map[string]any{"annotations": map[string]any{AnnotationKey: p.value("template-annotation")}}
				}
			}
			p.walk(c, envs)
		}
	case []any:
		for _, c := range x {
			p.walk(c, envs)
		}
	}
}

// annotate adds the credential annotation, and plants inside a last-applied annotation.
func (p *Planter) annotate(md map[string]any, depth int) {
	ann, _ := md["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		md["annotations"] = ann
	}
	ann[AnnotationKey] = p.value("annotation")
	const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"
	if s, ok := ann[lastApplied].(string); ok && depth == 0 {
		var inner map[string]any
		dec := json.NewDecoder(strings.NewReader(s))
		dec.UseNumber()
		if dec.Decode(&inner) == nil {
			p.object(inner, depth+1)
			b, _ := json.Marshal(inner)
			ann[lastApplied] = string(b) + "\n"
		}
	}
}

// webhookPatch adds the audit annotation of a mutating webhook whose JSON patch set a
// credential.
func (p *Planter) webhookPatch(ev map[string]any, resource string) {
	var ops []any
	if resource == "secrets" {
		ops = []any{map[string]any{"op": "add", "path": "/data/injected", "value": base64.StdEncoding.EncodeToString([]byte(p.value("webhook-secret")))}}
	} else {
		ops = []any{
			map[string]any{"op": "add", "path": "/spec/containers/0/env/-", "value": map[string]any{"name": EnvWebhook, "value": p.value("webhook-env")}},
			map[string]any{"op": "replace", "path": "/spec/containers/0/env/0/value", "value": p.value("webhook-env-by-index")},
			map[string]any{"op": "add", "path": "/metadata/annotations/example.com~1api-token", "value": p.value("webhook-annotation")},
		}
	}
	patch, _ := json.Marshal(map[string]any{"configuration": "inject", "webhook": webhookName, "patch": ops, "patchType": "JSONPatch"})
	anns, _ := ev["annotations"].(map[string]any)
	if anns == nil {
		anns = map[string]any{}
		ev["annotations"] = anns
	}
	anns["patch.webhook.admission.k8s.io/round_0_index_0"] = string(patch)
	anns["mutation.webhook.admission.k8s.io/round_0_index_0"] = fmt.Sprintf(`{"configuration":"inject","webhook":%q,"mutated":true}`, webhookName)
}
