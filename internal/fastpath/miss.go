package fastpath

import (
	"context"
	"encoding/binary"
	"hash/fnv"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin/cache"
	"github.com/coredns/coredns/plugin/pkg/rcode"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// packet is a datagram handed to CoreDNS. addr comes first: miekg/dns gives the handler back the address
// ReadFrom returned as the ResponseWriter's RemoteAddr, and the handler finds the raw query through it.
type packet struct {
	addr net.UDPAddr
	raw  []byte
}

// missConn is the PacketConn CoreDNS's requests are read from: the fast path's readers put what they do not
// answer in, and answers go out on the fast path's socket for that address.
type missConn struct {
	in     chan *packet
	out    *net.UDPConn
	closed chan struct{}
	once   sync.Once
}

func newMissConn(out *net.UDPConn) *missConn {
	return &missConn{in: make(chan *packet, 1024), out: out, closed: make(chan struct{})}
}

// put hands a datagram to CoreDNS; it copies what CoreDNS reads of b (missRead bytes at most: a padded query
// holds no more memory than with CoreDNS alone while it waits for its answer). It blocks while CoreDNS's reader
// is behind, like a socket buffer filling up, and drops the datagram once the conn is closed.
func (m *missConn) put(b []byte, from netip.AddrPort) {
	a := from.Addr()
	p := &packet{addr: net.UDPAddr{IP: a.AsSlice(), Port: int(from.Port()), Zone: a.Zone()},
		raw: append([]byte(nil), b[:min(len(b), missRead)]...)}
	select {
	case m.in <- p:
	case <-m.closed:
	}
}

func (m *missConn) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case p := <-m.in:
		return copy(b, p.raw), &p.addr, nil // a longer datagram is truncated, as recvfrom does
	case <-m.closed:
		return 0, nil, net.ErrClosed
	}
}

func (m *missConn) WriteTo(b []byte, addr net.Addr) (int, error) { return m.out.WriteTo(b, addr) }
func (m *missConn) Close() error                                 { m.once.Do(func() { close(m.closed) }); return nil }
func (m *missConn) LocalAddr() net.Addr                          { return m.out.LocalAddr() }
func (m *missConn) SetDeadline(t time.Time) error                { return m.SetReadDeadline(t) }
func (m *missConn) SetWriteDeadline(time.Time) error             { return nil }

// SetReadDeadline only honours a deadline in the past: miekg/dns's Shutdown unblocks its reader that way.
func (m *missConn) SetReadDeadline(t time.Time) error {
	if !t.IsZero() && t.Before(time.Now()) {
		m.Close()
	}
	return nil
}

// ServeDNS is the miss server's handler: CoreDNS's own (dnsserver.Server.ServePacket), and when the query is
// one the fast path could answer next time, a look at what CoreDNS answered.
func (l *listener) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	v := l.view.Load()
	ctx := context.WithValue(context.Background(), dnsserver.Key{}, v.srv)
	ctx = context.WithValue(ctx, dnsserver.LoopKey{}, 0)
	pr := v.probe(w, r)
	if pr == nil {
		v.srv.ServeDNS(ctx, w, r)
		return
	}
	cw := &capture{ResponseWriter: w}
	v.srv.ServeDNS(ctx, cw, r)
	v.learn(pr, cw)
}

// probe is a query the fast path may learn the answer to: CoreDNS is about to answer it from a cache item.
type probe struct {
	raw       []byte
	start     time.Time // before CoreDNS computed the answer's TTLs
	key       uint64
	item      unsafe.Pointer
	in, other *itemCache
	series    seriesKey
}

func (v *view) probe(w dns.ResponseWriter, r *dns.Msg) *probe {
	ra, ok := w.RemoteAddr().(*net.UDPAddr)
	if !ok {
		return nil
	}
	raw := (*packet)(unsafe.Pointer(ra)).raw
	if len(raw) < 12 || len(raw) > maxQuery || r.Opcode != dns.OpcodeQuery || r.Response || len(r.Question) != 1 ||
		r.IsTsig() != nil {
		return nil
	}
	q := r.Question[0]
	if q.Qtype == dns.TypeDS || q.Qclass != dns.ClassINET {
		return nil
	}
	b := v.blockFor(strings.ToLower(q.Name))
	if b == nil {
		return nil
	}
	state := request.Request{W: w, Req: r}
	pr := &probe{raw: raw, start: time.Now()}
	pr.key = cacheKey(state.Name(), q.Qtype, q.Qclass, state.Do(), r.CheckingDisabled)
	hitType := ""
	_, inN := b.cache.ncache.Get(pr.key)
	_, inP := b.cache.pcache.Get(pr.key)
	switch {
	case inN && !inP:
		pr.in, pr.other, hitType = b.cache.ncache, b.cache.pcache, cache.Denial
	case inP && !inN:
		pr.in, pr.other, hitType = b.cache.pcache, b.cache.ncache, cache.Success
	default:
		return nil // not cached: CoreDNS fetches it, and the next query learns the cache's answer
	}
	pr.item, _ = pr.in.Get(pr.key)
	family := "1"
	if state.Family() == 2 {
		family = "2"
	}
	pr.series = seriesKey{server: v.srv.Addr, family: family, qtype: qtypeLabel(q.Qtype), do: state.Do(),
		reqLen: r.Len(), cacheZones: b.cache.zonesLabel, cacheView: b.cache.view, hitType: hitType}
	if b.metrics != nil {
		pr.series.metrics = true
		pr.series.zone = metricsZone(b.metrics.ZoneNames(), state.QName())
		pr.series.plugin = b.afterMetrics
	}
	return pr
}

