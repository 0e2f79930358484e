{{/*
Values this chart cannot honour fail the install here, each message naming its key and saying why
(values.schema.json refuses keys this chart does not know at all).
*/}}
{{- define "nld.validate" -}}
{{- $c := .Values.config -}}
{{- if not (has $c.commProtocol (list "force_tcp" "prefer_udp")) -}}
{{- fail (printf "config.commProtocol: %q is not force_tcp or prefer_udp" $c.commProtocol) -}}
{{- end -}}
{{- /* config.bindIp: false (the community chart's default, bind 0.0.0.0) is taken as true on the host network, with
a line in NOTES: a file that spells out that chart's default must install. */ -}}
{{- if regexMatch "(^|/)k8s-dns-node-cache$" (toString .Values.image.repository) -}}
{{- fail (printf "image.repository: %q is node-cache's image, which takes neither this chart's flags nor its probes; set image.repository (and image.tag) to the nodelocaldns image you built and pushed or loaded (README: Install), or leave both out for the default" .Values.image.repository) -}}
{{- end -}}
{{- if not (has $c.serveStale.mode (list "verify" "immediate")) -}}
{{- fail (printf "config.serveStale.mode: %q is not verify or immediate" $c.serveStale.mode) -}}
{{- end -}}
{{- if and .Values.resilientCache $c.serveStale.enabled -}}
{{- fail "resilientCache: it sets serve_stale itself; use it or config.serveStale.enabled, not both" -}}
{{- end -}}
{{- if and .Values.resilientCache $c.customConfig -}}
{{- fail "resilientCache: config.customConfig replaces the Corefile the profile edits; put serve_stale and serve_stale_policy in it instead" -}}
{{- end -}}
{{- if and .Values.ciliumLocalRedirectPolicy.enabled $c.setupIptables -}}
{{- fail "ciliumLocalRedirectPolicy.enabled: needs config.setupIptables=false (the redirect replaces the table, and the pods leave the host network)" -}}
{{- end -}}
{{- if and .Values.ciliumLocalRedirectPolicy.enabled (ne .Release.Namespace .Values.ciliumLocalRedirectPolicy.serviceNamespace) -}}
{{- fail (printf "ciliumLocalRedirectPolicy.serviceNamespace: %q is not the release namespace %q; Cilium redirects only to backend pods in the policy's (and the Service's) namespace" .Values.ciliumLocalRedirectPolicy.serviceNamespace .Release.Namespace) -}}
{{- end -}}
{{- if and .Values.startupTaint.enabled (not .Values.startupTaint.key) -}}
{{- fail "startupTaint.key: empty; the gate needs the key of the taint the nodes register with" -}}
{{- end -}}
{{- with .Values.securityContext -}}
{{- range $k, $v := . -}}
{{- if ne $k "capabilities" -}}
{{- fail (printf "securityContext.%s: the container's security context is fixed (drop ALL, add NET_ADMIN and NET_BIND_SERVICE, no privilege escalation, read-only root); only capabilities.add within NET_ADMIN and NET_BIND_SERVICE is accepted" $k) -}}
{{- end -}}
{{- end -}}
{{- range $k, $v := default dict .capabilities -}}
{{- if ne $k "add" -}}
{{- fail (printf "securityContext.capabilities.%s: the capabilities are fixed (drop ALL, add NET_ADMIN and NET_BIND_SERVICE)" $k) -}}
{{- end -}}
{{- end -}}
{{- range (default dict .capabilities).add -}}
{{- if not (has . (list "NET_ADMIN" "NET_BIND_SERVICE")) -}}
{{- fail (printf "securityContext.capabilities.add: %s is not needed and not granted (nodelocaldns needs NET_ADMIN and NET_BIND_SERVICE only)" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
