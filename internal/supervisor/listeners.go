package supervisor

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
)

// checkListeners finds local IPs that no DNS listener is bound to, at start-up and after every reload. The
// interception gate only sees a socket bound to the address itself (nft.Gate): a Corefile whose servers
// listen on the wildcard address, or whose `bind` leaves an address out, serves, but nothing sent to that
// address from a pod is intercepted (it goes to kube-dns). Host-network clients' rules cannot be gated so; they
// are kept to the bound addresses (nft.Spec.Unbound), so an unbound address goes to kube-dns for them too: the
// ClusterIP through kube-proxy, the link-local address through the fallback. Some such addresses: a loud error
// and nodelocaldns_unbound_local_ip; all of them at start-up: start-up fails, since the agent would then
// intercept nothing at all while looking healthy.
func (s *Supervisor) checkListeners() error {
	if !s.opts.SetupNftables {
		return nil
	}
	unbound := unboundIPs(s.dns.Addrs(), s.opts.LocalIPs, s.opts.DNSPort)
	for _, ip := range s.opts.LocalIPs {
		s.m.UnboundLocalIP.WithLabelValues(ip.String()).Set(b2f(slices.Contains(unbound, ip)))
	}
	if len(unbound) == len(s.opts.LocalIPs) && !s.node.Serving() {
		return fmt.Errorf("no DNS listener is bound to any local IP (%v) on port %d: the Corefile's servers need `bind` "+
			"to them, the interception only takes queries for an address a listener is bound to", unbound, s.opts.DNSPort)
	}
	if !s.node.SetUnbound(unbound) {
		return nil
	}
	if len(unbound) > 0 {
		s.log.Error("no DNS listener bound to these local IPs: queries to them, from pods and host-network clients, are not intercepted and go to kube-dns (add them to `bind`)",
			zap.Stringers("ips", unbound), zap.Uint16("port", s.opts.DNSPort))
	} else {
		s.log.Info("a DNS listener is bound to every local IP again", zap.Stringers("ips", s.opts.LocalIPs))
	}
	if err := s.node.Rebind(); err != nil {
		setupError(s.m, metrics.ErrNftables)
		return err
	}
	return nil
}

// unboundIPs are those of local that no listener in addrs (host:port) is bound to on port, in local's order.
func unboundIPs(addrs []string, local []netip.Addr, port uint16) []netip.Addr {
	bound := map[netip.Addr]bool{}
	for _, a := range addrs {
		host, p, err := net.SplitHostPort(a)
		if err != nil || p != strconv.Itoa(int(port)) {
			continue
		}
		if ip, err := netip.ParseAddr(host); err == nil {
			bound[ip.Unmap()] = true
		}
	}
	var out []netip.Addr
	for _, ip := range local {
		if !bound[ip] {
			out = append(out, ip)
		}
	}
	return out
}
