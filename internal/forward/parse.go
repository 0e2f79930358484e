package forward

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/coredns/coredns/plugin/pkg/parse"
	"github.com/coredns/coredns/plugin/pkg/proxy"
	pkgtls "github.com/coredns/coredns/plugin/pkg/tls"
	"github.com/coredns/coredns/plugin/pkg/transport"
	"github.com/miekg/dns"
)

var log = clog.NewWithPlugin(Name)

// stanza is what a stanza's options set that only matters while building its upstreams.
type stanza struct {
	tlsConfig     *tls.Config
	tlsServerName string
	maxIdleConns  int
	dohMethod     string
	sourceAddress net.IP
}

// parseStanza parses one `forward FROM TO... { OPTIONS }`. Each check and its error text is CoreDNS's
// (plugin/forward/setup.go), so a Corefile is refused here exactly when CoreDNS refuses it, with the same
// words, except hostname upstreams (CoreDNS 1.13's resolver), which are refused here.
func parseStanza(c *caddy.Controller) (*Forward, error) {
	f := newForward()
	st := stanza{tlsConfig: new(tls.Config), dohMethod: http.MethodPost}
	if !c.Args(&f.from) {
		return f, c.ArgErr()
	}
	orig := f.from
	zones := plugin.Host(f.from).NormalizeExact()
	if len(zones) == 0 {
		return f, fmt.Errorf("unable to normalize '%s'", f.from)
	}
	f.from = zones[0]
	if len(zones) > 1 {
		log.Warningf("Unsupported CIDR notation: '%s' expands to multiple zones. Using only '%s'.", orig, f.from)
	}
	to := c.RemainingArgs()
	if len(to) == 0 {
		return f, c.ArgErr()
	}
	for c.NextBlock() {
		if err := parseBlock(c, f, &st); err != nil {
			return f, err
		}
	}
	if f.maxAge > 0 && f.maxAge < f.expire {
		return f, fmt.Errorf("max_age (%s) must not be less than expire (%s)", f.maxAge, f.expire)
	}
	for _, a := range to {
		if trans, h := parse.Transport(a); trans == transport.HTTPS && strings.Contains(h, "/") {
			return f, fmt.Errorf("paths are not allowed in HTTPS upstream addresses (the /dns-query path is used by default): %s", a)
		}
	}
	hosts, entries, err := upstreamAddrs(to)
	if err != nil {
		return f, err
	}
	f.toEntries = entries
	if err := f.buildProxies(hosts, st); err != nil {
		return f, err
	}
	return f, nil
}

