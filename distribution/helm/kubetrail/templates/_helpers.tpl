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

{{- define "kubetrail.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "kubetrail.fullname" .)) .Values.gateway.tls.existingSecret -}}
{{- end -}}

{{/* Checks of combinations the schema cannot express. */}}
{{- define "kubetrail.validate" -}}
{{- if not (regexMatch "^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$" .Values.clusterName) -}}
{{- fail "clusterName is required: 1-63 letters, digits, '.', '_' or '-', starting and ending with a letter or digit (--set clusterName=prod-eu-1)" -}}
{{- end -}}
{{- if and (ne .Values.mode "daemonset") (gt (int .Values.gateway.replicas) 1) (eq (include "kubetrail.redisAddresses" .) "[]") -}}
{{- fail "gateway.replicas > 1 needs a shared ID map: set redis.addresses or redis.bundled.enabled=true" -}}
{{- end -}}
{{- if and (eq .Values.mode "gateway") .Values.gateway.tls.enabled (not .Values.gateway.tls.existingSecret) (not (and .Values.gateway.tls.cert .Values.gateway.tls.key)) -}}
{{- fail "gateway.tls.enabled needs gateway.tls.existingSecret or both gateway.tls.cert and gateway.tls.key" -}}
{{- end -}}
{{- if and .Values.gateway.tls.allowedClientNames (not .Values.gateway.tls.clientCA) -}}
{{- fail "gateway.tls.allowedClientNames needs gateway.tls.clientCA (names are checked on verified client certificates)" -}}
{{- end -}}
{{- if eq .Values.mode "managed" -}}
{{- if .Values.gateway.tls.enabled -}}
{{- fail "gateway.tls is the audit webhook's, and mode managed has none: give the log receivers their own tls in managed.receivers" -}}
{{- end -}}
{{- range $k, $v := .Values.managed.connector -}}
{{- if has $k (list "cluster" "window") -}}
{{- fail (printf "managed.connector.%s: set by the chart (cluster = clusterName, window = window); set those values instead" $k) -}}
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
{{- end -}}

{{/*
GOMEMLIMIT for "auto": 80% of resources.limits.memory, in MiB. Empty when there is no limit.
*/}}
{{- define "kubetrail.goMemLimit" -}}
{{- $v := .Values.goMemLimit -}}
{{- if eq $v "auto" -}}
{{- $lim := "" -}}
{{- with .Values.resources.limits }}{{ with .memory }}{{ $lim = toString . }}{{ end }}{{ end -}}
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
