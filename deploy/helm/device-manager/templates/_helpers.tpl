{{/* The common prefix of every object's name. */}}
{{- define "dm.prefix" -}}
{{- required "namePrefix must not be empty" .Values.namePrefix | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "dm.node.name" -}}
{{ include "dm.prefix" . }}-device-manager
{{- end -}}

{{- define "dm.worker.name" -}}
{{ include "dm.prefix" . }}-device-manager-worker
{{- end -}}

{{- define "dm.worker.tlsSecret" -}}
{{- default (printf "%s-tls" (include "dm.worker.name" .)) .Values.webhook.tlsSecretName -}}
{{- end -}}

{{- define "dm.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "dm.labels" -}}
app.kubernetes.io/part-of: device-manager
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
Container env entries from a map NAME → value, in name order, one entry per name (so an override
replaces the chart's entry rather than adding a second one, which `helm upgrade` refuses):
- text, a number or a boolean: passed as text;
- "": passed set to the empty string, rendered as a bare `- name:` (what the API server stores
  for an empty value, so a later upgrade finds nothing to change);
- a map: the entry's body as written (`valueFrom: …`);
- null: not passed at all.
*/}}
{{- define "dm.env" -}}
{{- $env := . }}
{{- range $name := keys $env | sortAlpha }}
{{- $value := index $env $name }}
{{- if kindIs "map" $value }}
- name: {{ $name }}
  {{- toYaml $value | nindent 2 }}
{{- else if not (kindIs "invalid" $value) }}
- name: {{ $name }}
{{- if ne (toString $value) "" }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* A downward-API env value: the Pod's field at this path. */}}
{{- define "dm.fieldRef" -}}
{{- toJson (dict "valueFrom" (dict "fieldRef" (dict "fieldPath" .))) -}}
{{- end -}}

{{/*
Every manufacturer's row of global.manufacturers as the described system's settings
(GPUSTACK_<MANUFACTURER>_PCI_VENDOR_ID, _ACCELERATABLE_RESOURCE_NAME, _ACCELERATABLE_RUNTIME_NAME,
_PARTITION_KIND), set into the env dict given: the daemons, the worker and the clean-up read one
manufacturers table, the one that selects the daemons' nodes. A row without resourceName,
runtimeName or partitionKind leaves that setting to the code's default; "" means none.
Call with (dict "root" $ "env" $env).
*/}}
{{- define "dm.manufacturerSettings" -}}
{{- $env := .env }}
{{- range $name, $m := .root.Values.global.manufacturers }}
{{- $prefix := printf "GPUSTACK_%s_" (upper $name) }}
{{- if $m.pciVendorIds }}
{{- $_ := set $env (printf "%sPCI_VENDOR_ID" $prefix) (join "," $m.pciVendorIds) }}
{{- end }}
{{- if hasKey $m "resourceName" }}
{{- $_ := set $env (printf "%sACCELERATABLE_RESOURCE_NAME" $prefix) (toString $m.resourceName) }}
{{- end }}
{{- if hasKey $m "runtimeName" }}
{{- $_ := set $env (printf "%sACCELERATABLE_RUNTIME_NAME" $prefix) (toString $m.runtimeName) }}
{{- end }}
{{- if hasKey $m "partitionKind" }}
{{- $_ := set $env (printf "%sPARTITION_KIND" $prefix) (toString $m.partitionKind) }}
{{- end }}
{{- end }}
{{- end -}}