// learn stores what CoreDNS answered pr with, if it came from the item the probe saw and that item is still
// the cache's.
func (v *view) learn(pr *probe, cw *capture) {
	if cw.writes != 1 || cw.err != nil {
		return
	}
	if it, ok := pr.in.Get(pr.key); !ok || it != pr.item {
		return
	}
	if _, shadowed := pr.other.Get(pr.key); shadowed {
		return
	}
	ttls, ttl, ok := ttlOffsets(cw.data)
	if !ok || ttl == 0 {
		return
	}
	var m dns.Msg
	if m.Unpack(cw.data) != nil || m.Truncated {
		// Truncated: the prometheus plugin counted the whole message the cache wrote, which the answer no
		// longer holds. Left to CoreDNS (clients retry those over TCP anyway).
		return
	}
	sk := pr.series
	sk.rcode = rcode.ToString(m.Rcode)
	// The message as the cache wrote it: the item's records, no OPT (the server's scrubbing adds the query's),
	// and not compressed (a new dns.Msg; the scrubbing compresses large ones).
	m.Extra = slices.DeleteFunc(m.Extra, func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeOPT })
	m.Compress = false
	size := float64(m.Len())
	v.store.put(&entry{
		query: append([]byte(nil), pr.raw[2:]...), answer: append([]byte(nil), cw.data...), ttls: ttls, ttl: ttl,
		learned: pr.start, size: size, key: pr.key, item: pr.item, in: pr.in, other: pr.other, series: v.series.get(sk),
	})
}

// capture is the ResponseWriter CoreDNS answers a probed query through: it packs as miekg/dns's does (no
// TSIG: probed queries have none) and keeps the bytes.
type capture struct {
	dns.ResponseWriter
	data   []byte
	writes int
	err    error
}

func (c *capture) WriteMsg(m *dns.Msg) error {
	data, err := m.Pack()
	if err != nil {
		c.writes++
		c.err = err
		return err
	}
	_, err = c.Write(data)
	return err
}

func (c *capture) Write(b []byte) (int, error) {
	c.writes++
	c.data = b
	n, err := c.ResponseWriter.Write(b)
	if err != nil {
		c.err = err
	}
	return n, err
}

// cacheKey is the cache plugin's key for a question (plugin/cache/cache.go, hash): FNV-1 64 over the DO and CD
// bits as "1" or "0", the type and class big-endian, and the lower-cased name.
func cacheKey(name string, qtype, qclass uint16, do, cd bool) uint64 {
	h := fnv.New64()
	bit := func(b bool) []byte {
		if b {
			return []byte("1")
		}
		return []byte("0")
	}
	h.Write(bit(do))
	h.Write(bit(cd))
	var tc [4]byte
	binary.BigEndian.PutUint16(tc[:], qtype)
	binary.BigEndian.PutUint16(tc[2:], qclass)
	h.Write(tc[:])
	h.Write([]byte(name))
	return h.Sum64()
}

// ttlOffsets finds the TTL field of every RR in the packed message b but OPT's, and the smallest TTL.
func ttlOffsets(b []byte) ([]uint16, uint32, bool) {
	if len(b) < 12 {
		return nil, 0, false
	}
	off := 12
	qd := int(binary.BigEndian.Uint16(b[4:]))
	rrs := int(binary.BigEndian.Uint16(b[6:])) + int(binary.BigEndian.Uint16(b[8:])) + int(binary.BigEndian.Uint16(b[10:]))
	for range qd {
		if off = skipName(b, off); off < 0 || off+4 > len(b) {
			return nil, 0, false
		}
		off += 4
	}
	var offs []uint16
	least := ^uint32(0)
	for range rrs {
		if off = skipName(b, off); off < 0 || off+10 > len(b) {
			return nil, 0, false
		}
		if binary.BigEndian.Uint16(b[off:]) != dns.TypeOPT {
			offs = append(offs, uint16(off+4))
			least = min(least, binary.BigEndian.Uint32(b[off+4:]))
		}
		off += 10 + int(binary.BigEndian.Uint16(b[off+8:]))
	}
	if off != len(b) || len(offs) == 0 {
		return nil, 0, false
	}
	return offs, least, true
}

// skipName returns the offset after the (possibly compressed) name at off, or -1.
func skipName(b []byte, off int) int {
	for off < len(b) {
		l := int(b[off])
		switch {
		case l == 0:
			return off + 1
		case l&0xC0 == 0xC0:
			return off + 2
		case l&0xC0 != 0:
			return -1
		}
		off += 1 + l
	}
	return -1
}
