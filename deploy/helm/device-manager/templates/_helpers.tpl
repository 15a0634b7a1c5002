{{/*
The manufacturers this chart version can detect: a DaemonSet is rendered only for these. Others
are listed in values.yaml (global.manufacturers) for labeling and future detection; enabling one
fails the render.
*/}}
{{- define "dm.detectable" -}}
nvidia
{{- end -}}

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

{{/* The GPUSTACK_* settings as container env entries (null: not passed). */}}
{{- define "dm.settings.env" -}}
{{- range $name, $value := .Values.settings }}
{{- if not (kindIs "invalid" $value) }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end }}
{{- end -}}
