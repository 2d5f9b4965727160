{{/*
The collector container. dict: root, and tier: "" for the one workload of modes gateway,
daemonset and managed (the StatefulSet or the DaemonSet), "edge" or "processing" in mode kafka.
*/}}
{{- define "kubetrail.container" -}}
{{- $root := .root -}}
{{- $tier := .tier -}}
{{- $v := $root.Values -}}
{{- $webhook := or (eq $v.mode "gateway") (eq $tier "edge") -}}
{{- $managed := eq $v.mode "managed" -}}
{{- $resources := ternary $v.kafka.edge.resources $v.resources (eq $tier "edge") -}}
- name: otelcol-kubetrail
  image: {{ include "kubetrail.image" $root }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  args: ["--config=/etc/otelcol-kubetrail/config.yaml"]
  env:
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
    {{- with include "kubetrail.goMemLimit" (dict "goMemLimit" $v.goMemLimit "resources" $resources) }}
    - name: GOMEMLIMIT
      value: {{ . | quote }}
    {{- end }}
    {{- if ne $tier "edge" }}
    {{- with include "kubetrail.redisPasswordSecret" $root }}
    {{- $secret := . | fromJson }}
    - name: REDIS_PASSWORD
      valueFrom: {secretKeyRef: {name: {{ $secret.name }}, key: {{ $secret.key }}}}
    {{- end }}
    {{- end }}
    {{- if and $tier $v.kafka.sasl.mechanism }}
    - name: KAFKA_SASL_PASSWORD
      valueFrom: {secretKeyRef: {name: {{ $v.kafka.sasl.passwordSecret.name }}, key: {{ $v.kafka.sasl.passwordSecret.key }}}}
    {{- end }}
    {{- if $managed }}
    {{- with $v.managed.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- end }}
  ports:
    {{- if $webhook }}
    - {name: audit, containerPort: 9880}
    {{- end }}
    {{- if include "kubetrail.otlpTraces" $root }}
    - {name: otlp-grpc, containerPort: 4317}
    - {name: otlp-http, containerPort: 4318}
    {{- end }}
    {{- if $managed }}
    {{- range $v.managed.service.ports }}
    - {name: {{ .name }}, containerPort: {{ .port }}}
    {{- end }}
    {{- end }}
    - {name: health, containerPort: 13133}
    - {name: metrics, containerPort: 8888}
  readinessProbe:
    httpGet: {path: /, port: health}
  livenessProbe:
    httpGet: {path: /, port: health}
  resources:
    {{- toYaml $resources | nindent 4 }}
  securityContext:
    {{- toYaml $v.securityContext | nindent 4 }}
  volumeMounts:
    - {name: config, mountPath: /etc/otelcol-kubetrail, readOnly: true}
    - {name: state, mountPath: /var/lib/otelcol-kubetrail}
    {{- if and (ne $tier "processing") (include "kubetrail.mountedTLSSecretName" $root) }}
    - {name: tls, mountPath: /etc/otelcol-kubetrail-tls, readOnly: true}
    {{- end }}
    {{- if and (ne $tier "edge") $v.redis.tls.enabled $v.redis.tls.caSecret }}
    - {name: redis-tls, mountPath: /etc/otelcol-kubetrail-redis-tls, readOnly: true}
    {{- end }}
    {{- if and $tier $v.kafka.tls.enabled }}
    {{- if $v.kafka.tls.caSecret }}
    - {name: kafka-tls, mountPath: /etc/otelcol-kubetrail-kafka-tls, readOnly: true}
    {{- end }}
    {{- if $v.kafka.tls.clientSecret }}
    - {name: kafka-client, mountPath: /etc/otelcol-kubetrail-kafka-client, readOnly: true}
    {{- end }}
    {{- end }}
    {{- if eq $v.mode "daemonset" }}
    - {name: audit-log, mountPath: {{ dir $v.daemonset.auditLogPath }}, readOnly: true}
    {{- end }}
{{- end -}}

{{/* dict: root, and config: the collector config of the pods (its checksum restarts them). */}}
{{- define "kubetrail.podMetadata" -}}
{{- $root := .root -}}
labels:
  {{- .selector | nindent 2 }}
  {{- with $root.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
annotations:
  checksum/config: {{ .config | sha256sum }}
  {{- with $root.Values.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{- define "kubetrail.podCommon" -}}
serviceAccountName: {{ include "kubetrail.serviceAccountName" . }}
terminationGracePeriodSeconds: 60
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Volumes of the Secrets the collector container mounts. dict: root, tier (as kubetrail.container). */}}
{{- define "kubetrail.secretVolumes" -}}
{{- $root := .root -}}
{{- $tier := .tier -}}
{{- $v := $root.Values -}}
{{- if ne $tier "processing" }}
{{- with include "kubetrail.mountedTLSSecretName" $root }}
# Only the webhook's (or the OTLP receiver's) certificate, key and client CA: not the CA key the
# chart keeps beside them.
- name: tls
  secret:
    secretName: {{ . }}
    items:
      - {key: tls.crt, path: tls.crt}
      - {key: tls.key, path: tls.key}
      - {key: ca.crt, path: ca.crt}
{{- end }}
{{- end }}
{{- if ne $tier "edge" }}
{{- with $v.redis.tls }}
{{- if and .enabled .caSecret }}
- name: redis-tls
  secret:
    secretName: {{ .caSecret.name }}
    items:
      - {key: {{ .caSecret.key }}, path: ca.crt}
{{- end }}
{{- end }}
{{- end }}
{{- if and $tier $v.kafka.tls.enabled }}
{{- with $v.kafka.tls.caSecret }}
- name: kafka-tls
  secret:
    secretName: {{ .name }}
    items:
      - {key: {{ .key }}, path: ca.crt}
{{- end }}
{{- with $v.kafka.tls.clientSecret }}
- name: kafka-client
  secret:
    secretName: {{ . }}
    items:
      - {key: tls.crt, path: tls.crt}
      - {key: tls.key, path: tls.key}
{{- end }}
{{- end }}
{{- end -}}
