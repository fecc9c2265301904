{{/*
The results store (DESIGN §4b): where transcripts, per-chunk checkpoints and outputs go. Either
the user's bucket (store.url, credentials from a Secret or the environment), or the bundled
single-node store (store.bundled.enabled) for a quick start.
*/}}

{{- define "recall.store.bundledName" -}}
{{- printf "%s-store" (include "recall.fullname" .) -}}
{{- end -}}

{{/* The results store URL both components use. */}}
{{- define "recall.store.url" -}}
{{- if .Values.store.url -}}
{{- .Values.store.url -}}
{{- else if and .Values.store.bundled.enabled (not .Values.operator.enabled) -}}
{{- fail "a release without the operator does not bundle a store: set store.url (with store.env and store.workerSecret) to the results store of the release that runs the operator" -}}
{{- else if .Values.store.bundled.enabled -}}
{{- printf "s3://%s/" .Values.store.bundled.bucket -}}
{{- else -}}
{{- fail "store.url is empty and store.bundled.enabled is false: set store.url to your bucket (s3://bucket/prefix, gs://..., az://..., file:///...) or turn the bundled store on" -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding one component's store credentials, or nothing (the environment). */}}
{{- define "recall.store.secret" -}}
{{- $given := ternary .ctx.Values.store.workerSecret .ctx.Values.store.operatorSecret (eq .component "worker") -}}
{{- if $given -}}
{{- $given -}}
{{- else if and .ctx.Values.store.bundled.enabled (not .ctx.Values.store.url) -}}
{{- printf "%s-%s" (include "recall.store.bundledName" .ctx) .component -}}
{{- end -}}
{{- end -}}

{{/* Where a component's store credentials are mounted. */}}
{{- define "recall.store.credentialsDir" -}}
/var/run/secrets/recall/store
{{- end -}}

{{/* The store's environment of one component: call with (dict "ctx" $ "component" "worker"). */}}
{{- define "recall.store.env" -}}
- name: RECALL_STORE_URL
  value: {{ include "recall.store.url" .ctx | quote }}
{{- if include "recall.store.secret" . }}
- name: RECALL_STORE_CREDENTIALS_DIR
  value: {{ include "recall.store.credentialsDir" .ctx }}
{{- end }}
{{- if and .ctx.Values.store.bundled.enabled (not .ctx.Values.store.url) }}
- name: AWS_ENDPOINT_URL
  value: {{ printf "http://%s.%s.svc:%v" (include "recall.store.bundledName" .ctx) .ctx.Release.Namespace .ctx.Values.store.bundled.port | quote }}
- name: AWS_ALLOW_HTTP
  value: "true"
- name: AWS_REGION
  value: us-east-1
{{- end }}
{{- with .ctx.Values.store.env }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The volume mount of a component's store credentials, if it has a Secret. */}}
{{- define "recall.store.volumeMount" -}}
{{- if include "recall.store.secret" . }}
- name: store-credentials
  mountPath: {{ include "recall.store.credentialsDir" .ctx }}
  readOnly: true
{{- end }}
{{- end -}}

{{/*
The volume of a component's store credentials: the Secret's keys (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, optionally AWS_SESSION_TOKEN) as files named like the variables they
replace, re-read by the component within a minute of a rotation (a mounted
Secret follows its updates; an env var would not).
*/}}
{{- define "recall.store.volume" -}}
{{- with include "recall.store.secret" . }}
- name: store-credentials
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end }}
{{- end -}}
