{{- define "agentd.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "agentd.labels" -}}
app.kubernetes.io/name: agentd
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "agentd.selector" -}}
app.kubernetes.io/name: agentd
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{- define "agentd.serviceAccount" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "agentd.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "agentd.secretName" -}}
{{- default (include "agentd.fullname" .) .Values.existingSecret -}}
{{- end -}}

{{- define "agentd.storeURL" -}}
{{- if .Values.postgresql.url -}}
{{- .Values.postgresql.url -}}
{{- else -}}
{{- printf "postgres://%s:%s@%s-postgresql:5432/%s?sslmode=disable" .Values.postgresql.user .Values.postgresql.password (include "agentd.fullname" .) .Values.postgresql.database -}}
{{- end -}}
{{- end -}}

{{- define "agentd.natsURL" -}}
{{- if .Values.nats.url -}}
{{- .Values.nats.url -}}
{{- else -}}
{{- printf "nats://%s-nats:4222" (include "agentd.fullname" .) -}}
{{- end -}}
{{- end -}}
