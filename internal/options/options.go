// Package options parses nodelocaldns's command line.
//
// The flags are node-cache's (kubernetes-sigs/node-local-dns cmd/node-cache), with the same names, defaults and
// meaning, single or double dash, so the standard nodelocaldns.yaml runs unchanged. node-cache's quirks are fixed
// rather than copied; each fix is noted where the flag is defined. Parsing is pure: it reads no files and touches
// no kernel, so `-print-rules` and the deploy tests can use it to validate a manifest's arguments.
//
// May touch: nothing.
package options

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/addr"
)

// Mode is what the process does after parsing.
type Mode int

const (
	ModeServe      Mode = iota // run the agent
	ModeVersion                // -version: print the version and exit
	ModePlugins                // -plugins: list the compiled-in CoreDNS plugins and exit
	ModePrintRules             // -print-rules: print the nftables ruleset that would be programmed and exit
	ModeTeardown               // -teardown: remove what an earlier run left behind and exit
	ModeProbe                  // -probe: ask the health socket of the agent in this pod, for the kubelet's exec probes
	ModeTop                    // -top: show the heaviest clients of the agent in this pod, through its health socket
)

// Options is the validated command line.
type Options struct {
	Mode Mode

	LocalIPs       []netip.Addr  // -localip: every listen address, IPv4 and IPv6 in any mix
	SetupInterface bool          // -setupinterface
	InterfaceName  string        // -interfacename
	SetupNftables  bool          // -setupiptables / -setupnftables: program the nftables table
	SyncInterval   time.Duration // -syncinterval: the safety-net reconcile period
	SkipTeardown   bool          // -skipteardown
	// LinkLocalFallback (-linklocal-fallback) keeps the fallback table, which sends queries to the local IPs
	// no Service backs to the kube-dns ClusterIP while nothing takes them.
	LinkLocalFallback bool
	// KubeDNSIPs (-kube-dns-ip) are the kube-dns Service's ClusterIPs the fallback sends queries to, at most
	// one per family (a dual-stack Service has two); empty: take them from -localip, or from
	// $KUBE_DNS_SERVICE_HOST where -localip cannot contradict it (the supervisor's fallbackVote).
	KubeDNSIPs []netip.Addr
	// FallbackLease (-fallback-lease) is how long the fallback covers an address without a live instance
	// renewing it.
	FallbackLease time.Duration
	// StepAside (-foreign-drop-step-aside) stops intercepting a local IP while another table's drop on input
	// or output covers it, so its queries go to kube-dns instead of into that drop; false keeps intercepting.
	StepAside bool

	BaseCorefile     string // -basecorefile: the template from the node-local-dns ConfigMap
	Corefile         string // -conf, else -corefile: where the rendered Corefile is written for operators to read
	CorefileFlag     string // the flag that named Corefile: "conf", or "corefile" when -conf was not given
	KubeDNSConfigDir string // -kubednscm: the kube-dns ConfigMap directory ("" = /etc/kube-dns when it exists)
	UpstreamSvc      string // -upstreamsvc: Service whose ClusterIP fills __PILLAR__CLUSTER__DNS__

	DNSPort    uint16 // -dns.port / -p
	HealthPort uint16 // -health-port
	// HealthSocket (-health-socket) is a Unix socket serving /health and /ready besides the Corefile's health
	// address, for probes that must reach this process alone; "" for none.
	HealthSocket string
	// Probe (-probe) is the path ModeProbe asks the health socket for: /health or /ready.
	Probe string
	// TopJSON (-json) makes ModeTop print one snapshot as JSON and exit; TopN (-top-n) is how many clients it
	// shows.
	TopJSON bool
	TopN    int

	MetricsListenAddress    string // -metrics-listen-address
	PrometheusListenAddress string // -prometheus-listen-address: fills __PROMETHEUS__ENDPOINT__

	PIDFile  string // -pidfile: written once CoreDNS listens (node-cache compatibility)
	LogLevel string // -log-level: debug, info, warn or error

	// StartupTaint (-startup-taint) is the key of the taint the node registers with, which the agent removes
	// once it serves (internal/nodetaint); "" is off.
	StartupTaint string
	// PodIdentity (-pod-identity) names the per-client accounting's sources namespace/pod by watching the pods
	// on this node through the API server (internal/podwatch).
	PodIdentity bool
	// UpstreamClientSubnet (-upstream-client-subnet) makes the misses our forward sends to the cluster DNS carry
	// the asking client's address as EDNS0 Client Subnet (internal/forward's clientsubnet.go).
	UpstreamClientSubnet bool
}

