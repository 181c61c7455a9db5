{{/* Chart name, or nameOverride. */}}
{{- define "sandbox-controller.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Prefix of every object name: fullnameOverride, else the release name if it
contains the chart name, else <release>-<chart>. Release "sandbox-controller"
gives the names `make deploy` uses (namePrefix sandbox-controller-).
*/}}
{{- define "sandbox-controller.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "sandbox-controller.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object the chart creates. */}}
{{- define "sandbox-controller.labels" -}}
helm.sh/chart: {{ include "sandbox-controller.chart" . }}
{{ include "sandbox-controller.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels selecting the manager's pods (immutable in the Deployment). */}}
{{- define "sandbox-controller.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sandbox-controller.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
control-plane: controller-manager
{{- end }}

{{/*
The manager Deployment (and PodDisruptionBudget) of the shard in .shardIndex:
<fullname>-controller-manager unsharded, with -shard-<i> appended otherwise.
*/}}
{{- define "sandbox-controller.managerName" -}}
{{- if gt (int64 .shards) 1 }}
{{- printf "%s-controller-manager-shard-%d" (include "sandbox-controller.fullname" .) (int .shardIndex) }}
{{- else }}
{{- include "sandbox-controller.fullname" . }}-controller-manager
{{- end }}
{{- end }}

{{/* The label that tells one shard's pods from another's; nothing unsharded. */}}
{{- define "sandbox-controller.shardLabel" -}}
{{- if gt (int64 .shards) 1 }}
sandbox.sentry.io/shard: {{ .shardIndex | quote }}
{{- end }}
{{- end }}

{{/* The manager's ServiceAccount: config/rbac/service_account.yaml, prefixed. */}}
{{- define "sandbox-controller.serviceAccountName" -}}
{{ include "sandbox-controller.fullname" . }}-controller-manager
{{- end }}

{{- define "sandbox-controller.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "sandbox-controller.metricsServiceName" -}}
{{- printf "%s-controller-manager-metrics-service" (include "sandbox-controller.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "true" when templates/generated/admission.yaml is to be installed. */}}
{{- define "sandbox-controller.installAdmissionPolicy" -}}
{{- and .Values.admissionPolicy.enabled (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy") }}
{{- end }}

{{- define "sandbox-controller.terminationGracePeriodSeconds" -}}
{{- $timeout := int64 .Values.controller.gracefulShutdownTimeoutSeconds }}
{{- $grace := .Values.terminationGracePeriodSeconds }}
{{- if kindIs "invalid" $grace }}
{{- add $timeout 15 }}
{{- else if le (int64 $grace) $timeout }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed controller.gracefulShutdownTimeoutSeconds (%d): the kubelet would kill the manager before its reconciles finish and it releases the leader lease" (int64 $grace) $timeout) }}
{{- else }}
{{- int64 $grace }}
{{- end }}
{{- end }}

{{/*
A flag's value as the manager parses it: YAML numbers arrive as float64, and
an integer-valued one is printed without an exponent (1e+06 is no int).
*/}}
{{- define "sandbox-controller.flagValue" -}}
{{- if and (kindIs "float64" .) (eq . (floor .)) }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- end }}

{{/*
The manager's arguments: one entry per flag of cmd/manager (test/chart fails
when a flag has none). A null or empty value leaves the flag out, so the
manager's default applies; 0 and false are passed.
*/}}
{{- define "sandbox-controller.args" -}}
{{- $v := .Values }}
{{- $metricsAddr := "0" }}
{{- if $v.metrics.enabled }}{{ $metricsAddr = printf ":%d" (int64 $v.metrics.port) }}{{ end }}
{{- $certPath := "" }}
{{- if $v.metrics.certSecret }}{{ $certPath = "/tmp/k8s-metrics-server/metrics-certs" }}{{ end }}
{{- $shards := "" }}
{{- $shardIndex := "" }}
{{- if gt (int64 (.shards | default 1)) 1 }}{{ $shards = .shards }}{{ $shardIndex = .shardIndex }}{{ end }}
{{- $leaderNamespace := "" }}
{{- if $v.leaderElection.enabled }}{{ $leaderNamespace = .Release.Namespace }}{{ end }}
{{- $flags := list
  (list "metrics-bind-address" $metricsAddr)
  (list "metrics-secure" $v.metrics.secure)
  (list "metrics-cert-path" $certPath)
  (list "metrics-cert-name" $v.metrics.certName)
  (list "metrics-cert-key" $v.metrics.certKey)
  (list "enable-http2" $v.metrics.enableHTTP2)
  (list "health-probe-bind-address" (printf ":%d" (int64 $v.probes.port)))
  (list "leader-elect" $v.leaderElection.enabled)
  (list "leader-election-namespace" $leaderNamespace)
  (list "leader-election-lease-duration" $v.leaderElection.leaseDuration)
  (list "leader-election-renew-deadline" $v.leaderElection.renewDeadline)
  (list "leader-election-retry-period" $v.leaderElection.retryPeriod)
  (list "manager-namespace" "$(POD_NAMESPACE)")
  (list "status-digest-key-secret" (printf "%s-status-digest-key" (include "sandbox-controller.fullname" .)))
  (list "graceful-shutdown-timeout" (printf "%ds" (int64 $v.controller.gracefulShutdownTimeoutSeconds)))
  (list "vercel-api-url" $v.vercel.apiURL)
  (list "vercel-token-file" "/var/run/secrets/vercel/token")
  (list "vercel-team-id" "$(VERCEL_TEAM_ID)")
  (list "vercel-project-id" "$(VERCEL_PROJECT_ID)")
  (list "vercel-requests-per-minute" $v.vercel.requestsPerMinute)
  (list "vercel-max-in-flight" $v.vercel.maxInFlight)
  (list "vercel-reserved-in-flight" $v.vercel.reservedInFlight)
  (list "vercel-call-timeout" $v.vercel.callTimeout)
  (list "vercel-stream-idle-timeout" $v.vercel.streamIdleTimeout)
  (list "vercel-stall-threshold" $v.vercel.stallThreshold)
  (list "max-session-length" $v.vercel.maxSessionLength)
  (list "max-concurrent-reconciles" $v.controller.maxConcurrentReconciles)
  (list "max-probes-per-namespace" $v.controller.maxProbesPerNamespace)
  (list "poll-interval" $v.controller.pollInterval)
  (list "backoff-cap" $v.controller.backoffCap)
  (list "reconcile-timeout" $v.controller.reconcileTimeout)
  (list "reference-deadline" $v.controller.referenceDeadline)
  (list "shutdown-warning" $v.controller.shutdownWarning)
  (list "cluster-id" $v.controller.clusterID)
  (list "shards" $shards)
  (list "shard-index" $shardIndex)
  (list "kube-api-qps" $v.kubeAPI.qps)
  (list "kube-api-burst" $v.kubeAPI.burst)
  (list "notify-workers" $v.notifications.workers)
  (list "notify-queue-size" $v.notifications.queueSize)
  (list "notify-timeout" $v.notifications.timeout)
  (list "notify-max-age" $v.notifications.maxAge)
  (list "notify-allow-destinations" (join "," ($v.notifications.allowDestinations | default list)))
  (list "zap-log-level" $v.logging.level)
  (list "zap-encoder" $v.logging.encoder)
  (list "zap-devel" $v.logging.development)
  (list "zap-stacktrace-level" $v.logging.stacktraceLevel)
  (list "zap-time-encoding" $v.logging.timeEncoding)
}}
{{- $args := list }}
{{- range $flags }}
{{- $value := index . 1 }}
{{- if not (or (kindIs "invalid" $value) (eq (toString $value) "")) }}
{{- $args = append $args (printf "--%s=%s" (index . 0) (include "sandbox-controller.flagValue" $value)) }}
{{- end }}
{{- end }}
{{- concat $args ($v.extraArgs | default list) | toYaml }}
{{- end }}
