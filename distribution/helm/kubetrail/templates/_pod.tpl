{{/* The collector container, shared by the StatefulSet (modes gateway, managed) and the DaemonSet. */}}
{{- define "kubetrail.container" -}}
{{- $gateway := eq .Values.mode "gateway" -}}
{{- $managed := eq .Values.mode "managed" -}}
- name: otelcol-kubetrail
  image: {{ include "kubetrail.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["--config=/etc/otelcol-kubetrail/config.yaml"]
  env:
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
    {{- with include "kubetrail.goMemLimit" . }}
    - name: GOMEMLIMIT
      value: {{ . | quote }}
    {{- end }}
    {{- with include "kubetrail.redisPasswordSecret" . }}
    {{- $secret := . | fromJson }}
    - name: REDIS_PASSWORD
      valueFrom: {secretKeyRef: {name: {{ $secret.name }}, key: {{ $secret.key }}}}
    {{- end }}
    {{- if $managed }}
    {{- with .Values.managed.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- end }}
  ports:
    {{- if $gateway }}
    - {name: audit, containerPort: 9880}
    {{- end }}
    {{- if $managed }}
    {{- range .Values.managed.service.ports }}
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
    {{- toYaml .Values.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  volumeMounts:
    - {name: config, mountPath: /etc/otelcol-kubetrail, readOnly: true}
    - {name: state, mountPath: /var/lib/otelcol-kubetrail}
    {{- if include "kubetrail.mountedTLSSecretName" . }}
    - {name: tls, mountPath: /etc/otelcol-kubetrail-tls, readOnly: true}
    {{- end }}
    {{- if and .Values.redis.tls.enabled .Values.redis.tls.caSecret }}
    - {name: redis-tls, mountPath: /etc/otelcol-kubetrail-redis-tls, readOnly: true}
    {{- end }}
    {{- if eq .Values.mode "daemonset" }}
    - {name: audit-log, mountPath: {{ dir .Values.daemonset.auditLogPath }}, readOnly: true}
    {{- end }}
{{- end -}}

{{- define "kubetrail.podMetadata" -}}
labels:
  {{- include "kubetrail.selectorLabels" . | nindent 2 }}
  {{- with .Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
annotations:
  checksum/config: {{ include "kubetrail.config" . | sha256sum }}
  {{- with .Values.podAnnotations }}
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

{{/* Volumes of the Secrets the collector container mounts (both workloads). */}}
{{- define "kubetrail.secretVolumes" -}}
{{- with include "kubetrail.mountedTLSSecretName" . }}
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
{{- with .Values.redis.tls }}
{{- if and .enabled .caSecret }}
- name: redis-tls
  secret:
    secretName: {{ .caSecret.name }}
    items:
      - {key: {{ .caSecret.key }}, path: ca.crt}
{{- end }}
{{- end }}
{{- end -}}
