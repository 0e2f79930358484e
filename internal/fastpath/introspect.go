package fastpath

import (
	"net"
	"net/netip"
	"reflect"
	"unsafe"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin/cache"
	pkgcache "github.com/coredns/coredns/plugin/pkg/cache"
)

// Reading CoreDNS's internals. CoreDNS gives an embedder no handle on its servers, their sockets, their server
// blocks or the cache plugin's caches, and the fast path needs all four: the server to hand misses to, the
// socket to steer the kernel away from, the blocks to know which plugins run before the cache, and the caches
// to serve only what the cache plugin still holds. They are read here, by field name, from the CoreDNS version
// in go.mod; introspect_test.go pins every field, so an upgrade that renames one fails the tests instead of
// silently turning the fast path off (every reader fails closed: a field it cannot read means "step aside").

// coreListener is one UDP listener of a CoreDNS instance.
type coreListener struct {
	addr   netip.AddrPort
	srv    *dnsserver.Server
	conn   *net.UDPConn
	reason string // why the fast path cannot take it over; "" if it can
}

// coreListeners lists inst's UDP listeners (caddy.ServerListener's unexported server and packet fields).
func coreListeners(inst *caddy.Instance) []coreListener {
	sls := inst.Servers()
	var out []coreListener
	for i := range sls {
		v := reflect.ValueOf(&sls[i]).Elem()
		pv, sv := v.FieldByName("packet"), v.FieldByName("server")
		if !pv.IsValid() || !sv.IsValid() || pv.Kind() != reflect.Interface || sv.Kind() != reflect.Interface ||
			pv.IsNil() || sv.IsNil() {
			continue // a TCP listener, or a caddy we cannot read
		}
		var cl coreListener
		if a, ok := sls[i].LocalAddr().(*net.UDPAddr); ok {
			cl.addr = a.AddrPort()
		}
		srv, ok := pointerAs[dnsserver.Server](sv.Elem())
		conn, cok := pointerAs[net.UDPConn](pv.Elem())
		switch {
		case !ok:
			cl.reason = "not a dns server"
		case !cok:
			cl.reason = "not a plain UDP socket (proxy protocol?)"
		case !cl.addr.IsValid() || cl.addr.Addr().IsUnspecified():
			cl.reason = "wildcard address: answers need the destination address as their source"
		default:
			cl.reason = serverReason(srv)
		}
		cl.srv, cl.conn = srv, conn
		out = append(out, cl)
	}
	return out
}

// pointerAs returns v's pointer if v (possibly read through unexported fields) is a *T.
func pointerAs[T any](v reflect.Value) (*T, bool) {
	if v.Kind() != reflect.Pointer || v.Type() != reflect.TypeFor[*T]() || v.IsNil() {
		return nil, false
	}
	return (*T)(v.UnsafePointer()), true
}

// serverReason says why the fast path cannot reproduce srv's UDP server, or "".
func serverReason(srv *dnsserver.Server) string {
	v := reflect.ValueOf(srv).Elem()
	for _, f := range []string{"connPolicy", "udpDecorateWriterFunc"} {
		fv := v.FieldByName(f)
		if !fv.IsValid() || fv.Kind() != reflect.Func {
			return "unknown coredns server layout"
		}
		if !fv.IsNil() {
			return "the server decorates its UDP traffic (" + f + ")"
		}
	}
	if ops := v.FieldByName("allowedOpcodes"); !ops.IsValid() || ops.Kind() != reflect.Map || ops.Len() > 0 {
		return "the server accepts opcodes beyond QUERY"
	}
	if len(srv.TsigSecret) > 0 {
		return "tsig secrets are configured"
	}
	if _, ok := serverZones(srv); !ok {
		return "unknown coredns server layout"
	}
	return ""
}

// serverZones is srv.zones: its server blocks by zone.
func serverZones(srv *dnsserver.Server) (map[string][]*dnsserver.Config, bool) {
	f := reflect.ValueOf(srv).Elem().FieldByName("zones")
	if !f.IsValid() || f.Type() != reflect.TypeFor[map[string][]*dnsserver.Config]() {
		return nil, false
	}
	return *(*map[string][]*dnsserver.Config)(unsafe.Pointer(f.UnsafeAddr())), true
}

// itemCache is the cache plugin's *cache.Cache[*item] seen with its element as an opaque pointer: the fast path
// only asks which item a key maps to, and compares pointers. Both instantiations have the same GC shape (one
// pointer element), so they share their code and layout.
type itemCache = pkgcache.Cache[unsafe.Pointer]

// cacheSettings is what the fast path reads of a cache plugin.
type cacheSettings struct {
	pcache, ncache   *itemCache
	pcap, ncap       int
	prefetch         int64
	staleUpTo        int64
	keepTTL          bool
	zonesLabel, view string
}

func readCache(c *cache.Cache) (cacheSettings, bool) {
	v := reflect.ValueOf(c).Elem()
	var s cacheSettings
	ok := true
	ptr := func(name string) *itemCache {
		f := v.FieldByName(name)
		if !f.IsValid() || f.Kind() != reflect.Pointer || f.IsNil() ||
			f.Type().Elem().PkgPath() != reflect.TypeFor[itemCache]().PkgPath() ||
			f.Type().Elem().Size() != reflect.TypeFor[itemCache]().Size() {
			ok = false
			return nil
		}
		return (*itemCache)(f.UnsafePointer())
	}
	num := func(name string) int64 {
		f := v.FieldByName(name)
		if !f.IsValid() || (f.Kind() != reflect.Int && f.Kind() != reflect.Int64) {
			ok = false
			return 0
		}
		return f.Int()
	}
	str := func(name string) string {
		f := v.FieldByName(name)
		if !f.IsValid() || f.Kind() != reflect.String {
			ok = false
			return ""
		}
		return f.String()
	}
	s.pcache, s.ncache = ptr("pcache"), ptr("ncache")
	s.pcap, s.ncap = int(num("pcap")), int(num("ncap"))
	s.prefetch, s.staleUpTo = num("prefetch"), num("staleUpTo")
	s.zonesLabel, s.view = str("zonesMetricLabel"), str("viewMetricLabel")
	if f := v.FieldByName("keepttl"); f.IsValid() && f.Kind() == reflect.Bool {
		s.keepTTL = f.Bool()
	} else {
		ok = false
	}
	return s, ok
}
