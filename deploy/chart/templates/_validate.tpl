{{/*
Values this chart cannot honour fail the install here, each message naming its key and saying why
(values.schema.json refuses keys this chart does not know at all).
*/}}
{{- define "nld.validate" -}}
{{- $c := .Values.config -}}
{{- if not (has $c.commProtocol (list "force_tcp" "prefer_udp")) -}}
{{- fail (printf "config.commProtocol: %q is not force_tcp or prefer_udp" $c.commProtocol) -}}
{{- end -}}
{{- if and (include "nld.hostNetwork" .) (not $c.bindIp) -}}
{{- fail "config.bindIp: false (bind 0.0.0.0) cannot be honoured on the host network: nodelocaldns intercepts only addresses a listener is bound to (nodelocaldns_unbound_local_ip), and a wildcard listener on port 53 collides with any resolver the node runs. Remove the key, or use it with config.setupIptables=false (ciliumLocalRedirectPolicy)" -}}
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
