{{/* Names and labels. */}}
{{- define "kubetrail.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kubetrail.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
The labels that select the collector pods of the webhook's StatefulSet (and its Services, PDB and
NetworkPolicy). Mode kafka adds the component, since the processing Deployment's pods carry the
same name and instance; the other modes keep the selector they always had (a StatefulSet's
selector cannot change on upgrade).
*/}}
{{- define "kubetrail.podSelectorLabels" -}}
{{ include "kubetrail.selectorLabels" . }}
{{- if eq .Values.mode "kafka" }}
app.kubernetes.io/component: edge
{{- end }}
{{- end -}}

{{- define "kubetrail.processingSelectorLabels" -}}
{{ include "kubetrail.selectorLabels" . }}
app.kubernetes.io/component: processing
{{- end -}}

{{- define "kubetrail.processingName" -}}
{{- printf "%s-processing" (include "kubetrail.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The viewer's (viewer.enabled): a name of its own, so that no selector of the collector's (the
webhook's StatefulSet, Services, PDB, NetworkPolicy, monitors: name and instance) matches its pods.
*/}}
{{- define "kubetrail.viewerName" -}}
{{- printf "%s-viewer" (include "kubetrail.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kubetrail.viewerSelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-viewer
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kubetrail.viewerLabels" -}}
{{ include "kubetrail.viewerSelectorLabels" . }}
app.kubernetes.io/component: viewer
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* "true" when the release receives the apiserver's audit webhook: modes gateway and kafka. */}}
{{- define "kubetrail.hasWebhook" -}}
{{- if has .Values.mode (list "gateway" "kafka") -}}true{{- end -}}
{{- end -}}

{{- define "kubetrail.labels" -}}
{{ include "kubetrail.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: collector
{{- end -}}

{{- define "kubetrail.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kubetrail.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kubetrail.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "kubetrail.redisName" -}}
{{- printf "%s-redis" (include "kubetrail.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The Redis addresses of the ID map: the user's, the bundled one's, or none (memory). */}}
{{- define "kubetrail.redisAddresses" -}}
{{- if .Values.redis.addresses -}}
{{- toJson .Values.redis.addresses -}}
{{- else if .Values.redis.bundled.enabled -}}
{{- toJson (list (printf "%s.%s.svc:6379" (include "kubetrail.redisName" .) .Release.Namespace)) -}}
{{- else -}}
[]
{{- end -}}
{{- end -}}

{{/*
Where the webhook's certificates come from: "" (gateway.tls.insecurePlainHTTP, or no webhook),
"existingSecret", "certManager" or "generate" (the default).
*/}}
{{- define "kubetrail.webhookCerts" -}}
{{- $tls := .Values.gateway.tls -}}
{{- if and (include "kubetrail.hasWebhook" .) (not $tls.insecurePlainHTTP) -}}
{{- if $tls.existingSecret -}}existingSecret
{{- else if $tls.certManager.enabled -}}certManager
{{- else -}}generate
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
An object of the release as it is in the cluster (lookup), as JSON; {} when there is none or no
cluster (helm template). dict: root, kind, name. The one place the chart reads the cluster: the
tests replace it to render an upgrade.
*/}}
{{- define "kubetrail.lookup" -}}
{{- lookup "v1" .kind .root.Release.Namespace .name | default dict | toJson -}}
{{- end -}}

{{/* The Secret mounted by the collector: tls.crt, tls.key and ca.crt (the client CA). */}}
{{- define "kubetrail.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "kubetrail.fullname" .)) .Values.gateway.tls.existingSecret -}}
{{- end -}}

{{/*
Where the certificates of managed mode's default OTLP receiver come from: "" (another mode,
managed.tls.insecurePlaintext, or receivers of your own in managed.receivers, which configure
their own tls or auth), "existingSecret", "certManager" or "generate" (the default).
*/}}
{{- define "kubetrail.managedCerts" -}}
{{- $tls := .Values.managed.tls -}}
{{- if and (eq .Values.mode "managed") (not $tls.insecurePlaintext) (not .Values.managed.receivers) -}}
{{- if $tls.existingSecret -}}existingSecret
{{- else if $tls.certManager.enabled -}}certManager
{{- else -}}generate
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "true" when the collector has the OTLP receiver of gateway.otlp (mode gateway only). */}}
{{- define "kubetrail.otlpTraces" -}}
{{- if and (eq .Values.mode "gateway") .Values.gateway.otlp.enabled -}}true{{- end -}}
{{- end -}}

{{/* The OTLP receiver's Secret in mode managed: tls.crt, tls.key and ca.crt (the shippers' CA). */}}
{{- define "kubetrail.receiverTLSSecretName" -}}
{{- default (printf "%s-receiver-tls" (include "kubetrail.fullname" .)) .Values.managed.tls.existingSecret -}}
{{- end -}}

{{/* The Secret with the log shipper's client certificate (tls.crt, tls.key, ca.crt), mode managed. */}}
{{- define "kubetrail.shipperSecretName" -}}
{{- printf "%s-shipper-client" (include "kubetrail.fullname" .) -}}
{{- end -}}

{{/* The TLS Secret the collector mounts at /etc/otelcol-kubetrail-tls, "" for none. */}}
{{- define "kubetrail.mountedTLSSecretName" -}}
{{- if include "kubetrail.webhookCerts" . -}}
{{- include "kubetrail.tlsSecretName" . -}}
{{- else if include "kubetrail.managedCerts" . -}}
{{- include "kubetrail.receiverTLSSecretName" . -}}
{{- end -}}
{{- end -}}

{{/* The Secret with the apiserver's audit webhook kubeconfig (certificates generated by the chart). */}}
{{- define "kubetrail.kubeconfigSecretName" -}}
{{- printf "%s-apiserver-kubeconfig" (include "kubetrail.fullname" .) -}}
{{- end -}}

{{/* The Secret cert-manager writes the apiserver's client certificate to (certManager). */}}
{{- define "kubetrail.clientSecretName" -}}
{{- printf "%s-apiserver-client" (include "kubetrail.fullname" .) -}}
{{- end -}}

{{/* The webhook Service's DNS names, first the one the apiserver's kubeconfig verifies (tls-server-name). */}}
{{- define "kubetrail.serviceDNSNames" -}}
{{- $name := include "kubetrail.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- toJson (list (printf "%s.%s.svc" $name $ns) $name (printf "%s.%s" $name $ns) (printf "%s.%s.svc.cluster.local" $name $ns)) -}}
{{- end -}}

{{/*
The webhook's URL for the apiserver's kubeconfig. The apiserver runs on the host network: a
NodePort is 127.0.0.1:<nodePort> on its own node; otherwise the Service's ClusterIP once the
Service exists (an upgrade reads it), the Service's DNS name on a first install (the notes say
to replace it). tls-server-name keeps the certificate check on the DNS name either way.
*/}}
{{- define "kubetrail.webhookServer" -}}
{{- $name := include "kubetrail.fullname" . -}}
{{- $svc := .Values.gateway.service -}}
{{- $scheme := ternary "http" "https" (eq (include "kubetrail.webhookCerts" .) "") -}}
{{- $live := include "kubetrail.lookup" (dict "root" . "kind" "Service" "name" $name) | fromJson -}}
{{- $host := printf "%s.%s.svc:%v" $name .Release.Namespace $svc.port -}}
{{- if eq $svc.type "NodePort" -}}
{{- $nodePort := $svc.nodePort -}}
{{- if and (not $nodePort) $live -}}{{- $nodePort = dig "spec" "ports" (list) $live | first | dig "nodePort" "" -}}{{- end -}}
{{- if $nodePort -}}{{- $host = printf "127.0.0.1:%v" $nodePort -}}{{- end -}}
{{- else if and $live (ne (dig "spec" "clusterIP" "None" $live) "None") -}}
{{- $ip := dig "spec" "clusterIP" "" $live -}}
{{- $host = printf "%s:%v" (ternary (printf "[%s]" $ip) $ip (contains ":" $ip)) $svc.port -}}
{{- end -}}
{{- printf "%s://%s/audit/%s" $scheme $host .Values.clusterName -}}
{{- end -}}

{{/*
The apiserver's audit webhook kubeconfig. dict: server, tlsServerName, and the lines naming the CA
(ca), the client certificate (cert) and its key (key), as "certificate-authority-data: …" or a
file path; without cert, the user has no credentials.
*/}}
{{- define "kubetrail.kubeconfig" -}}
apiVersion: v1
kind: Config
clusters:
  - name: kubetrail
    cluster:
      server: {{ .server }}
      {{- with .tlsServerName }}
      tls-server-name: {{ . }}
      {{- end }}
      {{- with .ca }}
      {{ . }}
      {{- end }}
users:
  - name: kube-apiserver
{{- if .cert }}
    user:
      {{ .cert }}
      {{ .key }}
{{- else }}
    user: {}
{{- end }}
contexts:
  - name: default
    context: {cluster: kubetrail, user: kube-apiserver}
current-context: default
{{- end -}}

{{/* The Secret holding the Redis password: the user's redis.passwordSecret, or the generated one of the bundled Redis. */}}
{{- define "kubetrail.redisPasswordSecret" -}}
{{- if .Values.redis.passwordSecret -}}
{{- toJson .Values.redis.passwordSecret -}}
{{- else if and .Values.redis.bundled.enabled (not .Values.redis.addresses) -}}
{{- toJson (dict "name" (include "kubetrail.redisName" .) "key" "password") -}}
{{- end -}}
{{- end -}}

{{/* Checks of combinations the schema cannot express. */}}
{{- define "kubetrail.validate" -}}
{{- if not (regexMatch "^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$" .Values.clusterName) -}}
{{- fail "clusterName is required: 1-63 letters, digits, '.', '_' or '-', starting and ending with a letter or digit (--set clusterName=prod-eu-1)" -}}
{{- end -}}
{{- /* Every mode exports over OTLP (mode kafka: its processing tier). The schema refuses an empty
endpoint too; this message is for renderings that skip the schema (--skip-schema-validation, tools
that render without it) and says what to give. */ -}}
{{- if not (regexMatch "^\\S+$" (toString (default "" (.Values.otlp | default dict).endpoint))) -}}
{{- fail "otlp.endpoint is required: the OTLP/gRPC backend the traces go to, as host:port, e.g. --set otlp.endpoint=tempo-distributor.tempo.svc:4317 (or jaeger-collector.observability.svc:4317). There is no default: a wrong guess fills the exporter's queue until the webhook answers 503 and the apiserver drops audit batches" -}}
{{- end -}}
{{- if and (has .Values.mode (list "gateway" "managed")) (gt (int .Values.gateway.replicas) 1) (eq (include "kubetrail.redisAddresses" .) "[]") -}}
{{- fail "gateway.replicas > 1 needs a shared ID map: set redis.addresses or redis.bundled.enabled=true" -}}
{{- end -}}
{{- if eq .Values.mode "kafka" -}}
{{- $k := .Values.kafka -}}
{{- if not $k.brokers -}}
{{- fail "kafka.brokers is required in mode kafka: the bootstrap brokers as host:port, e.g. --set 'kafka.brokers={kafka-0.kafka.svc:9092,kafka-1.kafka.svc:9092}'" -}}
{{- end -}}
{{- if gt (int $k.processing.replicas) (int $k.partitions) -}}
{{- fail (printf "kafka.processing.replicas (%d) > kafka.partitions (%d): a partition is read by one replica at a time, so the others would idle; add partitions to the topic (and raise kafka.partitions) first" (int $k.processing.replicas) (int $k.partitions)) -}}
{{- end -}}
{{- if and (gt (int $k.processing.replicas) 1) (eq (include "kubetrail.redisAddresses" .) "[]") -}}
{{- fail "kafka.processing.replicas > 1 needs a shared ID map: set redis.addresses or redis.bundled.enabled=true" -}}
{{- end -}}
{{- if and $k.sasl.mechanism (or (not $k.sasl.username) (not $k.sasl.passwordSecret)) -}}
{{- fail "kafka.sasl.mechanism needs kafka.sasl.username and kafka.sasl.passwordSecret ({name, key} of a Secret holding the password)" -}}
{{- end -}}
{{- if and (not $k.tls.enabled) (or $k.tls.caSecret $k.tls.clientSecret $k.tls.serverName) -}}
{{- fail "kafka.tls.caSecret, clientSecret and serverName take effect only with kafka.tls.enabled=true" -}}
{{- end -}}
{{- end -}}
{{- $tls := .Values.gateway.tls -}}
{{- if and $tls.existingSecret $tls.certManager.enabled -}}
{{- fail "gateway.tls.existingSecret and gateway.tls.certManager.enabled: choose one source of the webhook's certificates" -}}
{{- end -}}
{{- if and .Values.redis.tls.enabled (not .Values.redis.addresses) -}}
{{- fail "redis.tls.enabled is for your Redis (redis.addresses): the bundled Redis has no TLS" -}}
{{- end -}}
{{- if eq .Values.mode "managed" -}}
{{- if or .Values.gateway.tls.existingSecret .Values.gateway.tls.certManager.enabled .Values.gateway.tls.insecurePlainHTTP -}}
{{- fail "gateway.tls is the audit webhook's, and mode managed has none: managed.tls is the default OTLP receiver's (receivers of your own in managed.receivers take their tls there)" -}}
{{- end -}}
{{- $mtls := .Values.managed.tls -}}
{{- if and $mtls.existingSecret $mtls.certManager.enabled -}}
{{- fail "managed.tls.existingSecret and managed.tls.certManager.enabled: choose one source of the OTLP receiver's certificates" -}}
{{- end -}}
{{- range $k, $v := .Values.managed.connector -}}
{{- if has $k (list "cluster" "window") -}}
{{- fail (printf "managed.connector.%s: set by the chart (cluster = clusterName, window = window); set those values instead" $k) -}}
{{- end -}}
{{- if eq $k "cluster_attribute" -}}
{{- fail "managed.connector.cluster_attribute: a release traces one cluster, named clusterName for the audit spans and the Events' alike; a name read from the records (an EKS log group, an AKS resourceId) could differ and the two would never meet. Install one release per cluster" -}}
{{- end -}}
{{- end -}}
{{- range $k, $v := .Values.managed.receivers -}}
{{- if has (regexReplaceAll "/.*$" $k "") (list "k8s_audit" "k8s_event_spans") -}}
{{- fail (printf "managed.receivers.%s: not a log receiver (the chart configures k8s_event_spans with events.enabled)" $k) -}}
{{- end -}}
{{- end -}}
{{- range .Values.managed.service.ports -}}
{{- if or (has .name (list "health" "metrics")) (has (int .port) (list 8888 13133)) -}}
{{- fail (printf "managed.service.ports: %s/%v is taken by the collector's health check (health, 13133) or metrics (metrics, 8888)" .name .port) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (eq .Values.mode "managed") .Values.managed.networkPolicy.enabled .Values.managed.service.ports (not .Values.managed.networkPolicy.from) -}}
{{- fail "managed.networkPolicy.from is required: who may send audit logs to the receivers' ports (managed.service.ports), as NetworkPolicy peers: your log shipper's pods, e.g. --set-json 'managed.networkPolicy.from=[{\"namespaceSelector\":{\"matchLabels\":{\"kubernetes.io/metadata.name\":\"logging\"}},\"podSelector\":{\"matchLabels\":{\"app\":\"fluent-bit\"}}}]', or the addresses a provider delivers from as ipBlock. The NetworkPolicy admits only them. Or set managed.networkPolicy.enabled=false (no policy: every pod can send, with a client certificate unless managed.tls.insecurePlaintext)" -}}
{{- end -}}
{{- if and .Values.gateway.otlp.enabled (ne .Values.mode "gateway") -}}
{{- fail (printf "gateway.otlp: mode gateway only (mode %s): the daemonset has no Service, mode managed's receivers are the audit logs', and mode kafka's processing tier takes no traffic" .Values.mode) -}}
{{- end -}}
{{- if and (include "kubetrail.otlpTraces" .) .Values.gateway.networkPolicy.enabled (not .Values.gateway.otlp.from) -}}
{{- fail "gateway.otlp.from is required: who may send spans to the OTLP receiver (4317, 4318), as NetworkPolicy peers, e.g. --set-json 'gateway.otlp.from=[{\"namespaceSelector\":{\"matchLabels\":{\"kubernetes.io/metadata.name\":\"ci\"}}}]'. Whoever reaches it can put spans in any object's trace. Or set gateway.networkPolicy.enabled=false" -}}
{{- end -}}
{{- if and .Values.viewer.enabled (not (regexMatch "^https?://[^\\s/]+\\S*$" (toString .Values.viewer.jaegerURL))) -}}
{{- fail (printf "viewer.jaegerURL is required with viewer.enabled: Jaeger's query service as the viewer reaches it, an http or https URL, e.g. --set viewer.jaegerURL=http://jaeger-query.observability.svc:16686 (got %q)" (toString .Values.viewer.jaegerURL)) -}}
{{- end -}}
{{- if and .Values.viewer.enabled .Values.viewer.jaegerUI (not (regexMatch "^https?://[^\\s/]+\\S*$" (toString .Values.viewer.jaegerUI))) -}}
{{- fail (printf "viewer.jaegerUI %q: want an http or https URL, Jaeger's UI as your browser reaches it, or \"\" for viewer.jaegerURL" (toString .Values.viewer.jaegerUI)) -}}
{{- end -}}
{{- if and (include "kubetrail.hasWebhook" .) .Values.gateway.networkPolicy.enabled (not .Values.gateway.networkPolicy.controlPlaneCIDRs) -}}
{{- fail "gateway.networkPolicy.controlPlaneCIDRs is required: the addresses the kube-apiserver reaches the webhook from, i.e. the control-plane nodes' IPs or subnet (kubectl get nodes -l node-role.kubernetes.io/control-plane -o wide), e.g. --set 'gateway.networkPolicy.controlPlaneCIDRs={10.0.0.10/32,10.0.0.11/32}'. The NetworkPolicy admits only them to the webhook port. Or set gateway.networkPolicy.enabled=false (no policy; the client certificate still authenticates)" -}}
{{- end -}}
{{- end -}}

{{/*
GOMEMLIMIT for "auto": 80% of resources.limits.memory, in MiB. Empty when there is no limit.
dict: goMemLimit (the value), resources (the container's).
*/}}
{{- define "kubetrail.goMemLimit" -}}
{{- $v := .goMemLimit -}}
{{- if eq $v "auto" -}}
{{- $lim := "" -}}
{{- with .resources.limits }}{{ with .memory }}{{ $lim = toString . }}{{ end }}{{ end -}}
{{- if $lim -}}
{{- $bytes := 0 -}}
{{- if hasSuffix "Gi" $lim -}}{{- $bytes = mul (trimSuffix "Gi" $lim | int64) 1073741824 -}}
{{- else if hasSuffix "Mi" $lim -}}{{- $bytes = mul (trimSuffix "Mi" $lim | int64) 1048576 -}}
{{- else if hasSuffix "Ki" $lim -}}{{- $bytes = mul (trimSuffix "Ki" $lim | int64) 1024 -}}
{{- else if regexMatch "^[0-9]+$" $lim -}}{{- $bytes = $lim | int64 -}}
{{- else -}}{{- fail (printf "goMemLimit auto: cannot read resources.limits.memory %q (use Ki, Mi, Gi or bytes, or set goMemLimit)" $lim) -}}
{{- end -}}
{{- printf "%dMiB" (div (mul $bytes 8) 10485760) -}}
{{- end -}}
{{- else -}}
{{- $v -}}
{{- end -}}
{{- end -}}

{{/* The labels of the Service the ServiceMonitor selects (no other Service of the release has them). */}}
{{- define "kubetrail.metricsServiceLabels" -}}
{{ include "kubetrail.selectorLabels" . }}
app.kubernetes.io/component: metrics
{{- end -}}
