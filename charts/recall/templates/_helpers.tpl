{{/*
Names, labels and small decisions shared by the templates.
*/}}

{{/* The chart name (nameOverride wins). */}}
{{- define "recall.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The prefix of every resource name: fullnameOverride, else <release>-<name>, or just the
release name when it already contains the chart name, cut to 52 characters (as
`recall doctor`'s fullname in recall/cli/checks.py cuts it). A Service's name, a DNS label of
63 characters at most, is made by "recall.serviceName".
*/}}
{{/*
A Service's name, `<base><suffix>` within 63 characters: the base is cut (never the suffix),
so a name that fits is the name itself. Call with (dict "base" … "suffix" "-metrics").
*/}}
{{- define "recall.serviceName" -}}
{{- printf "%s%s" (.base | trunc (int (sub 63 (len .suffix))) | trimSuffix "-") .suffix -}}
{{- end -}}

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

{{/*
The prefix of the API Priority and Fairness objects, which are cluster-scoped:
<release namespace>-<fullname>.
*/}}
{{- define "recall.apfName" -}}
{{- printf "%s-%s" .Release.Namespace (include "recall.fullname" .) | trunc 200 | trimSuffix "-" }}
{{- end }}

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
{{- include "recall.imageRef" (dict "image" .Values.image "ctx" .) -}}
{{- end -}}

{{/*
One topologySpreadConstraint over `key` for a component's pods, ScheduleAnyway (a one-node
cluster still schedules every replica); nothing when the key is empty. The skew counts the
pods of one revision (matchLabelKeys: pod-template-hash), so a rolling update spreads the new
pods among themselves instead of filling the nodes the old ones are leaving; nodes whose
taints the pods do not tolerate are not counted as places to spread to.
Call with (dict "ctx" $ "component" "worker" "key" .Values.worker.topologySpreadKey).
*/}}
{{- define "recall.topologySpread" -}}
{{- if .key }}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: {{ .key }}
    whenUnsatisfiable: ScheduleAnyway
    nodeTaintsPolicy: Honor
    labelSelector:
      matchLabels:
        {{- include "recall.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 8 }}
    matchLabelKeys:
      - pod-template-hash
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
- name: RECALL_OPERATOR_AUTOSCALE_SLOTS
  value: {{ .Values.worker.slots | quote }}
{{- if .Values.pools }}
# The other pools: recall.base.settings.PoolScaling, one per Deployment of `pools`.
- name: RECALL_OPERATOR_AUTOSCALE_POOLS
  value: {{ include "recall.operator.autoscalePools" . | quote }}
{{- end }}
{{- end }}
{{- with include "recall.operator.workloadPort" . }}
- name: RECALL_OPERATOR_WORKLOAD_PORT
  value: {{ . | quote }}
{{- end }}
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
# The usage record of each namespace (docs/notify.md#usage-per-team): one ConfigMap by name.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [create]
- apiGroups: [""]
  resources: [configmaps]
  resourceNames: [recall-usage]
  verbs: [patch, update]
{{- with .Values.notify.secretNames }}
# The sinks' HMAC keys: get on these Secret names only (no list, no watch, no other Secret).
- apiGroups: [""]
  resources: [secrets]
  resourceNames: {{ toJson . }}
  verbs: [get]
{{- end }}
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
{{- include "recall.validatePools" . -}}
{{- if and (eq $as.mode "keda") (not $as.keda.port) -}}
{{- fail "worker.autoscaling.mode=keda needs worker.autoscaling.keda.port: KEDA reads the outstanding work from the operator there" -}}
{{- end -}}
{{- end -}}
