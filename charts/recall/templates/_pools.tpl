{{/*
Worker pools (DESIGN §4c): a pool is a Deployment of workers with one engine, one kind of node
and its own scaling. The values under `worker` (and `engine`, `image`) are the pool named
default, Deployment <fullname>-worker; each entry of `pools` adds the Deployment
<fullname>-worker-<name>, whose pods carry the component label worker-<name> (so no two
Deployments, disruption budgets or policies select the same pods: the default pool's selector,
immutable since the first release, selects component worker). Every worker pod carries
recall.dev/pool: <name>, every pool's Deployment that label and the annotation recall.dev/slots.
*/}}

{{/*
`over` laid on `base` (maps merged key by key, any other value of `over` replacing the base's,
an empty one too), as JSON. Call with (dict "base" $a "over" $b).
*/}}
{{- define "recall.overlay" -}}
{{- $out := deepCopy (.base | default dict) -}}
{{- range $key, $value := (.over | default dict) -}}
{{- $under := index $out $key -}}
{{- if and (kindIs "map" $value) (kindIs "map" $under) -}}
{{- $_ := set $out $key (include "recall.overlay" (dict "base" $under "over" $value) | fromJson) -}}
{{- else -}}
{{- $_ := set $out $key $value -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/*
A pool's image: the chart's image, unless the pool names a repository, tag or digest of its own;
then the reference is the pool's alone (its repository, else the chart's; its digest, else its
tag, else the appVersion), so the chart's digest never pins a pool's other image.
*/}}
{{- define "recall.poolImage" -}}
{{- $own := .over | default dict -}}
{{- $image := deepCopy .base -}}
{{- if or $own.repository $own.tag $own.digest -}}
{{- $_ := set $image "tag" ($own.tag | default "") -}}
{{- $_ := set $image "digest" ($own.digest | default "") -}}
{{- $_ := set $image "repository" ($own.repository | default .base.repository) -}}
{{- end -}}
{{- with $own.pullPolicy -}}
{{- $_ := set $image "pullPolicy" . -}}
{{- end -}}
{{- toJson $image -}}
{{- end -}}

{{/*
The pools of the release, as a JSON list, the default pool first (nothing without
worker.enabled). Each: name, component (the pods' component label), deployment (its name),
worker (the `worker` values with the pool's own: whole values, but autoscaling,
podDisruptionBudget and modelCache merged key by key), engine (`engine` with the pool's engine
merged key by key) and image (recall.poolImage). Read with `include "recall.pools" . | fromJsonArray`.
*/}}
{{- define "recall.pools" -}}
{{- $pools := list -}}
{{- if .Values.worker.enabled -}}
{{- $fullname := include "recall.fullname" . -}}
{{- $pools = append $pools (dict "name" "default" "component" "worker" "deployment" (printf "%s-worker" $fullname) "worker" .Values.worker "engine" .Values.engine "image" .Values.image) -}}
{{- range $entry := .Values.pools -}}
{{- $worker := deepCopy $.Values.worker -}}
{{- range $key, $value := omit $entry "name" "engine" "image" -}}
{{- if has $key (list "autoscaling" "podDisruptionBudget" "modelCache") -}}
{{- $_ := set $worker $key (include "recall.overlay" (dict "base" (index $worker $key) "over" $value) | fromJson) -}}
{{- else -}}
{{- $_ := set $worker $key $value -}}
{{- end -}}
{{- end -}}
{{- $engine := include "recall.overlay" (dict "base" $.Values.engine "over" $entry.engine) | fromJson -}}
{{- $image := include "recall.poolImage" (dict "base" $.Values.image "over" $entry.image) | fromJson -}}
{{- $pools = append $pools (dict "name" $entry.name "component" (printf "worker-%s" $entry.name) "deployment" (printf "%s-worker-%s" $fullname $entry.name) "worker" $worker "engine" $engine "image" $image) -}}
{{- end -}}
{{- end -}}
{{- toJson $pools -}}
{{- end -}}

{{/* An image reference: repository@digest when a digest is given, else repository:tag. Call
with (dict "image" $image "ctx" $). */}}
{{- define "recall.imageRef" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
A pool's Whisper threads: the explicit value, else the container's CPU limit (or request
without a limit), read through the downward API and rounded up to whole CPUs.
Call with (dict "pool" $pool).
*/}}
{{- define "recall.worker.whisperThreadsEnv" -}}
- name: RECALL_WORKER_WHISPER_THREADS
{{- if .pool.engine.whisper.threads }}
  value: {{ .pool.engine.whisper.threads | quote }}
{{- else }}
  valueFrom:
    resourceFieldRef:
      containerName: worker
      resource: {{ if ((.pool.worker.resources | default dict).limits | default dict).cpu }}limits.cpu{{ else }}requests.cpu{{ end }}
      divisor: "1"
{{- end }}
{{- end -}}

{{/* A pool's pod grace: the explicit value, else its grace + 20 s for the release. Call with
(dict "pool" $pool). */}}
{{- define "recall.worker.terminationGracePeriodSeconds" -}}
{{- $w := .pool.worker -}}
{{- if kindIs "invalid" $w.terminationGracePeriodSeconds -}}
{{- add (ceil $w.graceSeconds | int) 20 -}}
{{- else -}}
{{- $w.terminationGracePeriodSeconds | int -}}
{{- end -}}
{{- end -}}

