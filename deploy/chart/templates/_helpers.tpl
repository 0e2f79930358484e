{{/*
Names, labels and the values every template derives from. The objects themselves come from the kustomize base, base/ in
this chart (deploy/base is a link to it, so that the chart holds no link, which helm warns about).
*/}}

{{- define "nld.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nld.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Helm's labels, added to every object's own (the base's labels stay). */}}
{{- define "nld.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "nld.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The pods' k8s-app label, as the standard manifest's selector has it. */}}
{{- define "nld.selectorValue" -}}
{{- include "nld.name" . -}}
{{- end -}}

{{- define "nld.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "nld.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "nld.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion (toString .Values.image.tag)) -}}
{{- end -}}

{{/* "true" when the pods run on the host network: the table is programmed (community: hostNetwork follows
config.setupIptables). */}}
{{- define "nld.hostNetwork" -}}
{{- if .Values.config.setupIptables -}}true{{- end -}}
{{- end -}}

{{/* The upstream Service the agent reads its ClusterIP from (-upstreamsvc). */}}
{{- define "nld.upstreamSvc" -}}
{{- default "kube-dns-upstream" .Values.config.customUpstreamsvc -}}
{{- end -}}

{{/* Every listen address in -localip order, as JSON: localDns, extraLocalIps, then the kube-dns ClusterIP when
it is intercepted (host network and dnsServer set), as the standard manifest orders them. */}}
{{- define "nld.localIps" -}}
{{- $ips := list .Values.config.localDns -}}
{{- range .Values.extraLocalIps -}}
{{- $ips = append $ips . -}}
{{- end -}}
{{- if and (include "nld.hostNetwork" .) .Values.config.dnsServer -}}
{{- $ips = append $ips .Values.config.dnsServer -}}
{{- end -}}
{{- toJson $ips -}}
{{- end -}}

{{/* host:port for an IPv4 or IPv6 address. */}}
{{- define "nld.hostPort" -}}
{{- if contains ":" .host -}}[{{ .host }}]:{{ .port }}{{- else -}}{{ .host }}:{{ .port }}{{- end -}}
{{- end -}}

{{/* base reads one object of deploy/base as a dict, named and labelled for this release. Call with
(dict "ctx" $ "file" "daemonset.yaml" "name" NAME). */}}
{{- define "nld.base" -}}
{{- $o := .ctx.Files.Get (printf "base/%s" .file) | fromYaml -}}
{{- if not $o.kind -}}
{{- fail (printf "chart: base/%s is missing or not one object (the chart's base/ is the kustomize base, deploy/base)" .file) -}}
{{- end -}}
{{- $_ := set $o.metadata "name" .name -}}
{{- $_ := set $o.metadata "namespace" .ctx.Release.Namespace -}}
{{- $_ := set $o.metadata "labels" (merge (include "nld.labels" .ctx | fromYaml) (default dict $o.metadata.labels)) -}}
{{- toYaml $o -}}
{{- end -}}
