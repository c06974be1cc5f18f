{{- define "mcpg.name" -}}{{ .Release.Name }}-operator{{- end -}}
{{- define "mcpg.labels" -}}
app.kubernetes.io/name: {{ include "mcpg.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: mcpg
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "mcpg.selector" -}}
app.kubernetes.io/name: {{ include "mcpg.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
