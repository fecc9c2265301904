{{/*
Names, labels and small decisions shared by the templates.
*/}}

{{/* The chart name (nameOverride wins). */}}
{{- define "recall.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The prefix of every resource name: fullnameOverride, else <release>-<name>, or just the
release name when it already contains the chart name. 52 characters leave room for the
"-operator"/"-worker"/"-metrics" suffixes within the 63-character limit.
*/}}
{{- define "recall.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "recall.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "recall.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object of the release. */}}
{{- define "recall.labels" -}}
helm.sh/chart: {{ include "recall.chart" . }}
app.kubernetes.io/name: {{ include "recall.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: recall
{{- end -}}

{{/* Selector labels of one component: call with (dict "ctx" $ "component" "worker"). */}}
{{- define "recall.selectorLabels" -}}
app.kubernetes.io/name: {{ include "recall.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Labels of one component's objects: call with (dict "ctx" $ "component" "worker"). */}}
{{- define "recall.componentLabels" -}}
{{ include "recall.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The image reference: repository@digest when a digest is given, else repository:tag. */}}
{{- define "recall.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
One topologySpreadConstraint over `key` for a component's pods, ScheduleAnyway (a one-node
cluster still schedules every replica); nothing when the key is empty.
Call with (dict "ctx" $ "component" "worker" "key" .Values.worker.topologySpreadKey).
*/}}
{{- define "recall.topologySpread" -}}
{{- if .key }}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: {{ .key }}
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "recall.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 8 }}
{{- end }}
{{- end -}}

{{/*
The worker's Whisper threads: the explicit value, else the container's CPU limit (or request
without a limit), read through the downward API and rounded up to whole CPUs.
*/}}
{{- define "recall.worker.whisperThreadsEnv" -}}
- name: RECALL_WORKER_WHISPER_THREADS
{{- if .Values.engine.whisper.threads }}
  value: {{ .Values.engine.whisper.threads | quote }}
{{- else }}
  valueFrom:
    resourceFieldRef:
      containerName: worker
      resource: {{ if (.Values.worker.resources.limits | default dict).cpu }}limits.cpu{{ else }}requests.cpu{{ end }}
      divisor: "1"
{{- end }}
{{- end -}}

{{- define "recall.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create -}}
{{- default (printf "%s-operator" (include "recall.fullname" .)) .Values.operator.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.operator.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "recall.worker.serviceAccountName" -}}
{{- if .Values.worker.serviceAccount.create -}}
{{- default (printf "%s-worker" (include "recall.fullname" .)) .Values.worker.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.worker.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* "true" when operator replicas elect a leader: asked for, or needed by replicas > 1. */}}
{{- define "recall.operator.leaderElection" -}}
{{- if or .Values.operator.leaderElection.enabled (gt (int .Values.operator.replicas) 1) -}}
true
{{- end -}}
{{- end -}}

{{/* The name of the leader election Lease. */}}
{{- define "recall.operator.leaseName" -}}
{{- default (printf "%s-operator" (include "recall.fullname" .)) .Values.operator.leaderElection.leaseName -}}
{{- end -}}

{{/* The worker's pod grace: the explicit value, else the worker's grace + 20 s for the release. */}}
{{- define "recall.worker.terminationGracePeriodSeconds" -}}
{{- if kindIs "invalid" .Values.worker.terminationGracePeriodSeconds -}}
{{- add (ceil .Values.worker.graceSeconds | int) 20 -}}
{{- else -}}
{{- .Values.worker.terminationGracePeriodSeconds | int -}}
{{- end -}}
{{- end -}}

{{/* Where the OpenAI API key Secret is mounted in the workers. */}}
{{- define "recall.worker.openaiKeyDir" -}}
/var/run/secrets/recall/openai
{{- end -}}

{{/* The rules of the operator (a Role in the watched namespace, or a ClusterRole). */}}
{{- define "recall.operator.rules" -}}
- apiGroups: [recall.dev]
  resources: [batches]
  verbs: [get, list, watch, patch, update]
- apiGroups: [recall.dev]
  resources: [batches/status]
  verbs: [get, patch, update]
- apiGroups: [recall.dev]
  resources: [transcriptionjobs]
  verbs: [get, list, watch, create, patch, update, delete, deletecollection]
- apiGroups: [recall.dev]
  resources: [transcriptionjobs/status]
  verbs: [get, patch, update]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, delete]
{{- end -}}

{{/* Relations between values that the schema cannot express; fails the render with a reason. */}}
{{- define "recall.validate" -}}
{{- if lt (float64 .Values.operator.reconcileInterval) (mulf .Values.operator.tickSeconds 2) -}}
{{- fail (printf "operator.reconcileInterval (%v) must be at least two ticks (2 × operator.tickSeconds = %v)" .Values.operator.reconcileInterval (mulf .Values.operator.tickSeconds 2)) -}}
{{- end -}}
{{- if not (kindIs "invalid" .Values.worker.terminationGracePeriodSeconds) -}}
{{- if le (float64 .Values.worker.terminationGracePeriodSeconds) (float64 .Values.worker.graceSeconds) -}}
{{- fail (printf "worker.terminationGracePeriodSeconds (%v) must be longer than worker.graceSeconds (%v), or the kubelet kills a worker before it releases its job" .Values.worker.terminationGracePeriodSeconds .Values.worker.graceSeconds) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled (not (or .Values.operator.metricsPort .Values.worker.metricsPort)) -}}
{{- fail "metrics.serviceMonitor.enabled needs operator.metricsPort or worker.metricsPort" -}}
{{- end -}}
{{- end -}}