// Defaults, as node-cache has them.
const (
	DefaultInterfaceName           = "nodelocaldns"
	DefaultSyncInterval            = 60 * time.Second
	DefaultMetricsListenAddress    = "0.0.0.0:9353"
	DefaultPrometheusListenAddress = ":9253"
	DefaultBaseCorefile            = "/etc/coredns/Corefile.base"
	DefaultCorefile                = "/etc/Corefile"
	DefaultUpstreamSvc             = "kube-dns"
	DefaultDNSPort                 = "53"
	DefaultHealthPort              = "8080"
	// DefaultHealthSocket is the shipped manifests' -health-socket: where -top looks when not told, so that
	// `kubectl exec ds/node-local-dns -- nodelocaldns -top` needs no flag.
	DefaultHealthSocket = "/run/nodelocaldns/health.sock"
	// DefaultFallbackLease outlasts the kubelet's crash-loop back-off (5 minutes) with room for the restart.
	DefaultFallbackLease = 15 * time.Minute
)

// ErrHelp is returned for -h / -help; the usage text has been written to the output given to Parse.
var ErrHelp = flag.ErrHelp

// raw holds the flag values before validation.
type raw struct {
	localIP, dnsPort, healthPort, conf, corefile, logLevel, kubeDNSIP string
	syncInterval                                                      seconds
	version, plugins, printRules, teardown, top                       bool
	leaseSet                                                          bool // -fallback-lease was given
	// Parsed for node-cache's manifests and never read (see CompatibilityOnly).
	reloadWithSignal, quiet bool
}