{{/*
A pool Deployment's replicas. Fixed: the pool's replicas. Autoscaled: the autoscaler owns the
count. A fresh install sets none; an upgrade writes back the count found in the cluster, so the
patch Helm computes leaves it as it is. Leaving the field out of an upgrade would not do: a
field present in the previous release's manifest and absent from the new one is removed by
Helm's three-way merge, and the API server then defaults it to 1 (helm/helm#7090, #12650).
Call with (dict "ctx" $ "pool" $pool).
*/}}
{{- define "recall.worker.replicas" -}}
{{- if eq .ctx.Values.worker.autoscaling.mode "fixed" -}}
replicas: {{ .pool.worker.replicas }}
{{- else -}}
{{- $live := lookup "apps/v1" "Deployment" .ctx.Release.Namespace .pool.deployment -}}
{{- if and $live $live.spec (hasKey $live.spec "replicas") -}}
replicas: {{ $live.spec.replicas }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The URL of the operator's /workload endpoint for one pool. Call with (dict "ctx" $ "pool"
$pool); the default pool's URL names no pool (the endpoint's default). */}}
{{- define "recall.workloadUrl" -}}
{{- $ctx := .ctx -}}
{{- $service := include "recall.serviceName" (dict "base" (include "recall.fullname" $ctx) "suffix" "-operator-workload") -}}
{{- $url := printf "http://%s.%s.svc:%v/workload?namespace=%s&engine=%s" $service $ctx.Release.Namespace $ctx.Values.worker.autoscaling.keda.port $ctx.Release.Namespace .pool.engine.name -}}
{{- if ne .pool.name "default" -}}
{{- $url = printf "%s&pool=%s" $url .pool.name -}}
{{- end -}}
{{- $url -}}
{{- end -}}

{{/*
The built-in autoscaler's pools besides the default one, as the operator reads them
(RECALL_OPERATOR_AUTOSCALE_POOLS: recall.base.settings.PoolScaling): JSON.
*/}}
{{- define "recall.operator.autoscalePools" -}}
{{- $scaled := list -}}
{{- range $pool := include "recall.pools" . | fromJsonArray -}}
{{- if ne $pool.name "default" -}}
{{- $as := $pool.worker.autoscaling -}}
{{- $scaled = append $scaled (dict "pool" $pool.name "deployment" $pool.deployment "engine" $pool.engine.name "min" ($as.minReplicas | int) "max" ($as.maxReplicas | int) "slots" ($pool.worker.slots | int)) -}}
{{- end -}}
{{- end -}}
{{- toJson $scaled -}}
{{- end -}}

{{/* What the schema cannot say about the pools; fails the render with a reason. */}}
{{- define "recall.validatePools" -}}
{{- $names := list -}}
{{- range .Values.pools -}}
{{- if eq .name "default" -}}
{{- fail "pools: the pool named default is the worker Deployment of `worker`; give this pool another name" -}}
{{- end -}}
{{- if has .name $names -}}
{{- fail (printf "pools: two pools are named %s" .name) -}}
{{- end -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- if and .Values.pools (not .Values.worker.enabled) -}}
{{- fail "pools need worker.enabled: the pools share the workers' ServiceAccount and rights (set worker.replicas: 0, or autoscaling bounds of 0, for no worker of the default pool)" -}}
{{- end -}}
{{- $mode := .Values.worker.autoscaling.mode -}}
{{- range $pool := include "recall.pools" . | fromJsonArray -}}
{{- if ne $pool.name "default" -}}
{{- $w := $pool.worker -}}
{{- $at := printf "pools[%s]" $pool.name -}}
{{- if and $w.metricsPort (gt (len (printf "%s-metrics" $pool.deployment)) 63) -}}
{{- fail (printf "%s: the Service %s-metrics would be longer than 63 characters: shorten the pool's name (or fullnameOverride)" $at $pool.deployment) -}}
{{- end -}}
{{- if not (kindIs "invalid" $w.terminationGracePeriodSeconds) -}}
{{- if le (float64 $w.terminationGracePeriodSeconds) (float64 $w.graceSeconds) -}}
{{- fail (printf "%s.terminationGracePeriodSeconds (%v) must be longer than its graceSeconds (%v), or the kubelet kills a worker before it releases its job" $at $w.terminationGracePeriodSeconds $w.graceSeconds) -}}
{{- end -}}
{{- end -}}
{{- if and (ne $mode "fixed") (gt (int $w.autoscaling.minReplicas) (int $w.autoscaling.maxReplicas)) -}}
{{- fail (printf "%s.autoscaling.minReplicas (%v) must not exceed its maxReplicas (%v)" $at $w.autoscaling.minReplicas $w.autoscaling.maxReplicas) -}}
{{- end -}}
{{- if or (eq $mode "builtin") $.Values.worker.podIdentityPolicy.enabled -}}
{{- range $w.extraEnv -}}
{{- if eq .name "RECALL_WORKER_ID" -}}
{{- fail (printf "%s: workers are named by their pods (worker.autoscaling.mode=builtin, worker.podIdentityPolicy): remove RECALL_WORKER_ID from its extraEnv" $at) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
