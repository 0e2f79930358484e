{{/*
The node-local-dns ConfigMap's Corefile: deploy/base's standard template with the values applied, edit by edit.
With the defaults only the deploy-time placeholders change (the sed of the standard instructions); the agent still
fills __PILLAR__CLUSTER__DNS__ and __PILLAR__UPSTREAM__SERVERS__ at run time. deploy/chart_corefile_test.go
checks each edit against what its value asks.
*/}}
{{- define "nld.corefile" -}}
{{- $c := .Values.config -}}
{{- if $c.customConfig -}}
{{- $c.customConfig -}}
{{- else -}}
{{- $cf := (.Files.Get "base/configmap.yaml" | fromYaml).data.Corefile -}}
{{- $hostNet := include "nld.hostNetwork" . -}}
{{- /* AAAA questions answered empty, in the cluster domain and "." blocks (before the domain is filled). */ -}}
{{- if $c.noIPv6Lookups -}}
{{- $aaaa := "    errors\n    template ANY AAAA {\n        rcode NOERROR\n    }\n" -}}
{{- $cf = replace "__PILLAR__DNS__DOMAIN__:53 {\n    errors\n" (printf "__PILLAR__DNS__DOMAIN__:53 {\n%s" $aaaa) $cf -}}
{{- $cf = replace ".:53 {\n    errors\n" (printf ".:53 {\n%s" $aaaa) $cf -}}
{{- end -}}
{{- if $c.enableLogging -}}
{{- $cf = replace "    errors\n" "    errors\n    log\n" $cf -}}
{{- end -}}
{{- $cf = replace "__PILLAR__DNS__DOMAIN__" $c.dnsDomain $cf -}}
{{- $cf = replace ":53 {" (printf ":%d {" (int $c.port.number)) $cf -}}
{{- /* Listen addresses: every -localip, or the wildcard where that is honoured (no host network: on it a wildcard
listener is not intercepted, so config.bindIp=false binds the addresses too, and NOTES says so). */ -}}
{{- $bind := "0.0.0.0" -}}
{{- if or $c.bindIp $hostNet -}}
{{- $bind = join " " (include "nld.localIps" . | fromJsonArray) -}}
{{- end -}}
{{- $cf = replace "bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__" (printf "bind %s" $bind) $cf -}}
{{- $health := printf ":%d" (int $c.healthPort) -}}
{{- if $hostNet -}}
{{- $health = include "nld.hostPort" (dict "host" $c.localDns "port" (int $c.healthPort)) -}}
{{- end -}}
{{- $cf = replace "health __PILLAR__LOCAL__DNS__:8080" (printf "health %s" $health) $cf -}}
{{- $cf = replace "force_tcp" $c.commProtocol $cf -}}
{{- /* Cache: the TTL, then prefetch and serve_stale (or the resilient profile) inside every cache block. */ -}}
{{- $cacheOpts := list -}}
{{- if $c.prefetch.enabled -}}
{{- $cacheOpts = append $cacheOpts (printf "prefetch %v %v %v" $c.prefetch.amount $c.prefetch.duration $c.prefetch.percentage) -}}
{{- end -}}
{{- if $c.serveStale.enabled -}}
{{- $cacheOpts = append $cacheOpts (printf "serve_stale %v %v" $c.serveStale.duration $c.serveStale.mode) -}}
{{- else if .Values.resilientCache -}}
{{- $cacheOpts = append $cacheOpts "serve_stale 1h verify 100ms" -}}
{{- end -}}
{{- if .Values.resilientCache -}}
{{- $cacheOpts = append $cacheOpts "serve_stale_policy prefer_positive" -}}
{{- end -}}
{{- $ttl := int $c.cacheTTL -}}
{{- $cf = replace "success 9984 30\n" (printf "success 9984 %d\n" $ttl) $cf -}}
{{- if $cacheOpts -}}
{{- $inner := "" -}}
{{- range $cacheOpts -}}
{{- $inner = printf "%s            %s\n" $inner . -}}
{{- end -}}
{{- $cf = replace "            denial 9984 5\n" (printf "            denial 9984 5\n%s" $inner) $cf -}}
{{- $cf = replace "    cache 30\n" (printf "    cache %d {\n%s    }\n" $ttl $inner) $cf -}}
{{- else -}}
{{- $cf = replace "    cache 30\n" (printf "    cache %d\n" $ttl) $cf -}}
{{- end -}}
{{- /* The "." block's upstreams and forward options. */ -}}
{{- $up := $c.upstreamServers -}}
{{- if kindIs "slice" $up -}}
{{- $up = join " " $up -}}
{{- end -}}
{{- $fwd := printf "forward . %s" $up -}}
{{- if $c.upstreamForwardConfig -}}
{{- $fwd = printf "%s {\n" $fwd -}}
{{- range $k, $v := $c.upstreamForwardConfig -}}
{{- if kindIs "slice" $v -}}
{{- $v = join " " $v -}}
{{- end -}}
{{- $fwd = printf "%s            %s %v\n" $fwd $k $v -}}
{{- end -}}
{{- $fwd = printf "%s    }" $fwd -}}
{{- end -}}
{{- $cf = replace "forward . __PILLAR__UPSTREAM__SERVERS__" $fwd $cf -}}
{{- $cf -}}
{{- with $c.extraServerBlocks -}}
{{- printf "%s\n" (trimSuffix "\n" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
