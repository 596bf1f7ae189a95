{{/* Name of the chart, overridable with nameOverride. */}}
{{- define "bnerd-vpn-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name of the release's objects, overridable with fullnameOverride. */}}
{{- define "bnerd-vpn-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "bnerd-vpn-operator.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "bnerd-vpn-operator.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "bnerd-vpn-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "bnerd-vpn-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "bnerd-vpn-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "bnerd-vpn-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "bnerd-vpn-operator.serviceAccountName" -}}
{{- default (include "bnerd-vpn-operator.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/*
An image reference: repository:tag, the tag defaulting to the chart's appVersion.
Call with (dict "image" .Values.images.x "root" .).
*/}}
{{- define "bnerd-vpn-operator.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* Whether the chart creates the credentials namespace (never the release namespace). */}}
{{- define "bnerd-vpn-operator.createCredentialsNamespace" -}}
{{- if and .Values.clusterLink.createNamespace (ne .Values.clusterLink.credentialsNamespace .Release.Namespace) -}}
true
{{- end -}}
{{- end -}}

{{/*
Labels the operator puts on every gateway pod whatever the gateway (internal/render
Labels: app.kubernetes.io/name and app.kubernetes.io/managed-by). The chart's tests check
them against the operator's renderer.
*/}}
{{- define "bnerd-vpn-operator.gatewayPodSelectorLabels" -}}
app.kubernetes.io/name: bnerd-vpn-gateway
app.kubernetes.io/managed-by: bnerd-vpn-operator
{{- end -}}

{{- define "bnerd-vpn-operator.gatewayPodMonitorName" -}}
{{- printf "%s-gateways" (include "bnerd-vpn-operator.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The job label of the gateway series: the rule's override, else what the Prometheus
Operator gives a PodMonitor's targets without a jobLabel, <namespace>/<name>.
*/}}
{{- define "bnerd-vpn-operator.gatewayJob" -}}
{{- if .Values.gatewayMonitoring.prometheusRule.job -}}
{{- .Values.gatewayMonitoring.prometheusRule.job -}}
{{- else if .Values.gatewayMonitoring.podMonitor.enabled -}}
{{- printf "%s/%s" .Release.Namespace (include "bnerd-vpn-operator.gatewayPodMonitorName" .) -}}
{{- else -}}
{{- fail "gatewayMonitoring.prometheusRule.enabled needs gatewayMonitoring.podMonitor.enabled or gatewayMonitoring.prometheusRule.job (the job label of your own gateway scrape)" -}}
{{- end -}}
{{- end -}}
