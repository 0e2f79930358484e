package corefile

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nodelocaldns/nodelocaldns/internal/addr"
)

// Template variables. node-cache substitutes the first five at run time (cmd/node-cache/app/configmap.go,
// updateCorefile); __PILLAR__DNS__DOMAIN__ is only ever replaced by the deploy-time sed.
const (
	varLocalDNS           = "__PILLAR__LOCAL__DNS__"
	varDNSServer          = "__PILLAR__DNS__SERVER__"
	varClusterDNS         = "__PILLAR__CLUSTER__DNS__"
	varUpstreamServers    = "__PILLAR__UPSTREAM__SERVERS__"
	varPrometheusEndpoint = "__PROMETHEUS__ENDPOINT__"
	varDNSDomain          = "__PILLAR__DNS__DOMAIN__"
	pillarPrefix          = "__PILLAR__"
)

// node-cache's literal texts, byte for byte, so a Corefile.base written for node-cache renders the same here.
const (
	// defaultUpstream is what __PILLAR__UPSTREAM__SERVERS__ becomes without upstreamNameservers.
	defaultUpstream = "/etc/resolv.conf"
	// upstreamTCPBlock is swapped for upstreamUDPBlock when upstreamNameservers is set: custom upstreams get UDP.
	upstreamTCPBlock = "\n    forward . " + varUpstreamServers + " {\n            force_tcp\n    }\n"
	upstreamUDPBlock = "\n    forward . " + varUpstreamServers + "\n"
	// stubBlock is one stub-domain server block (UDP forward since node-cache commit 0ceb7f4a).
	stubBlock    = "\n%s:%d {\n    errors\n    cache %d\n    bind %s\n    forward . %s\n}\n"
	stubCacheTTL = 30
)

// Params are the run-time values node-cache substitutes into Corefile.base.
type Params struct {
	// LocalIPs (-localip) fill __PILLAR__LOCAL__DNS__ and the stub blocks' bind, all of them, space-separated.
	// Where the variable is used as a host (`__PILLAR__LOCAL__DNS__:8080`, `[__PILLAR__LOCAL__DNS__]`) only the
	// first is used.
	LocalIPs []netip.Addr
	// DNSPort (-dns.port) is the port of the stub blocks, "<domain>:<port>".
	DNSPort uint16
	// ClusterDNS is the upstream Service ClusterIP for __PILLAR__CLUSTER__DNS__; may be empty when the
	// template does not use it.
	ClusterDNS string
	// ClusterDNSEnv names where ClusterDNS came from (ServiceHostEnv(-upstreamsvc)), for error messages.
	ClusterDNSEnv string
	// PrometheusEndpoint (-prometheus-listen-address) fills __PROMETHEUS__ENDPOINT__.
	PrometheusEndpoint string
	// Directives are the directives the Corefile may use, in CoreDNS's order: the list the serving CoreDNS
	// parses with (dnsserver.Directives), so a Corefile fails here exactly when it would fail there.
	Directives []string
}

// ServiceHostEnv returns the environment variable the kubelet sets to a Service's ClusterIP
// ("kube-dns-upstream" -> "KUBE_DNS_UPSTREAM_SERVICE_HOST"), as node-cache reads -upstreamsvc.
func ServiceHostEnv(svc string) string {
	return strings.ToUpper(strings.ReplaceAll(svc, "-", "_")) + "_SERVICE_HOST"
}

// Render substitutes p and kd into base with node-cache's semantics and appends one block per stub domain,
// sorted by domain. The substituted base is validated on its own first (so a broken base is reported as such),
// then the whole result, which must parse as the base's blocks followed by one block per stub domain. kd is
// re-validated, so a hand-built KubeDNS cannot inject text either.
//
// Deliberate differences from node-cache, each a fix:
//   - `__PILLAR__LOCAL__DNS__:port` and `[__PILLAR__LOCAL__DNS__]` get the first local IP (IPv6 in brackets)
//     instead of all of them, which made `health` invalid with several IPs or with IPv6;
//   - an unset ClusterDNS is refused, naming the env var, instead of rendering `<nil>`; the same for a missing
//     local IP or Prometheus endpoint the template uses;
//   - a template variable left in the base (such as __PILLAR__DNS__DOMAIN__, which only the deploy-time sed
//     replaces) is refused with its line instead of producing a server block for a zone named after it;
//   - a stub domain that duplicates a zone of the base is refused here rather than by CoreDNS at start;
//   - variables are replaced in one pass, so values cannot complete or break another variable's name;
//   - stub blocks come sorted, not in Go map order.
func Render(base []byte, kd KubeDNS, p Params) ([]byte, error) {
	kd, err := kd.canonical(func(key string) string { return key })
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(base) {
		return nil, fmt.Errorf("base Corefile: not valid UTF-8")
	}
	v, err := p.values(len(kd.StubDomains) > 0)
	if err != nil {
		return nil, err
	}
	r := replacer(kd, v)
	if err := checkVariables(base, r, p); err != nil {
		return nil, fmt.Errorf("base Corefile: %w", err)
	}
	out := substitute(base, kd, r)
	if err := checkNoVariables(out); err != nil {
		return nil, fmt.Errorf("base Corefile after substitution: %w", err)
	}
	port := ""
	if p.DNSPort != 0 {
		port = strconv.Itoa(int(p.DNSPort))
	}
	baseBlocks, err := validate(out, p.Directives, port)
	if err != nil {
		return nil, fmt.Errorf("base Corefile after substitution: %w", err)
	}
	return appendStubs(out, len(baseBlocks), kd, v.local, p)
}

