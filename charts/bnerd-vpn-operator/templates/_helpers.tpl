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

{{/*
Labels of every object: the chart's own, and commonLabels where they do not name one of
those.
*/}}
{{- define "bnerd-vpn-operator.labels" -}}
{{- $own := include "bnerd-vpn-operator.selectorLabels" . | fromYaml -}}
{{- $_ := set $own "helm.sh/chart" (printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-") -}}
{{- $_ := set $own "app.kubernetes.io/version" .Chart.AppVersion -}}
{{- $_ := set $own "app.kubernetes.io/managed-by" .Release.Service -}}
{{- $_ := set $own "app.kubernetes.io/component" "operator" -}}
{{- toYaml (merge $own (deepCopy (default (dict) .Values.commonLabels))) -}}
{{- end -}}

{{/*
The operator's ServiceAccount: the chart's (default the full name), or an existing one,
which must then be named: binding the operator's ClusterRole to the namespace's default
ServiceAccount would hand it to every pod there.
*/}}
{{- define "bnerd-vpn-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "bnerd-vpn-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false: the existing ServiceAccount the operator runs as" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
An image reference. The repository's registry host is replaced by imageRegistry when
that is set (a repository without a host gets it as a prefix); a digest is used instead
of the tag; the tag defaults to the chart's appVersion.
Call with (dict "image" .Values.images.x "root" .).
*/}}
{{- define "bnerd-vpn-operator.image" -}}
{{- $repo := .image.repository -}}
{{- $registry := .root.Values.imageRegistry -}}
{{- if $registry -}}
{{- $parts := splitList "/" $repo -}}
{{- $host := first $parts -}}
{{- if and (gt (len $parts) 1) (or (contains "." $host) (contains ":" $host) (eq $host "localhost")) -}}
{{- $repo = join "/" (rest $parts) -}}
{{- end -}}
{{- $repo = printf "%s/%s" (trimSuffix "/" $registry) $repo -}}
{{- end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $repo .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}
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
Whether a monitoring object is rendered. Call with (dict "value" <enabled value> "kind"
<Prometheus Operator kind> "root" .). `auto` renders it when the cluster serves that kind
of monitoring.coreos.com/v1 (the Prometheus Operator's CRDs are installed); true and false
force it either way. Yields "true" or nothing.
*/}}
{{- define "bnerd-vpn-operator.monitoringOn" -}}
{{- if kindIs "bool" .value -}}
{{- if .value -}}true{{- end -}}
{{- else if eq (toString .value) "auto" -}}
{{- if .root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" .kind) -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{- /* The operator's metrics port: 8443 for HTTPS (metrics.secure), 8080 for plain HTTP. */ -}}
{{- define "bnerd-vpn-operator.metricsPort" -}}
{{- if .Values.metrics.secure -}}8443{{- else -}}8080{{- end -}}
{{- end -}}

{{- define "bnerd-vpn-operator.serviceMonitorOn" -}}
{{- if and .Values.metrics.service.enabled (include "bnerd-vpn-operator.monitoringOn" (dict "value" .Values.metrics.serviceMonitor.enabled "kind" "ServiceMonitor" "root" .)) -}}
true
{{- else if and (eq (toString .Values.metrics.serviceMonitor.enabled) "true") (not .Values.metrics.service.enabled) -}}
{{- fail "metrics.serviceMonitor.enabled needs metrics.service.enabled" -}}
{{- end -}}
{{- end -}}

{{- define "bnerd-vpn-operator.podMonitorOn" -}}
{{- include "bnerd-vpn-operator.monitoringOn" (dict "value" .Values.gatewayMonitoring.podMonitor.enabled "kind" "PodMonitor" "root" .) -}}
{{- end -}}

{{- define "bnerd-vpn-operator.prometheusRuleOn" -}}
{{- include "bnerd-vpn-operator.monitoringOn" (dict "value" .Values.gatewayMonitoring.prometheusRule.enabled "kind" "PrometheusRule" "root" .) -}}
{{- end -}}

{{/*
The job label of the gateway series: the rule's override, else what the Prometheus
Operator gives a PodMonitor's targets without a jobLabel, <namespace>/<name>.
*/}}
{{- define "bnerd-vpn-operator.gatewayJob" -}}
{{- if .Values.gatewayMonitoring.prometheusRule.job -}}
{{- .Values.gatewayMonitoring.prometheusRule.job -}}
{{- else if include "bnerd-vpn-operator.podMonitorOn" . -}}
{{- printf "%s/%s" .Release.Namespace (include "bnerd-vpn-operator.gatewayPodMonitorName" .) -}}
{{- else -}}
{{- fail "gatewayMonitoring.prometheusRule needs gatewayMonitoring.podMonitor or gatewayMonitoring.prometheusRule.job (the job label of your own gateway scrape)" -}}
{{- end -}}
{{- end -}}

{{/*
The job label of the operator's own series (bnerd_gateway_info and the other per-gateway
series the operator exports): the rule's override, else what the Prometheus Operator gives
a ServiceMonitor's targets without a jobLabel, the Service's name.
*/}}
{{- define "bnerd-vpn-operator.operatorJob" -}}
{{- if .Values.gatewayMonitoring.prometheusRule.operatorJob -}}
{{- .Values.gatewayMonitoring.prometheusRule.operatorJob -}}
{{- else if include "bnerd-vpn-operator.serviceMonitorOn" . -}}
{{- printf "%s-metrics" (include "bnerd-vpn-operator.fullname" .) -}}
{{- else -}}
{{- fail "gatewayMonitoring.prometheusRule needs metrics.serviceMonitor or gatewayMonitoring.prometheusRule.operatorJob (the job label of your own scrape of the operator, which must keep the series' namespace label: honor_labels)" -}}
{{- end -}}
{{- end -}}
