package corefile

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/coredns/caddy/caddyfile"
)

// checkVariables refuses a base whose tokens hold a template variable that will not be substituted: the variable
// would otherwise reach CoreDNS as text (node-cache rendered `<nil>` for an unset ClusterIP, and a zone literally
// named __PILLAR__DNS__DOMAIN__ when the deploy-time sed was skipped). Comments are not tokens, so a variable
// mentioned in a comment is fine.
// Each token is substituted as the whole text will be (a variable name never spans tokens), so what is checked is
// exactly what CoreDNS would get, with the line of the base.
func checkVariables(base []byte, r *strings.Replacer, p Params) error {
	d := caddyfile.NewDispenser(corefileName, bytes.NewReader(base))
	for d.Next() {
		if err := leftover(r.Replace(d.Val()), p); err != nil {
			return fmt.Errorf("line %d: %w", d.Line(), err)
		}
	}
	return nil
}

// checkNoVariables is the backstop after substitution: no token may still hold a template variable, whatever
// the base's bytes (caddyfile drops a '\r' inside a token, for instance, so a variable can appear only once the
// text is tokenized).
func checkNoVariables(corefile []byte) error {
	d := caddyfile.NewDispenser(corefileName, bytes.NewReader(corefile))
	for d.Next() {
		if strings.Contains(d.Val(), pillarPrefix) || strings.Contains(d.Val(), varPrometheusEndpoint) {
			return fmt.Errorf("%s template variable left in %q", at(d.Line()), d.Val())
		}
	}
	return nil
}

// leftover explains a template variable that remains in tok.
func leftover(tok string, p Params) error {
	switch {
	case strings.Contains(tok, varClusterDNS):
		return fmt.Errorf("%s needs the upstream Service ClusterIP, but %s is not set", varClusterDNS, p.clusterDNSEnv())
	case strings.Contains(tok, varLocalDNS):
		return fmt.Errorf("%s needs -localip, but no local IP was given", varLocalDNS)
	case strings.Contains(tok, varPrometheusEndpoint):
		return fmt.Errorf("%s needs -prometheus-listen-address, but it is empty", varPrometheusEndpoint)
	case strings.Contains(tok, varDNSDomain):
		return fmt.Errorf("%s is not substituted at run time (node-cache does not either): "+
			"replace it with the cluster domain, e.g. cluster.local, when deploying, as the manifest's sed does", varDNSDomain)
	case strings.Contains(tok, pillarPrefix):
		return fmt.Errorf("unknown template variable in %q", tok)
	}
	return nil
}

// checkListenAddress accepts host:port with an empty host, an IP or a hostname, and a port 1-65535.
func checkListenAddress(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("want [host]:port: %w", err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("port %q not in 1-65535", port)
	}
	if host == "" {
		return nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return errors.New("IPv6 zone not allowed")
		}
		return nil
	}
	for _, l := range strings.Split(host, ".") {
		if err := checkLabel(strings.ToLower(l)); err != nil {
			return fmt.Errorf("host %q: %w", host, err)
		}
	}
	return nil
}
