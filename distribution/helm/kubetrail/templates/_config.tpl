{{/*
The collector configuration, derived from distribution/kubernetes/kubetrail.yaml and keeping its
guarantees: no batch processor (it would acknowledge spans it later loses); the otlp_grpc exporter
batches itself behind a persistent queue (file_storage/queue, fsync on) that refuses at once when
full, so the webhook answers 503 and the apiserver retries (in mode managed the refusal goes back
through the k8s_audit connector to the log receiver); retries without a deadline.
.Values.config is merged over it.
*/}}
{{/*
The Redis connection of the ID map and of the shared diff base: the same server, password and TLS.
*/}}
{{- define "kubetrail.redisConnection" -}}
{{- $redis := include "kubetrail.redisAddresses" . | fromJsonArray -}}
addresses: {{ toJson $redis }}
key_prefix: {{ .Values.redis.keyPrefix | quote }}
{{- if include "kubetrail.redisPasswordSecret" . }}
password: ${env:REDIS_PASSWORD}
{{- end }}
{{- with .Values.redis.tls }}
{{- if .enabled }}
tls:
  insecure: false
  {{- if .caSecret }}
  ca_file: /etc/otelcol-kubetrail-redis-tls/ca.crt
  {{- end }}
  {{- with .serverName }}
  server_name_override: {{ . | quote }}
  {{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The collector's config: of the one workload in modes gateway, daemonset and managed, of the
processing tier in mode kafka (its edge's is kubetrail.edgeConfig). Modes managed and kafka take
the audit events as log records (managed.receivers, or the kafka receiver) into the k8s_audit
connector.
*/}}
{{- define "kubetrail.baseConfig" -}}
{{- $gateway := eq .Values.mode "gateway" -}}
{{- $managed := eq .Values.mode "managed" -}}
{{- $kafka := eq .Values.mode "kafka" -}}
{{- $logs := or $managed $kafka -}}
{{- $redis := include "kubetrail.redisAddresses" . | fromJsonArray -}}
extensions:
  health_check:
    endpoint: ${env:POD_IP}:13133
  file_storage:
    directory: /var/lib/otelcol-kubetrail
    create_directory: true
  file_storage/queue:
    directory: /var/lib/otelcol-kubetrail/queue
    create_directory: true
    fsync: true
    compaction:
      directory: /var/lib/otelcol-kubetrail/queue
      on_rebound: true
  {{- if and $managed .Values.managed.extensions }}
  {{- toYaml .Values.managed.extensions | nindent 2 }}
  {{- end }}
receivers:
  {{- if $managed }}
  {{- include "kubetrail.managedReceivers" . | fromJson | toYaml | nindent 2 }}
  {{- else if $kafka }}
  kafka:
    {{- include "kubetrail.kafkaClient" . | nindent 4 }}
    logs:
      topics: [{{ .Values.kafka.topic | quote }}]
      encoding: otlp_proto
    group_id: {{ default (include "kubetrail.processingName" .) .Values.kafka.groupId | quote }}
    # A new group starts at the oldest message Kafka keeps: latest would skip the very backlog
    # this tier exists to drain.
    initial_offset: earliest
    # A message is committed only once the pipeline took it (the spans are at the OTLP backend);
    # a retryable refusal is read again, never skipped, retried in place with backoff. One
    # refused for good (not otlp_proto, or past the connector's max_in_flight_bytes) is skipped,
    # counted and logged with its partition and offset instead of stopping its partition.
    message_marking:
      after: true
      on_error: false
      on_permanent_error: true
    # error_backoff has no defaults: enabled alone would retry in a tight loop.
    error_backoff:
      enabled: true
      initial_interval: 1s
      max_interval: 30s
      max_elapsed_time: 5m
    # A worker per partition: without it a fetch's partitions wait for the slowest, and one
    # replica did not keep up with 5,000 events/s. Each runs four of its partition's messages at
    # once (the connector's merge hands their spans on together) and still marks each only once
    # its call returned, in offset order; k8s_audit converts them in offset order (offset_order),
    # so an object's writes are diffed as they were made. bytes bounds what the four hold.
    partition_processing:
      independent: true
      max_in_flight:
        records: 4
        bytes: 16777216
  {{- else }}
  k8s_audit:
    cluster: {{ .Values.clusterName | quote }}
    {{- if $gateway }}
    endpoint: ${env:POD_IP}:9880
    {{- if include "kubetrail.webhookCerts" . }}
    # HTTPS only, and only a client certificate signed by ca.crt with one of these names (the
    # apiserver's) may post; the certificate is re-read hourly, so a renewal needs no restart.
    tls:
      cert_file: /etc/otelcol-kubetrail-tls/tls.crt
      key_file: /etc/otelcol-kubetrail-tls/tls.key
      client_ca_file: /etc/otelcol-kubetrail-tls/ca.crt
      min_version: "1.2"
      reload_interval: 1h
    allowed_client_names: {{ toJson .Values.gateway.tls.allowedClientNames }}
    {{- end }}
    {{- else }}
    endpoint: ""
    files: [{{ .Values.daemonset.auditLogPath | quote }}]
    storage: file_storage
    start_at: {{ .Values.daemonset.startAt }}
    {{- end }}
    window: {{ .Values.window }}
    {{- if and $redis .Values.redis.sharedDiffBase }}
    # Replicas share each object's last body, so every write is diffed as one collector would.
    shared_diff_base:
      redis:
        {{- include "kubetrail.redisConnection" . | nindent 8 }}
    {{- end }}
  {{- end }}
  {{- if include "kubetrail.otlpTraces" . }}
  # Spans that join the objects' traces (gateway.otlp): controllers' (pkg/objecttrace), kubectl
  # trail apply's, the apiserver's own; k8s_object_link places them. An untrusted door
  # (docs/security.md, Doors): its spans follow the objects' existing assignments and write
  # nothing; k8s_object_link trusts only k8s_audit's and k8s_event_spans' spans, so this
  # receiver must stay without doors.trusted_hop (and without include_metadata).
  otlp:
    protocols:
      grpc: {endpoint: "${env:POD_IP}:4317"}
      http: {endpoint: "${env:POD_IP}:4318"}
  {{- end }}
  {{- if .Values.events.enabled }}
  k8s_event_spans:
    auth_type: serviceAccount
    cluster: {{ .Values.clusterName | quote }}
    storage: file_storage
    max_event_age: {{ .Values.events.maxEventAge }}
    window: {{ .Values.window }}
    {{- if .Values.events.leaderElection }}
    # One pod watches; the others wait on the Lease (the Role in rbac.yaml).
    leader_election:
      lease_name: {{ include "kubetrail.fullname" . }}-events
      lease_namespace: {{ .Release.Namespace }}
    {{- end }}
  {{- end }}
processors:
  memory_limiter:
    check_interval: 1s
    limit_percentage: 80
    spike_limit_percentage: 20
  k8s_object_link:
    window: {{ .Values.window }}
    {{- if $redis }}
    id_map:
      backend: redis
      redis:
        {{- include "kubetrail.redisConnection" . | nindent 8 }}
    {{- end }}
    {{- with .Values.ownerLookup.resources }}
    owner_lookup:
      auth_type: serviceAccount
      cluster: {{ $.Values.clusterName | quote }}
      # The resources the ClusterRole grants get on (ownerLookup.resources), and no other.
      resources: {{ toJson . }}
    {{- end }}
    {{- if $kafka }}
    # Nothing held: a span held for an owner is acknowledged, its message committed, and a killed
    # replica would lose it. Owners not in the stream are looked up.
    owner_wait: 0s
    {{- else }}
    owner_wait: {{ .Values.ownerWait }}
    {{- end }}
    storage: file_storage/queue
    {{- if include "kubetrail.otlpTraces" . }}
    doors:
      identity:
        # The kubelet's spans (KubeletTracing to gateway.otlp) name their Pod by k8s.pod.uid and
        # no cluster: they go under the Pod's span of this cluster (doors.identity).
        cluster: {{ .Values.clusterName | quote }}
    {{- end }}
{{- if $logs }}
connectors:
  # Audit events in the log records of logs/audit -> audit spans into traces (managed.connector).
  k8s_audit:
    {{- $shared := dict }}
    {{- if and $redis .Values.redis.sharedDiffBase }}
    {{- $shared = dict "shared_diff_base" (dict "redis" (include "kubetrail.redisConnection" . | fromYaml)) }}
    {{- end }}
    {{- if $kafka }}
    {{- /* The edge put the cluster on each record's resource (clusterName, or the name posted to
    /audit/<name>). */}}
    {{- $_ := set $shared "cluster_attribute" "k8s.cluster.name" }}
    {{- end }}
    {{- mustMergeOverwrite (dict "cluster" .Values.clusterName "window" .Values.window) $shared (deepCopy (ternary .Values.managed.connector (dict) $managed)) | toYaml | nindent 4 }}
{{- end }}
exporters:
  otlp_grpc:
    endpoint: {{ .Values.otlp.endpoint | quote }}
    tls:
      insecure: {{ .Values.otlp.insecure }}
    compression: {{ .Values.otlp.compression }}
    {{- with .Values.otlp.headers }}
    headers: {{ toJson . }}
    {{- end }}
    {{- if $kafka }}
    # No queue: a Kafka message is committed once the backend took its spans. The topic is the
    # queue, with Kafka's retention as its bound.
    sending_queue:
      enabled: false
    {{- else }}
    sending_queue:
      storage: file_storage/queue
      sizer: requests
      queue_size: {{ .Values.queue.queueSize }}
      block_on_overflow: false
      num_consumers: {{ .Values.queue.numConsumers }}
      batch:
        flush_timeout: 2s
        sizer: bytes
        min_size: 524288
        max_size: 3145728
    {{- end }}
    retry_on_failure:
      enabled: true
      initial_interval: 5s
      max_interval: 30s
      max_elapsed_time: 0
service:
  extensions: [health_check, file_storage, file_storage/queue{{ if $managed }}{{ range $k, $v := .Values.managed.extensions }}, {{ $k }}{{ end }}{{ end }}]
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: ${env:POD_IP}
                port: 8888
  pipelines:
    {{- if $logs }}
    logs/audit:
      receivers: {{ if $kafka }}[kafka]{{ else }}{{ include "kubetrail.managedReceivers" . | fromJson | keys | sortAlpha | toJson }}{{ end }}
      processors: [memory_limiter]
      exporters: [k8s_audit]
    {{- end }}
    traces:
      {{- $traces := list "k8s_audit" }}
      {{- if .Values.events.enabled }}{{ $traces = append $traces "k8s_event_spans" }}{{ end }}
      {{- if include "kubetrail.otlpTraces" . }}{{ $traces = append $traces "otlp" }}{{ end }}
      receivers: {{ toJson $traces }}
      processors: [memory_limiter, k8s_object_link]
      exporters: [otlp_grpc]
{{- end -}}

{{/*
Managed mode's log receivers: managed.receivers, or when it is empty the OTLP receiver of the
shipped image. The default lives here rather than in values.yaml because Helm merges a user's map
into the default one: an otlp default there would stay beside the user's awsfirehose.
*/}}
{{- define "kubetrail.managedReceivers" -}}
{{- if .Values.managed.receivers -}}
{{- toJson .Values.managed.receivers -}}
{{- else -}}
{{- $grpc := dict "endpoint" "${env:POD_IP}:4317" -}}
{{- $http := dict "endpoint" "${env:POD_IP}:4318" -}}
{{- if include "kubetrail.managedCerts" . -}}
{{- /* TLS only, and only a client certificate signed by ca.crt (the chart's own CA, which signs
the shippers' certificates and nothing else, by default) may send; re-read hourly. */ -}}
{{- $tls := dict "cert_file" "/etc/otelcol-kubetrail-tls/tls.crt" "key_file" "/etc/otelcol-kubetrail-tls/tls.key" "client_ca_file" "/etc/otelcol-kubetrail-tls/ca.crt" "min_version" "1.2" "reload_interval" "1h" -}}
{{- $_ := set $grpc "tls" $tls -}}
{{- $_ := set $http "tls" (deepCopy $tls) -}}
{{- end -}}
{{- toJson (dict "otlp" (dict "protocols" (dict "grpc" $grpc "http" $http))) -}}
{{- end -}}
{{- end -}}

{{/* The config of the StatefulSet or DaemonSet: in mode kafka the edge's. */}}
{{- define "kubetrail.config" -}}
{{- if eq .Values.mode "kafka" -}}
{{- include "kubetrail.edgeConfig" . -}}
{{- else -}}
{{- include "kubetrail.processingConfig" . -}}
{{- end -}}
{{- end -}}

{{/* kubetrail.baseConfig with config merged over it: the one workload's, or the processing tier's. */}}
{{- define "kubetrail.processingConfig" -}}
{{- $base := include "kubetrail.baseConfig" . | fromYaml -}}
{{- if hasKey $base "Error" -}}{{- fail (printf "rendered collector config does not parse: %s" (get $base "Error")) -}}{{- end -}}
{{- mustMergeOverwrite $base (deepCopy .Values.config) | toYaml -}}
{{- end -}}

{{/*
Mode kafka: the brokers and their authentication, as both tiers' kafka components take them
(configkafka). The SASL password comes from the env (KAFKA_SASL_PASSWORD, kafka.sasl.passwordSecret),
the CA and the client certificate from mounted Secrets (kubetrail.secretVolumes).
*/}}
{{- define "kubetrail.kafkaClient" -}}
{{- $k := .Values.kafka -}}
brokers: {{ toJson $k.brokers }}
{{- if $k.tls.enabled }}
tls:
  insecure: false
  {{- if $k.tls.caSecret }}
  ca_file: /etc/otelcol-kubetrail-kafka-tls/ca.crt
  {{- end }}
  {{- if $k.tls.clientSecret }}
  cert_file: /etc/otelcol-kubetrail-kafka-client/tls.crt
  key_file: /etc/otelcol-kubetrail-kafka-client/tls.key
  {{- end }}
  {{- with $k.tls.serverName }}
  server_name_override: {{ . | quote }}
  {{- end }}
{{- end }}
{{- with $k.sasl.mechanism }}
auth:
  sasl:
    mechanism: {{ . }}
    username: {{ $k.sasl.username | quote }}
    password: ${env:KAFKA_SASL_PASSWORD}
{{- end }}
{{- end -}}

{{/*
Mode kafka, the edge: the webhook (as gateway mode's, TLS and client names included) with the
k8s_audit receiver's edge output into the kafka exporter. Each audit event is one log record, its
body the event's bytes as received, its resource the cluster and the object's key (or with
kafka.edge.shards the shard of the object), by which the exporter keys the message: an object's
events stay in one partition, in order. Nothing else is
decoded and nothing is kept: the exporter has no queue, so the pipeline returns, and the webhook
answers 200, only once every in-sync replica has the records (acks all); a refusal is a 503 and
the apiserver resends its batch. kafka.edge.config is merged over it.
*/}}
{{- define "kubetrail.edgeBaseConfig" -}}
extensions:
  health_check:
    endpoint: ${env:POD_IP}:13133
receivers:
  k8s_audit:
    cluster: {{ .Values.clusterName | quote }}
    endpoint: ${env:POD_IP}:9880
    # 0: a message per object of a batch; N: the batch's objects in at most N messages.
    edge:
      shards: {{ int .Values.kafka.edge.shards }}
    {{- if include "kubetrail.webhookCerts" . }}
    # HTTPS only, and only a client certificate signed by ca.crt with one of these names (the
    # apiserver's) may post; the certificate is re-read hourly, so a renewal needs no restart.
    tls:
      cert_file: /etc/otelcol-kubetrail-tls/tls.crt
      key_file: /etc/otelcol-kubetrail-tls/tls.key
      client_ca_file: /etc/otelcol-kubetrail-tls/ca.crt
      min_version: "1.2"
      reload_interval: 1h
    allowed_client_names: {{ toJson .Values.gateway.tls.allowedClientNames }}
    {{- end }}
processors:
  memory_limiter:
    check_interval: 1s
    limit_percentage: 80
    spike_limit_percentage: 20
exporters:
  kafka:
    {{- include "kubetrail.kafkaClient" . | nindent 4 }}
    logs:
      topic: {{ .Values.kafka.topic | quote }}
      # OTLP keeps the body's bytes and the resource the processing tier reads.
      encoding: otlp_proto
    partition_logs_by_resource_attributes: true
    producer:
      required_acks: all
      # A missing topic is a 503, not one the broker creates with its defaults.
      allow_auto_topic_creation: false
      max_message_bytes: {{ int .Values.kafka.edge.maxMessageBytes }}
    sending_queue:
      enabled: false
    timeout: 10s
    retry_on_failure:
      enabled: true
      initial_interval: 1s
      max_interval: 5s
      # Within the apiserver's wait for an answer; past it the apiserver resends the batch.
      max_elapsed_time: 20s
service:
  extensions: [health_check]
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: ${env:POD_IP}
                port: 8888
  pipelines:
    logs/edge:
      receivers: [k8s_audit]
      processors: [memory_limiter]
      exporters: [kafka]
{{- end -}}

{{- define "kubetrail.edgeConfig" -}}
{{- $base := include "kubetrail.edgeBaseConfig" . | fromYaml -}}
{{- if hasKey $base "Error" -}}{{- fail (printf "rendered edge config does not parse: %s" (get $base "Error")) -}}{{- end -}}
{{- mustMergeOverwrite $base (deepCopy .Values.kafka.edge.config) | toYaml -}}
{{- end -}}