// Parse parses args (without the program name). Errors are one line naming the flag and the bad value; the usage
// (a synopsis, then every flag) is written to usage only for -h and -help.
func Parse(args []string, usage io.Writer) (*Options, error) {
	o := &Options{}
	var r raw
	r.syncInterval = seconds(DefaultSyncInterval)
	fs := flag.NewFlagSet("nodelocaldns", flag.ContinueOnError)
	fs.SetOutput(io.Discard)

	fs.StringVar(&r.localIP, "localip", "", "(required) comma-separated IP addresses to listen on; IPv4 and IPv6 may be mixed")
	fs.BoolVar(&o.SetupInterface, "setupinterface", true, "create and maintain the interface holding the listen IPs")
	fs.StringVar(&o.InterfaceName, "interfacename", DefaultInterfaceName, "name of the interface holding the listen IPs")
	// node-cache's -setupiptables keeps its meaning (steer DNS traffic past conntrack) and now governs the nftables
	// table; -setupnftables is the same switch under its honest name.
	fs.BoolVar(&o.SetupNftables, "setupiptables", true, "program the nftables table (alias of -setupnftables)")
	fs.BoolVar(&o.SetupNftables, "setupnftables", true, "program the nftables table")
	// node-cache declares this as a time.Duration and multiplies it by time.Second, so only its default works.
	// We take both forms: a bare number is seconds ("60"), anything else a Go duration ("60s", "1m").
	fs.Var(&r.syncInterval, "syncinterval", "period of the safety-net reconcile pass: seconds (60) or a duration (1m)")
	fs.BoolVar(&o.SkipTeardown, "skipteardown", false, "leave the interface in place on exit (the table goes with the process: the kernel deletes it with our socket)")
	fs.StringVar(&o.MetricsListenAddress, "metrics-listen-address", DefaultMetricsListenAddress, "address of the agent's /metrics server")
	fs.StringVar(&o.PrometheusListenAddress, "prometheus-listen-address", DefaultPrometheusListenAddress, "substituted for __PROMETHEUS__ENDPOINT__ in the Corefile")
	fs.StringVar(&o.BaseCorefile, "basecorefile", DefaultBaseCorefile, "Corefile template (node-local-dns ConfigMap); its directory is watched")
	// node-cache ignores -corefile (it is always overwritten by -conf); we write to -conf and fall back to -corefile.
	fs.StringVar(&r.corefile, "corefile", DefaultCorefile, "where to write the rendered Corefile when -conf is not given")
	fs.StringVar(&o.KubeDNSConfigDir, "kubednscm", "", "kube-dns ConfigMap directory (default /etc/kube-dns when it exists)")
	fs.StringVar(&o.UpstreamSvc, "upstreamsvc", DefaultUpstreamSvc, "Service whose ClusterIP (from its env var) fills __PILLAR__CLUSTER__DNS__")
	fs.StringVar(&r.healthPort, "health-port", DefaultHealthPort, "port of the Corefile's health plugin; gets conntrack bypass rules")
	fs.StringVar(&o.HealthSocket, "health-socket", "", "also serve /health and /ready on this Unix socket (in the pod's own volume, for exec probes that reach this process alone); the directory must exist")
	fs.StringVar(&o.Probe, "probe", "", "ask the agent's -health-socket for this path (/health or /ready) and exit 0 if it answers 200, 1 otherwise: the kubelet's exec probe")
	fs.BoolVar(&r.top, "top", false, "show the heaviest DNS clients of the agent in this pod (rate, NXDOMAIN and SERVFAIL shares, hit ratio, top names), refreshed every second, through its -health-socket (default "+DefaultHealthSocket+")")
	fs.BoolVar(&o.TopJSON, "json", false, "with -top: print one snapshot as JSON and exit")
	fs.IntVar(&o.TopN, "top-n", 20, "with -top: how many clients to show")
	fs.BoolVar(&r.reloadWithSignal, "reloadwithsignal", false, "also reload in-process on SIGUSR1 (reloads are event-driven anyway)")
	// CoreDNS's own flags that node-cache relies on.
	fs.StringVar(&r.conf, "conf", "", "path the rendered Corefile is written to (CoreDNS -conf)")
	fs.StringVar(&r.dnsPort, "dns.port", DefaultDNSPort, "DNS port (CoreDNS -dns.port)")
	fs.StringVar(&r.dnsPort, "p", DefaultDNSPort, "DNS port (shorthand of -dns.port)")
	fs.StringVar(&o.PIDFile, "pidfile", "", "write the process id here once DNS is served")
	fs.BoolVar(&r.plugins, "plugins", false, "list the compiled-in plugins and exit")
	fs.BoolVar(&r.version, "version", false, "print the version and exit")
	fs.BoolVar(&r.quiet, "quiet", false, "no start-up banner")
	// Ours.
	fs.BoolVar(&r.printRules, "print-rules", false, "print the nftables ruleset for these flags and exit; touches nothing")
	fs.BoolVar(&r.teardown, "teardown", false, "remove the interface and the link-local fallback an earlier run left behind (unless an instance is still running) and exit")
	fs.BoolVar(&o.LinkLocalFallback, "linklocal-fallback", true, "while nothing listens, send queries to the local IPs no Service backs to the kube-dns ClusterIP (an nftables table that outlives the agent for at most -fallback-lease; -teardown removes it); false also removes one an earlier run left")
	fs.StringVar(&r.kubeDNSIP, "kube-dns-ip", "", "the kube-dns Service's ClusterIP, where the link-local fallback sends queries; a dual-stack Service's two, comma-separated (default the ClusterIP in -localip of each family, else $KUBE_DNS_SERVICE_HOST, which never overrides -localip)")
	fs.DurationVar(&o.FallbackLease, "fallback-lease", DefaultFallbackLease, "how long the link-local fallback outlives the last instance (renewed on the -syncinterval passes); at least 3 times -syncinterval, which a longer -syncinterval makes the default")
	fs.BoolVar(&o.StepAside, "foreign-drop-step-aside", true, "while another table's drop on input or output certainly stops DNS to a local IP, leave that IP's queries to kube-dns instead of intercepting them (false: intercept anyway, as before)")
	fs.StringVar(&r.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&o.PodIdentity, "pod-identity", false, "name DNS clients namespace/pod in -top, the per-client metrics and log lines, by watching the pods on this node (named by $NODE_NAME) through the API server; needs get, list and watch on pods (default off: clients are addresses)")
	fs.BoolVar(&o.UpstreamClientSubnet, "upstream-client-subnet", false, "the queries sent to the cluster DNS (the -upstreamsvc Service) on a cache miss carry the asking client's address as EDNS0 Client Subnet (/32, /128), which kube-dns's dnstap records (default off: kube-dns sees the node)")
	fs.StringVar(&o.StartupTaint, "startup-taint", "", "once serving, remove the taint of this key from the node (named by $NODE_NAME) through the API server, once: the start-up gate for nodes that register with it; needs get and patch on nodes (default off)")

	markCompatibility(fs)

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(usage, "Usage: nodelocaldns -localip IP[,IP...] [flags]\n"+
				"       nodelocaldns -version | -plugins | -print-rules -localip IP[,IP...] | -teardown | -probe PATH -health-socket PATH\n"+
				"Flags (single or double dash):\n")
			fs.SetOutput(usage)
			fs.PrintDefaults()
			return nil, ErrHelp
		}
		return nil, fmt.Errorf("%s", firstLine(err.Error()))
	}
	fs.Visit(func(f *flag.Flag) { r.leaseSet = r.leaseSet || f.Name == "fallback-lease" })
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags only)", fs.Arg(0))
	}
	return o, r.finish(o)
}

