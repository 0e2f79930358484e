package supervisor

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
)

// checkListeners finds local IPs that no DNS listener is bound to. The interception gate only sees a socket
// bound to the address itself (nft.Gate): a Corefile whose servers listen on the wildcard address serves, but
// nothing sent to our addresses from a pod is ever intercepted. Some such addresses: a loud error and
// nodelocaldns_unbound_local_ip; all of them: start-up fails, since the agent would then intercept nothing at
// all while looking healthy.
func (s *Supervisor) checkListeners() error {
	if !s.opts.SetupNftables {
		return nil
	}
	bound := map[netip.Addr]bool{}
	for _, a := range s.dns.Addrs() {
		host, port, err := net.SplitHostPort(a)
		if err != nil || port != strconv.Itoa(int(s.opts.DNSPort)) {
			continue
		}
		if ip, err := netip.ParseAddr(host); err == nil {
			bound[ip.Unmap()] = true
		}
	}
	var unbound []string
	for _, ip := range s.opts.LocalIPs {
		b := bound[ip]
		withMetrics(s.m, func(m *metrics.Metrics) { m.UnboundLocalIP.WithLabelValues(ip.String()).Set(b2f(!b)) })
		if !b {
			unbound = append(unbound, ip.String())
		}
	}
	switch {
	case len(unbound) == 0:
		return nil
	case len(unbound) == len(s.opts.LocalIPs):
		return fmt.Errorf("no DNS listener is bound to any local IP (%v) on port %d: the Corefile's servers need `bind` "+
			"to them, the interception only takes queries for an address a listener is bound to", unbound, s.opts.DNSPort)
	}
	s.log.Error("no DNS listener bound to these local IPs: queries to them are not intercepted and go to kube-dns (add them to `bind`)",
		zap.Strings("ips", unbound), zap.Uint16("port", s.opts.DNSPort))
	return nil
}
