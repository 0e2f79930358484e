package corefile

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Limits on ConfigMap values.
const (
	// maxDomainLen is the DNS-1123 subdomain limit (k8s.io/apimachinery validation.IsDNS1123Subdomain).
	maxDomainLen = 253
	// maxLabelLen is the DNS label limit (RFC 1035 2.3.4).
	maxLabelLen = 63
	// maxStubServers is the forward plugin's limit per block (coredns plugin/forward/setup.go `max`).
	maxStubServers = 15
	// maxUpstreamNameservers is kube-dns's limit (kubernetes/dns pkg/dns/config validateUpstreamNameserver).
	maxUpstreamNameservers = 3
)

// Nameserver schemes the forward plugin accepts that node-cache allowed (ValidateNodeLocalCacheConfig: dns, tls).
const (
	schemeDNS = "dns://"
	schemeTLS = "tls://"
)

// serverGrammar is appended to nameserver errors so the operator sees what is accepted.
const serverGrammar = "want IP, IP:port or [IPv6]:port, optionally prefixed by dns:// or tls://, port 1-65535"

// checkDomain accepts a DNS-1123 subdomain, as kube-dns does. Uppercase is refused rather than lowercased:
// kube-dns refuses it too, and folding would let "A.com" and "a.com" collide into two identical server blocks.
// A trailing dot is refused for the same reason ("a.com." and "a.com" are one zone).
func checkDomain(d string) error {
	if d == "" {
		return errors.New("empty domain")
	}
	if len(d) > maxDomainLen {
		return fmt.Errorf("longer than %d characters", maxDomainLen)
	}
	for _, label := range strings.Split(d, ".") {
		if err := checkLabel(label); err != nil {
			return fmt.Errorf("not a DNS-1123 subdomain: %w", err)
		}
	}
	return nil
}

func checkLabel(l string) error {
	switch {
	case l == "":
		return errors.New("empty label")
	case len(l) > maxLabelLen:
		return fmt.Errorf("label longer than %d characters", maxLabelLen)
	case l[0] == '-' || l[len(l)-1] == '-':
		return fmt.Errorf("label %q starts or ends with '-'", l)
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
		case c >= 'A' && c <= 'Z':
			return fmt.Errorf("uppercase letter %q (write the domain in lowercase)", c)
		default:
			return fmt.Errorf("character %q not allowed (only a-z, 0-9, '-' and '.')", c)
		}
	}
	return nil
}

// canonicalServer parses a nameserver ([dns://|tls://]IP[:port]) and returns it in canonical form. Hostnames
// and file paths are refused: the forward plugin would read a path as a resolv.conf file (node-cache let
// kube-dns accept hostnames, which forward then failed to open as files).
func canonicalServer(s string) (string, error) {
	scheme, rest := "", s
	for _, p := range []string{schemeDNS, schemeTLS} {
		if strings.HasPrefix(s, p) {
			scheme, rest = p, s[len(p):]
		}
	}
	if strings.Contains(rest, "://") {
		return "", fmt.Errorf("unsupported scheme (%s)", serverGrammar)
	}
	if ap, err := netip.ParseAddrPort(rest); err == nil {
		if ap.Addr().Zone() != "" {
			return "", fmt.Errorf("IPv6 zone not allowed (%s)", serverGrammar)
		}
		if ap.Port() == 0 {
			return "", fmt.Errorf("port 0 (%s)", serverGrammar)
		}
		return scheme + ap.String(), nil
	}
	a, err := netip.ParseAddr(rest)
	if err != nil {
		if host, port, err := net.SplitHostPort(rest); err == nil {
			if _, err := netip.ParseAddr(host); err == nil {
				return "", fmt.Errorf("port %q not in 1-65535 (%s)", port, serverGrammar)
			}
		}
		return "", fmt.Errorf("not an IP address (%s)", serverGrammar)
	}
	if a.Zone() != "" {
		return "", fmt.Errorf("IPv6 zone not allowed (%s)", serverGrammar)
	}
	return scheme + a.String(), nil
}

// hostForPort formats an address as the host part of host:port (IPv6 in brackets).
func hostForPort(a netip.Addr) string {
	if a.Is6() { // includes IPv4-mapped IPv6, which netip prints with colons
		return "[" + a.String() + "]"
	}
	return a.String()
}