// values are the checked, formatted substitutions; an empty field means "not available".
type values struct {
	local, localHost, clusterDNS, prometheus string
}

func (p Params) values(haveStubs bool) (values, error) {
	var v values
	// No local IPs is allowed here (a base without __PILLAR__LOCAL__DNS__ renders without them); the ones given
	// obey the rule the interface and the table enforce.
	if len(p.LocalIPs) > 0 {
		if err := addr.CheckListenIPs(p.LocalIPs); err != nil {
			return values{}, err
		}
	}
	ips := make([]string, 0, len(p.LocalIPs))
	for _, a := range p.LocalIPs {
		ips = append(ips, a.String())
	}
	v.local = strings.Join(ips, " ")
	if len(p.LocalIPs) > 0 {
		v.localHost = hostForPort(p.LocalIPs[0])
	}
	if haveStubs && (len(ips) == 0 || p.DNSPort == 0) {
		return values{}, fmt.Errorf("stub domains need local IPs and a DNS port (have %d IPs, port %d)", len(ips), p.DNSPort)
	}
	if p.ClusterDNS != "" {
		a, err := netip.ParseAddr(p.ClusterDNS)
		if err != nil || a.Zone() != "" {
			return values{}, fmt.Errorf("cluster DNS %q from %s: not an IP address", p.ClusterDNS, p.clusterDNSEnv())
		}
		v.clusterDNS = a.String()
	}
	if p.PrometheusEndpoint != "" {
		if err := checkListenAddress(p.PrometheusEndpoint); err != nil {
			return values{}, fmt.Errorf("prometheus endpoint %q: %w", p.PrometheusEndpoint, err)
		}
		v.prometheus = p.PrometheusEndpoint
	}
	return v, nil
}

func (p Params) clusterDNSEnv() string {
	if p.ClusterDNSEnv != "" {
		return p.ClusterDNSEnv
	}
	return "the -upstreamsvc Service's <NAME>_SERVICE_HOST env var"
}

// replacer performs node-cache's substitutions in one pass, leftmost match first, so that one value can never
// complete or break another variable's name. node-cache replaced variable after variable over the whole text; the
// results differ only for variables run together without a separator (e.g. `__PILLAR__DNS__SERVER__PILLAR__...`),
// which node-cache turned into half-substituted text. A variable whose value is unavailable is left in place
// and refused by checkVariables.
func replacer(kd KubeDNS, v values) *strings.Replacer {
	upstream := defaultUpstream
	if len(kd.UpstreamNameservers) > 0 {
		upstream = strings.Join(kd.UpstreamNameservers, " ")
	}
	// Its IP is already among the local IPs; node-cache leaves the space before it (`bind 169.254.20.10 `).
	pairs := []string{varUpstreamServers, upstream, varDNSServer, ""}
	if v.local != "" {
		// Used as a host, the variable gets one address; listed first so they win over the plain variable.
		pairs = append(pairs, "["+varLocalDNS+"]", v.localHost, varLocalDNS+":", v.localHost+":", varLocalDNS, v.local)
	}
	if v.clusterDNS != "" {
		pairs = append(pairs, varClusterDNS, v.clusterDNS)
	}
	if v.prometheus != "" {
		pairs = append(pairs, varPrometheusEndpoint, v.prometheus)
	}
	return strings.NewReplacer(pairs...)
}

// substitute swaps node-cache's force_tcp upstream block for a UDP one when upstreamNameservers is set (custom
// upstreams get UDP; a base with other indentation or without force_tcp, like the stock manifest, keeps its
// forward line as is), then replaces the variables.
func substitute(base []byte, kd KubeDNS, r *strings.Replacer) []byte {
	out := string(base)
	if len(kd.UpstreamNameservers) > 0 {
		out = strings.ReplaceAll(out, upstreamTCPBlock, upstreamUDPBlock)
	}
	return []byte(r.Replace(out))
}