// CompatibilityOnly lists, in one place, the flags accepted only so that node-cache's manifests and scripts run
// unchanged: each parses, and does little or nothing of what it did in node-cache, for the reason given. The usage
// text marks them. Each call returns a new map.
func CompatibilityOnly() map[string]string {
	return map[string]string{
		"setupiptables":    "alias of -setupnftables: there are no iptables rules, the switch governs the nftables table",
		"corefile":         "node-cache overwrote it with -conf; used only as the output path when -conf is not given",
		"reloadwithsignal": "SIGUSR1 always reloads, and ConfigMap changes reload without a signal",
		"pidfile":          "node-cache polled it before programming rules; written for tools that still read it",
		"quiet":            "accepted and ignored: the agent prints no banner",
	}
}

// markCompatibility prefixes the usage of the compatibility-only flags.
func markCompatibility(fs *flag.FlagSet) {
	for name, why := range CompatibilityOnly() {
		if f := fs.Lookup(name); f != nil {
			f.Usage = "(node-cache compatibility: " + why + ") " + f.Usage
		}
	}
}

// finish validates the raw values into o.
func (r *raw) finish(o *Options) error {
	switch {
	case r.version:
		o.Mode = ModeVersion
	case r.plugins:
		o.Mode = ModePlugins
	case r.teardown:
		o.Mode = ModeTeardown
	case r.printRules:
		o.Mode = ModePrintRules
	case o.Probe != "":
		o.Mode = ModeProbe
	case r.top:
		o.Mode = ModeTop
	}
	var err error
	o.SyncInterval = time.Duration(r.syncInterval)
	if o.DNSPort, err = parsePort("dns.port (-p)", r.dnsPort); err != nil {
		return err
	}
	if o.HealthPort, err = parsePort("health-port", r.healthPort); err != nil {
		return err
	}
	if err := validateInterfaceName(o.InterfaceName); err != nil {
		return err
	}
	if o.KubeDNSIPs, err = parseKubeDNSIPs(r.kubeDNSIP); err != nil {
		return err
	}
	if !r.leaseSet && o.FallbackLease < 3*o.SyncInterval {
		o.FallbackLease = 3 * o.SyncInterval // a long -syncinterval lengthens the default lease with it
	}
	if o.FallbackLease < 3*o.SyncInterval {
		return fmt.Errorf("invalid value %v for flag -fallback-lease: want at least 3 times -syncinterval (%v), so that a pass renews it in time",
			o.FallbackLease, o.SyncInterval)
	}
	o.CorefileFlag = "conf"
	if o.Corefile = r.conf; o.Corefile == "" {
		o.Corefile, o.CorefileFlag = r.corefile, "corefile"
	}
	switch r.logLevel {
	case "debug", "info", "warn", "error":
		o.LogLevel = r.logLevel
	default:
		return fmt.Errorf("invalid value %q for flag -log-level: want debug, info, warn or error", r.logLevel)
	}
	// sun_path holds 108 bytes with the terminating NUL.
	if len(o.HealthSocket) > 107 {
		return fmt.Errorf("invalid value %q for flag -health-socket: a Unix socket path is at most 107 bytes", o.HealthSocket)
	}
	if o.Mode == ModeProbe {
		if o.Probe != "/health" && o.Probe != "/ready" {
			return fmt.Errorf("invalid value %q for flag -probe: want /health or /ready", o.Probe)
		}
		if o.HealthSocket == "" {
			return fmt.Errorf("flag -probe needs -health-socket: the socket the agent in this pod serves")
		}
	}
	if o.Mode == ModeTop {
		if o.HealthSocket == "" {
			o.HealthSocket = DefaultHealthSocket
		}
		if o.TopN < 1 {
			return fmt.Errorf("invalid value %d for flag -top-n: want at least 1", o.TopN)
		}
	}
	if o.TopJSON && o.Mode != ModeTop {
		return fmt.Errorf("flag -json needs -top")
	}
	if err := validateTaintKey(o.StartupTaint); err != nil {
		return err
	}
	for _, l := range []struct{ flag, v string }{
		{"metrics-listen-address", o.MetricsListenAddress}, {"prometheus-listen-address", o.PrometheusListenAddress},
	} {
		if err := validateListenAddress(l.flag, l.v); err != nil {
			return err
		}
	}
	if err := validateServiceName(o.UpstreamSvc); err != nil {
		return err
	}
	// -version, -plugins, -teardown and -probe need no listen address (node-cache refuses -version without
	// -localip).
	if o.Mode == ModeVersion || o.Mode == ModePlugins || o.Mode == ModeTeardown || o.Mode == ModeProbe || o.Mode == ModeTop {
		return nil
	}
	o.LocalIPs, err = parseLocalIPs(r.localIP)
	return err
}

