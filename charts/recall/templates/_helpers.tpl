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

{{/*
The worker Deployment's replicas. Fixed: worker.replicas. Autoscaled: the autoscaler owns the
count. A fresh install sets none; an upgrade writes back the count found in the cluster, so the
patch Helm computes leaves it as it is. Leaving the field out of an upgrade would not do: a
field present in the previous release's manifest and absent from the new one is removed by
Helm's three-way merge, and the API server then defaults it to 1 (helm/helm#7090, #12650).
*/}}
{{- define "recall.worker.replicas" -}}
{{- if eq .Values.worker.autoscaling.mode "fixed" -}}
replicas: {{ .Values.worker.replicas }}
{{- else -}}
{{- $live := lookup "apps/v1" "Deployment" .Release.Namespace (printf "%s-worker" (include "recall.fullname" .)) -}}
{{- if and $live $live.spec (hasKey $live.spec "replicas") -}}
replicas: {{ $live.spec.replicas }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The port of the operator's /workload endpoint (KEDA mode), or nothing. */}}
{{- define "recall.operator.workloadPort" -}}
{{- if and .Values.worker.enabled (eq .Values.worker.autoscaling.mode "keda") -}}
{{- .Values.worker.autoscaling.keda.port -}}
{{- end -}}
{{- end -}}

{{/* The operator's environment for the workers' autoscaling (none when fixed). */}}
{{- define "recall.operator.autoscalingEnv" -}}
{{- $as := .Values.worker.autoscaling -}}
{{- if and .Values.worker.enabled (ne $as.mode "fixed") -}}
- name: RECALL_OPERATOR_AUTOSCALE_NAMESPACE
  value: {{ .Release.Namespace | quote }}
- name: RECALL_OPERATOR_AUTOSCALE_ENGINE
  value: {{ .Values.engine.name | quote }}
{{- end }}
{{- if and .Values.worker.enabled (eq $as.mode "builtin") }}
- name: RECALL_OPERATOR_AUTOSCALE_DEPLOYMENT
  value: {{ printf "%s-worker" (include "recall.fullname" .) | quote }}
- name: RECALL_OPERATOR_AUTOSCALE_MIN
  value: {{ $as.minReplicas | quote }}
- name: RECALL_OPERATOR_AUTOSCALE_MAX
  value: {{ $as.maxReplicas | quote }}
- name: RECALL_OPERATOR_AUTOSCALE_COOLDOWN_SECONDS
  value: {{ $as.cooldownSeconds | quote }}
- name: RECALL_OPERATOR_AUTOSCALE_STEP
  value: {{ $as.scaleDownStep | quote }}
- name: RECALL_OPERATOR_AUTOSCALE_INTERVAL
  value: {{ $as.builtin.intervalSeconds | quote }}
- name: RECALL_OPERATOR_AUTOSCALE_MARK_PODS
  value: {{ $as.builtin.markPods | quote }}
{{- end }}
{{- with include "recall.operator.workloadPort" . }}
- name: RECALL_OPERATOR_WORKLOAD_PORT
  value: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* The URL of the operator's /workload endpoint for this release's pool of workers. */}}
{{- define "recall.workloadUrl" -}}
{{- printf "http://%s-operator-workload.%s.svc:%v/workload?namespace=%s&engine=%s" (include "recall.fullname" .) .Release.Namespace .Values.worker.autoscaling.keda.port .Release.Namespace .Values.engine.name -}}
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
# Item lists named by spec.itemsFrom; the work's bytes are in the results store.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get]
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
{{- $as := .Values.worker.autoscaling -}}
{{- if ne $as.mode "fixed" -}}
{{- if gt (int $as.minReplicas) (int $as.maxReplicas) -}}
{{- fail (printf "worker.autoscaling.minReplicas (%v) must not exceed maxReplicas (%v)" $as.minReplicas $as.maxReplicas) -}}
{{- end -}}
{{- if not .Values.operator.enabled -}}
{{- fail (printf "worker.autoscaling.mode=%s needs operator.enabled: the operator counts the outstanding work" $as.mode) -}}
{{- end -}}
{{- end -}}
{{- if eq $as.mode "builtin" -}}
{{- if not .Values.worker.health.port -}}
{{- fail "worker.autoscaling.mode=builtin needs worker.health.port: a drained worker turns unready on /readyz, which is how the ReplicaSet removes it before any busy one" -}}
{{- end -}}
{{- range .Values.worker.extraEnv -}}
{{- if eq .name "RECALL_WORKER_ID" -}}
{{- fail "worker.autoscaling.mode=builtin needs workers named by their pods: remove RECALL_WORKER_ID from worker.extraEnv" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (eq $as.mode "keda") (not $as.keda.port) -}}
{{- fail "worker.autoscaling.mode=keda needs worker.autoscaling.keda.port: KEDA reads the outstanding work from the operator there" -}}
{{- end -}}
{{- end -}}