// upstreamAddrs expands the TO list (addresses and resolv.conf files) in order, without duplicates, and counts
// the TO entries that named any (CoreDNS's bound of 15 is on those).
func upstreamAddrs(to []string) ([]string, int, error) {
	seen := map[string]bool{}
	var out []string
	entries := 0
	for _, h := range to {
		hosts, err := parse.HostPortOrFile(h)
		if errors.Is(err, parse.ErrNoNameservers) {
			continue // an empty file
		}
		if err != nil {
			if strings.Contains(err.Error(), "not an IP address or file") {
				if hostname(h) {
					return nil, 0, fmt.Errorf("%q: hostname upstreams are not supported by nodelocaldns's forward", h)
				}
				return nil, 0, fmt.Errorf("not an IP address, file, or valid domain: %q", h)
			}
			return nil, 0, err
		}
		entries++
		for _, a := range hosts {
			if !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	if len(out) == 0 {
		return nil, 0, fmt.Errorf("no valid upstream addresses found")
	}
	return out, entries, nil
}

// hostname says a TO is a domain name (with any transport and port), which CoreDNS would resolve.
func hostname(to string) bool {
	host, _ := splitZone(to)
	_, host = parse.Transport(host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "" || strings.ContainsAny(host, "/[]") {
		return false
	}
	_, ok := dns.IsDomainName(host)
	return ok
}

// buildProxies makes one upstreamProxy per address: CoreDNS's proxy (health checks, and the transport for
// anything but plain DNS) with our transport beside it for plain DNS.
func (f *Forward) buildProxies(hosts []string, st stanza) error {
	allowed := map[string]bool{transport.DNS: true, transport.TLS: true, transport.QUIC: true, transport.HTTPS: true}
	perName := map[string]int{}
	names := make([]string, len(hosts))
	trans := make([]string, len(hosts))
	for i, hz := range hosts {
		host, serverName := splitZone(hz)
		tr, h := parse.Transport(host)
		if !allowed[tr] {
			return fmt.Errorf("'%s' is not supported as a destination protocol in forward: %s", tr, host)
		}
		if (tr == transport.TLS || tr == transport.QUIC) && serverName != "" {
			if st.tlsServerName != "" {
				return fmt.Errorf("both forward ('%s') and proxy level ('%s') TLS servernames are set for upstream proxy '%s'", st.tlsServerName, serverName, host)
			}
			names[i] = serverName
			perName[serverName]++
		}
		trans[i] = tr
		f.proxies = append(f.proxies, newUpstreamProxy(proxy.NewProxy(proxyName, h, tr), h, tr == transport.DNS && st.sourceAddress == nil))
	}
	perNameTLS := map[string]*tls.Config{}
	if st.tlsServerName != "" {
		st.tlsConfig.ServerName = st.tlsServerName
	} else {
		for name, n := range perName {
			cfg := st.tlsConfig.Clone()
			cfg.ServerName = name
			cfg.ClientSessionCache = tls.NewLRUClientSessionCache(n)
			perNameTLS[name] = cfg
		}
	}
	st.tlsConfig.ClientSessionCache = tls.NewLRUClientSessionCache(len(f.proxies))
	for i, up := range f.proxies {
		p := up.cp
		if trans[i] == transport.HTTPS {
			p.SetHTTPClient(&http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: 2 * time.Second})
			p.SetTLSConfig(st.tlsConfig)
			p.SetDOHRequestOptions(st.dohMethod)
		}
		if trans[i] == transport.TLS || trans[i] == transport.HTTPS || trans[i] == transport.QUIC {
			p.SetDOHHost(st.tlsConfig.ServerName)
			if cfg, ok := perNameTLS[names[i]]; ok {
				p.SetTLSConfig(cfg)
			} else {
				p.SetTLSConfig(st.tlsConfig)
			}
		}
		p.SetExpire(f.expire)
		p.SetMaxAge(f.maxAge)
		p.SetMaxIdleConns(st.maxIdleConns)
		p.SetReadTimeout(f.readTimeout)
		hc := p.GetHealthchecker()
		hc.SetRecursionDesired(f.opts.HCRecursionDesired)
		if f.opts.ForceTCP && trans[i] != transport.TLS && trans[i] != transport.QUIC {
			hc.SetTCPTransport()
		}
		hc.SetDomain(f.opts.HCDomain)
		if st.sourceAddress != nil {
			p.SetLocalAddress(st.sourceAddress)
			hc.SetLocalAddress(st.sourceAddress)
		}
	}
	return nil
}

// splitZone cuts an IPv6 zone ("fe80::1%eth0", or a TLS server name written the same way) off a host, keeping
// any port and transport prefix.
func splitZone(host string) (newHost, zone string) {
	trans, rest, found := strings.Cut(host, "://")
	if !found {
		rest, trans = trans, ""
	}
	newHost = rest
	if i := strings.LastIndex(rest, "%"); i >= 0 {
		newHost = rest[:i]
		if strings.HasPrefix(newHost, "[") {
			newHost += "]"
		}
		zone = rest[i+1:]
		if j := strings.LastIndex(zone, ":"); j >= 0 {
			newHost += zone[j:]
			zone = strings.TrimSuffix(zone[:j], "]")
		}
	}
	if trans != "" {
		newHost = trans + "://" + newHost
	}
	return newHost, zone
}

// parseBlock parses one option of a stanza's block.
func parseBlock(c *caddy.Controller, f *Forward, st *stanza) error {
	switch c.Val() {
	case "except":
		ignore := c.RemainingArgs()
		if len(ignore) == 0 {
			return c.ArgErr()
		}
		for _, i := range ignore {
			f.ignored = append(f.ignored, plugin.Host(i).NormalizeExact()...)
		}
	case "max_fails":
		n, err := uintArg(c)
		if err != nil {
			return err
		}
		f.maxfails = n
	case "max_connect_attempts":
		n, err := uintArg(c)
		if err != nil {
			return err
		}
		f.maxConnectAttempts, f.maxConnectAttemptsSet = n, true
	case "health_check":
		if !c.NextArg() {
			return c.ArgErr()
		}
		dur, err := time.ParseDuration(c.Val())
		if err != nil {
			return err
		}
		if dur < 0 {
			return fmt.Errorf("health_check can't be negative: %d", dur)
		}
		f.hcInterval = dur
		f.opts.HCDomain = "."
		for c.NextArg() {
			switch o := c.Val(); o {
			case "no_rec":
				f.opts.HCRecursionDesired = false
			case "domain":
				if !c.NextArg() {
					return c.ArgErr()
				}
				d := c.Val()
				if _, ok := dns.IsDomainName(d); !ok {
					return fmt.Errorf("health_check: invalid domain name %s", d)
				}
				f.opts.HCDomain = plugin.Name(d).Normalize()
			default:
				return fmt.Errorf("health_check: unknown option %s", o)
			}
		}
	case "force_tcp":
		if c.NextArg() {
			return c.ArgErr()
		}
		f.opts.ForceTCP = true
	case "prefer_udp":
		if c.NextArg() {
			return c.ArgErr()
		}
		f.opts.PreferUDP = true
	case "tls":
		args := c.RemainingArgs()
		if len(args) > 3 {
			return c.ArgErr()
		}
		root := dnsserver.GetConfig(c).Root
		for i := range args {
			if !filepath.IsAbs(args[i]) && root != "" {
				args[i] = filepath.Join(root, args[i])
			}
		}
		cfg, err := pkgtls.NewTLSConfigFromArgs(args...)
		if err != nil {
			return err
		}
		st.tlsConfig = cfg
	case "tls_servername":
		if !c.NextArg() {
			return c.ArgErr()
		}
		st.tlsServerName = c.Val()
	case "expire", "max_age", "read_timeout":
		return parseDuration(c, f)
	case "max_idle_conns":
		if !c.NextArg() {
			return c.ArgErr()
		}
		n, err := strconv.Atoi(c.Val())
		if err != nil {
			return err
		}
		if n < 0 {
			return fmt.Errorf("max_idle_conns can't be negative: %d", n)
		}
		st.maxIdleConns = n
	case "doh_method":
		if !c.NextArg() {
			return c.ArgErr()
		}
		switch c.Val() {
		case http.MethodPost, http.MethodGet:
			st.dohMethod = c.Val()
		default:
			return fmt.Errorf("doh_method must be either %s or %s", http.MethodPost, http.MethodGet)
		}
	case "policy":
		if !c.NextArg() {
			return c.ArgErr()
		}
		switch x := c.Val(); x {
		case "random":
			f.p = random{}
		case "round_robin":
			f.p = &roundRobin{}
		case "sequential":
			f.p = sequential{}
		default:
			return c.Errf("unknown policy '%s'", x)
		}
	case "max_concurrent":
		if !c.NextArg() {
			return c.ArgErr()
		}
		n, err := strconv.Atoi(c.Val())
		if err != nil {
			return err
		}
		if n < 0 {
			return fmt.Errorf("max_concurrent can't be negative: %d", n)
		}
		f.errLimitExceeded = errors.New("concurrent queries exceeded maximum " + c.Val())
		f.maxConcurrent = int64(n)
	case "next", "failover":
		return parseRcodes(c, f)
	case "next_on_nodata":
		if c.NextArg() {
			return c.ArgErr()
		}
		f.nextOnNodata = true
	case "failfast_all_unhealthy_upstreams":
		if len(c.RemainingArgs()) != 0 {
			return c.ArgErr()
		}
		f.failfastUnhealthyUpstreams = true
	case "resolver":
		args := c.RemainingArgs()
		if len(args) == 0 {
			return c.ArgErr()
		}
		for _, a := range args {
			host := a
			if h, _, err := net.SplitHostPort(a); err == nil {
				host = h
			}
			if net.ParseIP(host) == nil {
				return fmt.Errorf("resolver must be an IP address or IP:port: %q", a)
			}
		}
		// Only hostname upstreams use it, and those are refused.
	case "source_address":
		if !c.NextArg() {
			return c.ArgErr()
		}
		ip := net.ParseIP(c.Val())
		if ip == nil {
			return c.Errf("invalid IP address: %s", c.Val())
		}
		st.sourceAddress = ip
	default:
		return c.Errf("unknown property '%s'", c.Val())
	}
	return nil
}

func uintArg(c *caddy.Controller) (uint32, error) {
	if !c.NextArg() {
		return 0, c.ArgErr()
	}
	n, err := strconv.ParseUint(c.Val(), 10, 32)
	if err != nil {
		return 0, err
	}
	return uint32(n), nil
}

// parseDuration parses expire, max_age and read_timeout.
func parseDuration(c *caddy.Controller, f *Forward) error {
	opt := c.Val()
	if !c.NextArg() {
		return c.ArgErr()
	}
	dur, err := time.ParseDuration(c.Val())
	if err != nil {
		return err
	}
	switch opt {
	case "expire":
		if dur < 0 {
			return fmt.Errorf("expire can't be negative: %s", dur)
		}
		f.expire = dur
	case "max_age":
		if dur < 0 {
			return fmt.Errorf("max_age can't be negative: %s", dur)
		}
		f.maxAge = dur
	case "read_timeout":
		if dur <= 0 {
			return fmt.Errorf("read_timeout must be positive: %s", dur)
		}
		f.readTimeout = dur
	}
	return nil
}

// parseRcodes parses next and failover.
func parseRcodes(c *caddy.Controller, f *Forward) error {
	opt := c.Val()
	args := c.RemainingArgs()
	if len(args) == 0 {
		return c.ArgErr()
	}
	for _, s := range args {
		rc, ok := dns.StringToRcode[strings.ToUpper(s)]
		if !ok {
			return fmt.Errorf("%s is not a valid rcode", s)
		}
		if opt == "failover" {
			if rc == dns.RcodeSuccess {
				return fmt.Errorf("NoError cannot be used in failover")
			}
			f.failoverRcodes = append(f.failoverRcodes, rc)
		} else {
			f.nextAlternateRcodes = append(f.nextAlternateRcodes, rc)
		}
	}
	return nil
}