// parseLocalIPs reads -localip; what may be a listen address is internal/addr's rule, shared with the interface,
// the table and the Corefile. IPv4-mapped IPv6 addresses are taken as the IPv4 address they carry.
func parseLocalIPs(s string) ([]netip.Addr, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("flag -localip is required: comma-separated IP addresses to listen on")
	}
	var ips []netip.Addr
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		ip, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("invalid value %q for flag -localip: %q is not an IP address", s, f)
		}
		ips = append(ips, ip.Unmap())
	}
	if err := addr.CheckListenIPs(ips); err != nil {
		return nil, fmt.Errorf("invalid value %q for flag -localip: %w", s, err)
	}
	return ips, nil
}

func parsePort(flagName, s string) (uint16, error) {
	var p uint64
	_, err := fmt.Sscan(s, &p)
	if err != nil || fmt.Sprint(p) != s || p == 0 || p > 65535 {
		return 0, fmt.Errorf("invalid value %q for flag -%s: want a port number 1-65535", s, flagName)
	}
	return uint16(p), nil
}

// validateInterfaceName applies internal/addr's rule, the one internal/link enforces.
func validateInterfaceName(name string) error {
	if err := addr.CheckInterfaceName(name); err != nil {
		return fmt.Errorf("invalid value %q for flag -interfacename: %w", name, err)
	}
	return nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// maxSyncInterval is the longest -syncinterval: the pass is a safety net, and a day is already a long time
// without one.
const maxSyncInterval = 24 * time.Hour

// seconds is a duration flag that also takes a bare number of seconds, as node-cache's manifests write it.
type seconds time.Duration

func (s *seconds) String() string { return time.Duration(*s).String() }

func (s *seconds) Set(v string) error {
	var d time.Duration
	var n uint64
	if _, err := fmt.Sscan(v, &n); err == nil && fmt.Sprint(n) == v {
		// Checked before multiplying: 18446744074 seconds would wrap around to 290 ms.
		if n > uint64(maxSyncInterval/time.Second) {
			return fmt.Errorf("want more than 0 and at most %s", maxSyncInterval)
		}
		d = time.Duration(n) * time.Second
	} else if d, err = time.ParseDuration(v); err != nil {
		return fmt.Errorf("want seconds (60) or a duration (60s, 1m)")
	}
	if d <= 0 || d > maxSyncInterval {
		return fmt.Errorf("want more than 0 and at most %s", maxSyncInterval)
	}
	*s = seconds(d)
	return nil
}

// parseKubeDNSIPs reads -kube-dns-ip: one ClusterIP, or a dual-stack Service's two (one per family),
// comma-separated; "" is none.
func parseKubeDNSIPs(v string) ([]netip.Addr, error) {
	if v == "" {
		return nil, nil
	}
	var ips []netip.Addr
	for _, f := range strings.Split(v, ",") {
		ip, err := netip.ParseAddr(strings.TrimSpace(f))
		if err != nil || ip.IsUnspecified() {
			return nil, fmt.Errorf("invalid value %q for flag -kube-dns-ip: want the kube-dns Service's ClusterIP (a dual-stack one's two, comma-separated)", v)
		}
		ip = ip.Unmap()
		for _, seen := range ips {
			if seen.Is4() == ip.Is4() {
				return nil, fmt.Errorf("invalid value %q for flag -kube-dns-ip: %v and %v are of one family; a Service has at most one ClusterIP per family", v, seen, ip)
			}
		}
		ips = append(ips, ip)
	}
	return ips, nil
}

// validateListenAddress: host:port as net.Listen takes it, the host empty (every address), an IP or a name, the
// port a number (0: any free port).
func validateListenAddress(flagName, v string) error {
	host, port, err := net.SplitHostPort(v)
	if err == nil {
		var p uint64
		if _, serr := fmt.Sscan(port, &p); serr != nil || fmt.Sprint(p) != port || p > 65535 {
			err = fmt.Errorf("port %q is not a number 0-65535", port)
		} else if strings.ContainsAny(host, " /") {
			err = fmt.Errorf("host %q is neither an IP address nor a name", host)
		}
	}
	if err != nil {
		return fmt.Errorf("invalid value %q for flag -%s: want host:port (:9253, 0.0.0.0:9353): %v", v, flagName, strings.TrimPrefix(err.Error(), "address "+v+": "))
	}
	return nil
}

// validateServiceName: -upstreamsvc names a Service, whose name is a DNS-1035 label (its environment variable,
// <NAME>_SERVICE_HOST, is made from it).
func validateServiceName(v string) error {
	ok := len(v) > 0 && len(v) <= 63 && v[0] >= 'a' && v[0] <= 'z' && v[len(v)-1] != '-'
	for _, c := range v {
		ok = ok && (c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-')
	}
	if !ok {
		return fmt.Errorf("invalid value %q for flag -upstreamsvc: want a Service's name (lowercase letters, digits and '-', starting with a letter, at most 63)", v)
	}
	return nil
}
