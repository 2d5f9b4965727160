// Package e2e is kubetrail's end-to-end harness: a real control plane (testbed/hack/cluster-up.sh),
// Jaeger v2 as the OTLP backend, and bin/otelcol-kubetrail configured with every kubetrail
// component the binary has, checked by tests that read the traces back from Jaeger's query APIs.
// Everything but this file builds only with the `e2e` tag, so `go test ./...` does not compile it;
// run it with testbed/hack/e2e.sh (make e2e).
//
// # Lifecycle
//
// TestMain (main_test.go) brings up, once for the whole package: an in-process audit router (the
// apiserver's webhook target), the control plane (state in testbed/.out/e2e/state, audit policy
// testbed/policy/audit-policy-secrets.yaml), Jaeger, and the "main" collector, routes the audit
// stream to the collector, then runs every scenario once: every testbed/scenarios/*.sh by file name
// ([Scenarios]), so a new script is a new scenario with no change here. Then the tests run, those
// that call [AfterOthers] last; then it prints the summary (also in testbed/.out/e2e/summary.txt) and stops every
// process by PID, also on SIGINT/SIGTERM. Logs and generated configs stay in testbed/.out/e2e.
// KUBETRAIL_E2E_SCENARIOS=deployment,conflict runs a subset (an unknown name fails the setup);
// tests of the others then fail.
//
// # Writing a test
//
//	func TestSomething(t *testing.T) {
//		env := e2e.Testbed(t)                 // (inside package e2e: Testbed(t))
//		run := env.Run(t, "deployment")       // the TestMain run; fails t if the script failed
//		spans := env.Spans(t, run)            // every span of every trace touching the run's window,
//		                                      // polled until ingestion settles
//		audit := spans.OfType(model.SpanTypeAudit).ForObject("Deployment", "default", "demo")
//		Check(t, "a named check", len(audit) > 0, "got %v", audit.Names())
//	}
//
// [Check] records a named check for the summary and fails the test when false; use it for every
// assertion so the summary counts it.
//
// # Querying spans
//
// [Span] is a flattened OTLP span (hex IDs, typed attribute values, events, links, status,
// resource). [Spans] filters: Where, Named, NameHasPrefix, WithAttr, OfType, ForObject,
// InNamespace, Between, WithEvent; and Values, Names, CountBy, DuplicateIDs, ByID, Traces.
// Spans.Tree builds the parent/child [Tree] per trace (Roots, Orphans for spans whose parent was
// not exported, Find, Node.Children, String for a readable dump in failure messages).
// [Env.WaitSpans] polls until a condition holds (for checks that need the processor's held
// spans, or events that trail). [Jaeger] exposes the raw APIs: Services, TraceIDs
// (/api/traces?service=…), Trace (/api/v3/traces/{id}), SearchRaw, Fetch.
//
// # More collectors, restarts, reruns
//
//	cfg := env.CollectorConfig()                        // the main collector's config, as a map
//	cfg.Set("processors.k8s_object_link.id_map.backend", "redis")
//	cfg.Set("processors.k8s_object_link.id_map.redis.addresses", []any{"127.0.0.1:6379"})
//	a := env.StartExtraCollector(t, "replica-a", cfg)   // stopped when t ends
//	b := env.StartExtraCollector(t, "replica-b", env.CollectorConfig().Set(…))
//	env.Router.SetRoute(e2e.RoundRobin(a.AuditURL, b.AuditURL))   // or ToAll(…), or any Route
//	t.Cleanup(env.RestoreRoute)
//	run, err := env.RunScenario("deployment")            // scenarios are idempotent: rerun freely
//	spans := env.Spans(t, run)
//
// The apiserver may send a whole short scenario in one or two POSTs, so RoundRobin can leave a
// replica idle: env.Router.SplitItems(a.AuditURL, b.AuditURL) deals the events of every POST over
// the replicas one by one instead (each part posted as its own EventList).
// Route decides, per audit webhook POST, which collectors get the body; a body is acknowledged
// to the apiserver only when every target took it (otherwise the apiserver retries it, as with
// a real collector that is down). Collector.Restart (graceful), Collector.Kill (crash) and
// Collector.Stop let a test take a collector away mid-scenario: run the scenario script in a
// goroutine with RunScenario, restart, then check the spans. Every extra collector exports to the
// same Jaeger; give each a distinct name (its config and log go to testbed/.out/e2e/collector-<name>.*).
// With several collectors running k8s_event_spans, each watches Events itself and exports
// every Event: drop that receiver from extra collectors (cfg.Delete plus SetPipeline) unless the
// test is about that. Two k8s_object_link processors without a shared Redis ID map each emit the
// object spans they see. Both leave duplicate span IDs in Jaeger for later tests' windows, so
// such tests call AfterOthers(t) first: they run after every other test, one at a time.
//
// # The Helm chart as installed
//
// Env.StartChartPod runs the collector of an installed release's StatefulSet or DaemonSet as its
// pod would: the workload's args and env read back from the apiserver, its ConfigMap and Secrets
// laid out at the mount paths under a directory of the test's (the only change: those paths,
// re-rooted, in the args and the config), a TokenRequest token of its ServiceAccount at
// /var/run/secrets/kubernetes.io/serviceaccount in a mount namespace of its own (unshare), its
// POD_IP a loopback address of its own (127.0.0.N, so the chart's fixed ports do not collide) and
// an /etc/hosts that resolves the release's Services. Env.StartChartRedis runs the bundled Redis
// from its Deployment; Env.StartAPIServer starts a second kube-apiserver of the cluster (same
// etcd and PKI) with a given audit webhook kubeconfig, for the chart's own. helm_install_test.go
// installs the README's commands with them.
//
// Env also has Kubeconfig, Kubectl and RunKubectl for direct cluster access, Components (what
// the binary was built with: Components.Has("processors", "k8s_object_link")), Root and OutDir.
package e2e
