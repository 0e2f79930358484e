package dnsserver

import (
	"bytes"
	"net"
	"net/netip"
	"strconv"

	"github.com/coredns/caddy/caddyfile"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin/pkg/parse"
	"github.com/coredns/coredns/plugin/pkg/transport"
)

// selfForward finds the forwarding loop a Corefile states outright: a server block that binds an address and
// forwards its zone to that same address and port (the kube-dns variable set to the cache's own IP, or an
// upstream resolv.conf that names it). A query forwarded there comes back to the same block, every time, so
// the configuration is refused before it serves: the `loop` directive's probe would find it only once it runs,
// and the clients' queries sent in between go round until the previous configuration is back (more than a
// second on a busy node). Blocks without `bind` listen on every address and blocks with `view` may hand the
// query to another block: those are left to the probe. gen is the generation the configuration would have.
func selfForward(corefile []byte, path string, gen int) *LoopError {
	blocks, err := caddyfile.Parse(path, bytes.NewReader(corefile), nil)
	if err != nil {
		return nil // caddy reports it, with its context
	}
	for _, b := range blocks {
		if len(b.Keys) == 0 || len(b.Tokens["view"]) > 0 {
			continue
		}
		listen := blockListens(b)
		if len(listen) == 0 {
			continue
		}
		d := caddyfile.NewDispenserTokens(path, b.Tokens["forward"])
		for d.Next() {
			args := d.RemainingArgs()
			for d.NextBlock() {
			}
			if len(args) < 2 {
				continue
			}
			for _, to := range args[1:] {
				addrs, err := parse.HostPortOrFile(to)
				if err != nil {
					continue
				}
				for _, a := range addrs {
					if trans, hp := parse.Transport(a); trans == transport.DNS {
						if up, err := netip.ParseAddrPort(hp); err == nil && listen[netip.AddrPortFrom(up.Addr().Unmap(), up.Port())] {
							return &LoopError{Generation: gen, Zone: b.Keys[0], Addr: up.String(), Upstream: to}
						}
					}
				}
			}
		}
	}
	return nil
}

// blockListens is the set of plain-DNS addresses a server block binds: its `bind` IPs at its keys' port (53
// where a key names none). Interface names give none, and a block of another transport or of keys on several
// ports (each zone served on its own port: a forward to one of them may not come back) gives nothing.
func blockListens(b caddyfile.ServerBlock) map[netip.AddrPort]bool {
	port := ""
	for _, k := range b.Keys {
		trans, hp := parse.Transport(k)
		if trans != transport.DNS {
			return nil
		}
		p := dnsserver.Port
		if _, kp, err := net.SplitHostPort(hp); err == nil {
			p = kp
		}
		if port != "" && p != port {
			return nil
		}
		port = p
	}
	at, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil
	}
	listen := map[netip.AddrPort]bool{}
	d := caddyfile.NewDispenserTokens("", b.Tokens["bind"])
	for d.Next() {
		for _, h := range d.RemainingArgs() {
			if a, err := netip.ParseAddr(h); err == nil {
				listen[netip.AddrPortFrom(a.Unmap(), uint16(at))] = true
			}
		}
		for d.NextBlock() {
		}
	}
	return listen
}
