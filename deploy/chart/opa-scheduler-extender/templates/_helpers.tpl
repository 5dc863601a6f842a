{{- define "ose.name" -}}opa-scheduler-extender{{- end -}}

{{/* Labels on every object: the name the kustomize base uses, and Helm's. */}}
{{- define "ose.labels" -}}
app.kubernetes.io/name: {{ include "ose.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "ose.selector" -}}
app.kubernetes.io/name: {{ include "ose.name" . }}
{{- end -}}

{{/* The Service's DNS name, which the serving certificate must carry. */}}
{{- define "ose.host" -}}{{ .Release.Name }}.{{ .Release.Namespace }}.svc{{- end -}}

{{/* Labels of the second scheduler's objects. */}}
{{- define "ose.schedulerLabels" -}}
app.kubernetes.io/name: {{ .Values.secondScheduler.name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
