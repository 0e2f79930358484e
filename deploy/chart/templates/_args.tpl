{{/*
The container's args, as JSON: deploy/base's, with -localip and -upstreamsvc filled, and a flag for each value
that differs from the agent's default (so the default args are the base's exactly).
*/}}
{{- define "nld.args" -}}
{{- $c := .Values.config -}}
{{- $base := index (.Files.Get "base/daemonset.yaml" | fromYaml).spec.template.spec.containers 0 -}}
{{- $args := list -}}
{{- $prev := "" -}}
{{- range $a := $base.args -}}
{{- if eq $prev "-localip" -}}
{{- $a = join "," (include "nld.localIps" $ | fromJsonArray) -}}
{{- else if eq $prev "-upstreamsvc" -}}
{{- $a = include "nld.upstreamSvc" $ -}}
{{- end -}}
{{- $args = append $args $a -}}
{{- $prev = $a -}}
{{- end -}}
{{- if ne (int $c.port.number) 53 -}}
{{- $args = concat $args (list "-dns.port" (toString (int $c.port.number))) -}}
{{- end -}}
{{- if ne (int $c.healthPort) 8080 -}}
{{- $args = concat $args (list "-health-port" (toString (int $c.healthPort))) -}}
{{- end -}}
{{- if not $c.setupInterface -}}
{{- $args = append $args "-setupinterface=false" -}}
{{- end -}}
{{- if not $c.setupIptables -}}
{{- $args = append $args "-setupiptables=false" -}}
{{- end -}}
{{- if $c.skipTeardown -}}
{{- $args = append $args "-skipteardown" -}}
{{- end -}}
{{- if not .Values.linkLocalFallback.enabled -}}
{{- $args = append $args "-linklocal-fallback=false" -}}
{{- end -}}
{{- with .Values.linkLocalFallback.lease -}}
{{- $args = append $args (printf "-fallback-lease=%s" .) -}}
{{- end -}}
{{- with .Values.linkLocalFallback.kubeDnsIp -}}
{{- $args = append $args (printf "-kube-dns-ip=%s" .) -}}
{{- end -}}
{{- if not .Values.foreignDropStepAside -}}
{{- $args = append $args "-foreign-drop-step-aside=false" -}}
{{- end -}}
{{- if .Values.startupTaint.enabled -}}
{{- $args = append $args (printf "-startup-taint=%s" .Values.startupTaint.key) -}}
{{- end -}}
{{- if .Values.podIdentity.enabled -}}
{{- $args = append $args "-pod-identity" -}}
{{- end -}}
{{- if .Values.upstreamClientSubnet -}}
{{- $args = append $args "-upstream-client-subnet" -}}
{{- end -}}
{{- toJson $args -}}
{{- end -}}
