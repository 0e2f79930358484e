package fastpath

import (
	"bytes"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/caddy/caddyfile"
	"github.com/coredns/coredns/core/dnsserver"

	"github.com/nodelocaldns/nodelocaldns/internal/dnscache"
)

// What the fast path knows of a CoreDNS instance, all through public API:
//   - its UDP listening addresses: caddy.Instance.Servers, each ServerListener's LocalAddr;
//   - the *dnsserver.Server behind each, and the caches of its blocks: our cache directive's setup installs
//     dnsserver.Config.UDPDecorateWriterFunc, which CoreDNS calls with the server in ServePacket
//     (dnscache.Servers);
//   - which plugins run before each cache: the block's Config.Handlers (view.go);
//   - CoreDNS's socket, to steer the kernel away from: among the process's own file descriptors (sockets.go).
// What cannot be read is pinned instead (coupling_test.go): the server-level options the fast path does not
// reproduce (proxy protocol, extra opcodes, views) come only from plugins our build does not compile in.

// announceWait bounds how long Sync waits for CoreDNS's servers to announce themselves: ServePacket runs in
// a goroutine caddy starts just before Start returns.
const announceWait = 2 * time.Second

// coreListener is one UDP listener of a CoreDNS instance.
type coreListener struct {
	addr   netip.AddrPort
	srv    *dnsserver.Server
	caches []*dnscache.Cache
	reason string // why the fast path cannot take it over; "" if it can
}

// coreListeners lists inst's UDP listeners.
func coreListeners(inst *caddy.Instance) []coreListener {
	servers := dnscache.ServersOf(inst)
	var announced map[string]*dnsserver.Server
	if servers != nil {
		announced = servers.Wait(announceWait)
	}
	var addrs []netip.AddrPort
	for _, sl := range inst.Servers() {
		if a, ok := sl.LocalAddr().(*net.UDPAddr); ok { // else a TCP listener
			addrs = append(addrs, netip.AddrPortFrom(a.AddrPort().Addr().Unmap(), a.AddrPort().Port()))
		}
	}
	explicit := explicitPorts(inst)
	var out []coreListener
	for _, addr := range addrs {
		cl := coreListener{addr: addr}
		key := serverKey(announced, addrs, explicit, addr)
		cl.srv = announced[key]
		switch {
		case !cl.addr.Addr().IsValid() || cl.addr.Addr().IsUnspecified():
			cl.reason = "wildcard address: answers need the destination address as their source"
		case cl.srv == nil:
			cl.reason = "no cache in its server blocks, or another plugin decorates its udp writer"
		case len(cl.srv.TsigSecret) > 0:
			cl.reason = "tsig secrets are configured"
		default:
			cl.caches = servers.Caches(key)
		}
		out = append(out, cl)
	}
	return out
}

// serverKey is the announced server's "host:port" for the listener on addr: the same; or, for a Corefile that
// asked the kernel for a port (":0", as tests do), the server on addr's host with port 0 when addr is the one
// listener on that host whose port no server block names (CoreDNS's Server does not say which port it got).
func serverKey(announced map[string]*dnsserver.Server, addrs []netip.AddrPort, explicit map[uint16]bool, addr netip.AddrPort) string {
	key := addr.String()
	if announced[key] != nil {
		return key
	}
	zero := netip.AddrPortFrom(addr.Addr(), 0).String()
	if announced[zero] == nil || explicit[addr.Port()] {
		return key
	}
	for _, a := range addrs {
		if a != addr && a.Addr() == addr.Addr() && !explicit[a.Port()] {
			return key // two candidates: neither is known to be the server's
		}
	}
	return zero
}

// explicitPorts are the ports inst's server blocks name in their keys ("example.net:5353"), read from its
// Corefile with caddy's parser.
func explicitPorts(inst *caddy.Instance) map[uint16]bool {
	ports := map[uint16]bool{}
	in := inst.Caddyfile()
	if in == nil {
		return ports
	}
	blocks, err := caddyfile.Parse(in.Path(), bytes.NewReader(in.Body()), nil)
	if err != nil {
		return ports
	}
	for _, b := range blocks {
		for _, k := range b.Keys {
			i := strings.LastIndexByte(k, ':')
			if i < 0 {
				continue
			}
			if p, err := strconv.ParseUint(k[i+1:], 10, 16); err == nil && p != 0 {
				ports[uint16(p)] = true
			}
		}
	}
	return ports
}
