//go:build dist

package distribution_test

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// kafkaBrokers is the one value mode kafka requires besides clusterName.
const kafkaBrokers = "kafka.brokers={kafka-0.kafka.svc:9092,kafka-1.kafka.svc:9092}"

// renderKafka renders mode kafka with the given extra values and returns the objects, the edge's
// config and the processing tier's, each parsed and written to a file for `validate`.
func renderKafka(t *testing.T, sets ...string) (objs map[string]map[string]any, edge, processing map[string]any, edgePath, processingPath string) {
	t.Helper()
	objs = renderChart(t, append([]string{"clusterName=chart-test", controlPlaneCIDRs, "mode=kafka", kafkaBrokers}, sets...)...)
	edge, edgePath = configOf(t, objs, "ConfigMap/kt-kubetrail")
	processing, processingPath = configOf(t, objs, "ConfigMap/kt-kubetrail-processing")
	return objs, edge, processing, edgePath, processingPath
}

// configOf is the collector config of a rendered ConfigMap, parsed, and the file it is written to.
func configOf(t *testing.T, objs map[string]map[string]any, name string) (map[string]any, string) {
	t.Helper()
	raw, _ := dig(objs[name], "data", "config.yaml").(string)
	if raw == "" {
		t.Fatalf("no %s with config.yaml among %v", name, keys(objs))
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("%s config.yaml does not parse: %v", name, err)
	}
	path := filepath.Join(t.TempDir(), strings.ReplaceAll(name, "/", "-")+".yaml")
	if err := os.WriteFile(path, []byte(raw), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, path
}

// podLabels are the labels of a workload's pod template.
func podLabels(w map[string]any) map[string]any {
	l, _ := dig(w, "spec", "template", "metadata", "labels").(map[string]any)
	return l
}

// selects reports whether every label of selector is among labels.
func selects(selector, labels map[string]any) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestChartKafkaMode renders mode kafka: an edge StatefulSet behind the webhook Service whose
// config only forwards to Kafka (acknowledged by every in-sync replica, no queue, keyed by
// object), and a processing Deployment that reads the topic as the shipped example does; both
// configs pass the real binary's validate. The two tiers' pods are told apart by every selector:
// the webhook Service, the PDB and the webhook's NetworkPolicy take the edge only, the bundled
// Redis admits the processing tier only.
func TestChartKafkaMode(t *testing.T) {
	requireBinary(t)
	out, stderr, err := helm(t, "lint", "--strict", chartDir, "--set", backend, "--set", "clusterName=lint", "--set", "mode=kafka", "--set", kafkaBrokers, "--set", controlPlaneCIDRs)
	if err != nil {
		t.Errorf("helm lint --strict (mode kafka): %v\n%s%s", err, out, stderr)
	}
	objs, edge, proc, edgePath, procPath := renderKafka(t)
	validate(t, edgePath, "POD_IP=127.0.0.1")
	validate(t, procPath, "POD_IP=127.0.0.1", "REDIS_PASSWORD=x")
	for _, k := range []string{"StatefulSet/kt-kubetrail", "Deployment/kt-kubetrail-processing", "Service/kt-kubetrail", "Service/kt-kubetrail-headless",
		"PodDisruptionBudget/kt-kubetrail", "NetworkPolicy/kt-kubetrail", "NetworkPolicy/kt-kubetrail-processing", "NetworkPolicy/kt-kubetrail-redis",
		"Secret/kt-kubetrail-tls", "Secret/kt-kubetrail-apiserver-kubeconfig", "Deployment/kt-kubetrail-redis", "ClusterRole/kt-kubetrail", "Lease/kt-kubetrail-events"} {
		if objs[k] == nil {
			t.Errorf("%s not rendered (have %v)", k, keys(objs))
		}
	}

	// The edge: the webhook as gateway mode has it, into the kafka exporter and nothing else.
	requireWebhookTLS(t, edge, []any{"kube-apiserver-audit"})
	if got := keys(dig(edge, "receivers").(map[string]any)); !reflect.DeepEqual(got, []string{"k8s_audit"}) {
		t.Errorf("edge receivers %v, want k8s_audit only", got)
	}
	if got := keys(dig(edge, "service", "pipelines").(map[string]any)); !reflect.DeepEqual(got, []string{"logs/edge"}) {
		t.Errorf("edge pipelines %v, want logs/edge only", got)
	}
	for path, want := range map[string]any{
		"exporters.kafka.brokers":                               []any{"kafka-0.kafka.svc:9092", "kafka-1.kafka.svc:9092"},
		"exporters.kafka.logs.topic":                            "kube-audit",
		"exporters.kafka.logs.encoding":                         "otlp_proto",
		"exporters.kafka.partition_logs_by_resource_attributes": true,
		"receivers.k8s_audit.edge.shards":                       float64(0),
		"exporters.kafka.producer.required_acks":                "all",
		"exporters.kafka.producer.allow_auto_topic_creation":    false,
		"exporters.kafka.producer.max_message_bytes":            float64(8388608),
		"exporters.kafka.sending_queue.enabled":                 false,
		"service.pipelines.logs/edge.exporters":                 []any{"kafka"},
		"receivers.k8s_audit.endpoint":                          "${env:POD_IP}:9880",
		"receivers.k8s_audit.cluster":                           "chart-test",
	} {
		if got := digPath(edge, path); !reflect.DeepEqual(got, want) {
			t.Errorf("edge %s = %v, want %v", path, got, want)
		}
	}
	if strings.Contains(mustYAML(t, edge), "redis") {
		t.Errorf("the edge's config names Redis: it keeps nothing")
	}
	sts := objs["StatefulSet/kt-kubetrail"]
	if v := dig(sts, "spec", "volumeClaimTemplates"); v != nil {
		t.Errorf("the edge has volume claims %v: it keeps nothing", v)
	}
	if v := dig(sts, "spec", "template", "spec", "automountServiceAccountToken"); v != false {
		t.Errorf("the edge's pods get a ServiceAccount token (automountServiceAccountToken %v): it calls no API", v)
	}
	edgeC := dig(sts, "spec", "template", "spec", "containers", 0)
	checkTLSMount(t, tlsVolume(sts), edgeC)
	if envFrom(edgeC, "REDIS_PASSWORD") != nil {
		t.Errorf("the edge's container has the Redis password")
	}
	if r := dig(edgeC, "resources", "limits", "memory"); r != "512Mi" {
		t.Errorf("edge memory limit %v, want kafka.edge.resources' 512Mi", r)
	}

	// The processing tier: the shipped example's consumer, connector and processor.
	for path, want := range map[string]any{
		"receivers.kafka.brokers":                                    []any{"kafka-0.kafka.svc:9092", "kafka-1.kafka.svc:9092"},
		"receivers.kafka.logs.topics":                                []any{"kube-audit"},
		"receivers.kafka.logs.encoding":                              "otlp_proto",
		"receivers.kafka.group_id":                                   "kt-kubetrail-processing",
		"receivers.kafka.initial_offset":                             "earliest",
		"receivers.kafka.message_marking.after":                      true,
		"receivers.kafka.message_marking.on_error":                   false,
		"receivers.kafka.message_marking.on_permanent_error":         true,
		"receivers.kafka.error_backoff.enabled":                      true,
		"receivers.kafka.error_backoff.initial_interval":             "1s",
		"receivers.kafka.partition_processing.independent":           true,
		"receivers.kafka.partition_processing.max_in_flight.records": float64(4),
		"receivers.kafka.partition_processing.max_in_flight.bytes":   float64(16 << 20),
		"connectors.k8s_audit.cluster":                               "chart-test",
		"connectors.k8s_audit.cluster_attribute":                     "k8s.cluster.name",
		"processors.k8s_object_link.owner_wait":                      "0s",
		"processors.k8s_object_link.id_map.backend":                  "redis",
		"exporters.otlp_grpc.sending_queue.enabled":                  false,
		"exporters.otlp_grpc.compression":                            "gzip",
		"exporters.otlp_grpc.retry_on_failure.max_elapsed_time":      float64(0),
		"service.pipelines.logs/audit.receivers":                     []any{"kafka"},
		"service.pipelines.logs/audit.exporters":                     []any{"k8s_audit"},
		"service.pipelines.traces.receivers":                         []any{"k8s_audit", "k8s_event_spans"},
		"service.pipelines.traces.processors":                        []any{"memory_limiter", "k8s_object_link"},
	} {
		if got := digPath(proc, path); !reflect.DeepEqual(got, want) {
			t.Errorf("processing %s = %v, want %v", path, got, want)
		}
	}
	if got := digPath(proc, "connectors.k8s_audit.shared_diff_base.redis"); !reflect.DeepEqual(got, digPath(proc, "processors.k8s_object_link.id_map.redis")) {
		t.Errorf("shared diff base %v, want the ID map's Redis (redis.sharedDiffBase defaults to true)", got)
	}
	dep := objs["Deployment/kt-kubetrail-processing"]
	if r := dig(dep, "spec", "replicas"); r != float64(2) {
		t.Errorf("processing replicas %v, want 2", r)
	}
	procC := dig(dep, "spec", "template", "spec", "containers", 0)
	if envFrom(procC, "REDIS_PASSWORD") == nil {
		t.Errorf("the processing container has no Redis password")
	}
	if tlsVolume(dep) != nil {
		t.Errorf("the processing pods mount the webhook's certificate")
	}
	if dig(dep, "spec", "template", "metadata", "annotations", "checksum/config") == dig(sts, "spec", "template", "metadata", "annotations", "checksum/config") {
		t.Errorf("both tiers carry the same config checksum: a change to one config must restart its own pods")
	}

	// Selectors: the edge's and the processing tier's pods are apart.
	edgePods, procPods := podLabels(sts), podLabels(dep)
	for _, c := range []struct {
		what     string
		selector any
		edge     bool // selects the edge's pods (else the processing tier's)
	}{
		{"the StatefulSet", dig(sts, "spec", "selector", "matchLabels"), true},
		{"the Deployment", dig(dep, "spec", "selector", "matchLabels"), false},
		{"the webhook Service", dig(objs["Service/kt-kubetrail"], "spec", "selector"), true},
		{"the headless Service", dig(objs["Service/kt-kubetrail-headless"], "spec", "selector"), true},
		{"the PodDisruptionBudget", dig(objs["PodDisruptionBudget/kt-kubetrail"], "spec", "selector", "matchLabels"), true},
		{"the webhook's NetworkPolicy", dig(objs["NetworkPolicy/kt-kubetrail"], "spec", "podSelector", "matchLabels"), true},
		{"the processing NetworkPolicy", dig(objs["NetworkPolicy/kt-kubetrail-processing"], "spec", "podSelector", "matchLabels"), false},
		{"the bundled Redis' NetworkPolicy peer", dig(objs["NetworkPolicy/kt-kubetrail-redis"], "spec", "ingress", 0, "from", 0, "podSelector", "matchLabels"), false},
	} {
		sel, _ := c.selector.(map[string]any)
		if selects(sel, edgePods) != c.edge || selects(sel, procPods) == c.edge {
			t.Errorf("%s (%v) selects the edge's pods: %v, the processing pods: %v; want only the %s",
				c.what, sel, selects(sel, edgePods), selects(sel, procPods), map[bool]string{true: "edge's", false: "processing tier's"}[c.edge])
		}
	}
	if ing := dig(objs["NetworkPolicy/kt-kubetrail-processing"], "spec", "ingress"); len(ing.([]any)) != 1 || dig(ing, 0, "ports", 0, "port") != "metrics" {
		t.Errorf("the processing pods admit %v, want the metrics port only", ing)
	}

	// Gateway mode keeps the selector it always had (a StatefulSet's cannot change on upgrade).
	gw := renderChart(t, "clusterName=chart-test", controlPlaneCIDRs)
	if sel := dig(gw["StatefulSet/kt-kubetrail"], "spec", "selector", "matchLabels"); !reflect.DeepEqual(sel, map[string]any{"app.kubernetes.io/name": "kubetrail", "app.kubernetes.io/instance": "kt"}) {
		t.Errorf("gateway StatefulSet selector %v changed", sel)
	}
}

// TestChartKafkaAuth: TLS (a CA, a client certificate, a server name) and SASL reach both tiers'
// kafka components, from mounted Secrets and a Secret-backed env variable, and both configs
// validate.
func TestChartKafkaAuth(t *testing.T) {
	requireBinary(t)
	objs, edge, proc, edgePath, procPath := renderKafka(t,
		"kafka.tls.enabled=true", "kafka.tls.caSecret.name=kafka-ca", "kafka.tls.caSecret.key=ca.pem",
		"kafka.tls.clientSecret=kafka-client", "kafka.tls.serverName=kafka.example",
		"kafka.sasl.mechanism=SCRAM-SHA-512", "kafka.sasl.username=kubetrail",
		"kafka.sasl.passwordSecret.name=kafka-sasl", "kafka.sasl.passwordSecret.key=password")
	validate(t, edgePath, "POD_IP=127.0.0.1", "KAFKA_SASL_PASSWORD=x")
	validate(t, procPath, "POD_IP=127.0.0.1", "REDIS_PASSWORD=x", "KAFKA_SASL_PASSWORD=x")
	want := map[string]any{
		"tls": map[string]any{"insecure": false, "ca_file": "/etc/otelcol-kubetrail-kafka-tls/ca.crt",
			"cert_file": "/etc/otelcol-kubetrail-kafka-client/tls.crt", "key_file": "/etc/otelcol-kubetrail-kafka-client/tls.key",
			"server_name_override": "kafka.example"},
		"auth": map[string]any{"sasl": map[string]any{"mechanism": "SCRAM-SHA-512", "username": "kubetrail", "password": "${env:KAFKA_SASL_PASSWORD}"}},
	}
	for _, tier := range []struct {
		name     string
		cfg      map[string]any
		comp     string
		workload map[string]any
	}{
		{"edge", edge, "exporters.kafka", objs["StatefulSet/kt-kubetrail"]},
		{"processing", proc, "receivers.kafka", objs["Deployment/kt-kubetrail-processing"]},
	} {
		for k, w := range want {
			if got := digPath(tier.cfg, tier.comp+"."+k); !reflect.DeepEqual(got, w) {
				t.Errorf("%s %s.%s = %v, want %v", tier.name, tier.comp, k, got, w)
			}
		}
		c := dig(tier.workload, "spec", "template", "spec", "containers", 0)
		ref := dig(envFrom(c, "KAFKA_SASL_PASSWORD"), "secretKeyRef")
		if !reflect.DeepEqual(ref, map[string]any{"name": "kafka-sasl", "key": "password"}) {
			t.Errorf("%s: KAFKA_SASL_PASSWORD from %v, want the Secret kafka-sasl's key password", tier.name, ref)
		}
		mounts := map[string]string{}
		for _, m := range dig(c, "volumeMounts").([]any) {
			mounts[dig(m, "name").(string)] = dig(m, "mountPath").(string)
		}
		secrets := map[string]string{}
		for _, v := range dig(tier.workload, "spec", "template", "spec", "volumes").([]any) {
			if s, ok := dig(v, "secret", "secretName").(string); ok {
				secrets[dig(v, "name").(string)] = s
			}
		}
		for vol, w := range map[string][2]string{"kafka-tls": {"/etc/otelcol-kubetrail-kafka-tls", "kafka-ca"}, "kafka-client": {"/etc/otelcol-kubetrail-kafka-client", "kafka-client"}} {
			if mounts[vol] != w[0] || secrets[vol] != w[1] {
				t.Errorf("%s: volume %s is the Secret %q mounted at %q, want %q at %q", tier.name, vol, secrets[vol], mounts[vol], w[1], w[0])
			}
		}
	}
}

// TestChartKafkaRefusesBadValues: what mode kafka cannot honour fails the rendering, naming the key.
func TestChartKafkaRefusesBadValues(t *testing.T) {
	base := []string{"clusterName=c", controlPlaneCIDRs, "mode=kafka"}
	for _, tc := range []struct {
		name string
		sets []string
		want string
	}{
		{"no brokers", nil, "kafka.brokers is required"},
		{"a broker without a port", []string{"kafka.brokers={kafka}"}, "kafka/brokers/0"},
		{"more processing replicas than partitions", []string{kafkaBrokers, "kafka.partitions=2", "kafka.processing.replicas=3"}, "kafka.processing.replicas (3) > kafka.partitions (2)"},
		{"processing replicas without a shared ID map", []string{kafkaBrokers, "redis.bundled.enabled=false"}, "kafka.processing.replicas > 1 needs a shared ID map"},
		{"SASL without a password", []string{kafkaBrokers, "kafka.sasl.mechanism=PLAIN", "kafka.sasl.username=u"}, "kafka.sasl.mechanism needs"},
		{"an unknown SASL mechanism", []string{kafkaBrokers, "kafka.sasl.mechanism=GSSAPI"}, "kafka/sasl/mechanism"},
		{"a TLS setting without TLS", []string{kafkaBrokers, "kafka.tls.serverName=k"}, "take effect only with kafka.tls.enabled=true"},
		{"misspelled key", []string{kafkaBrokers, "kafka.procesing.replicas=1"}, "additional properties 'procesing' not allowed"},
		{"negative edge shards", []string{kafkaBrokers, "kafka.edge.shards=-1"}, "kafka/edge/shards"},
		{"no control-plane CIDRs for the webhook", []string{kafkaBrokers, "gateway.networkPolicy.controlPlaneCIDRs=null"}, "gateway.networkPolicy.controlPlaneCIDRs is required"},
	} {
		t.Run(tc.name, func(t *testing.T) { requireRenderingRefused(t, append(slices.Clone(base), tc.sets...), tc.want) })
	}
}

// TestChartKafkaNotes: the notes of mode kafka give the webhook's kubeconfig commands (as gateway
// mode's), the command that creates the topic with the partitions and message size the release
// needs, and what uninstall leaves in Kafka.
func TestChartKafkaNotes(t *testing.T) {
	notes := renderNotes(t, "", controlPlaneCIDRs, "mode=kafka", kafkaBrokers, "kafka.partitions=12", "kafka.topic=audit-prod")
	requireNotesSay(t, notes,
		"get secret kt-kubetrail-apiserver-kubeconfig",
		"--create --topic audit-prod",
		"--partitions 12",
		"--config max.message.bytes=8388608",
		"--bootstrap-server kafka-0.kafka.svc:9092",
		"offsets of the consumer group kt-kubetrail-processing",
	)
	if strings.Contains(notes, "delete pvc") {
		t.Errorf("the notes of mode kafka speak of volume claims; the edge has none:\n%s", notes)
	}
}

// digPath is dig with a dotted path whose keys may contain '/' (pipeline names).
func digPath(v any, path string) any {
	var p []any
	for _, k := range strings.Split(path, ".") {
		p = append(p, k)
	}
	return dig(v, p...)
}

func mustYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
