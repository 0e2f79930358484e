package fastpath

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coredns/coredns/plugin/pkg/rcode"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/dnscache"
)

// packet is a datagram handed to CoreDNS.
type packet struct {
	addr net.UDPAddr
	raw  []byte
}

// missIdle is how long a miss worker waits for the next miss before it ends.
const missIdle = 2 * time.Second

// missIdleMax bounds the workers waiting for a miss; one that finds that many waiting ends instead. A reader
// starts a worker whenever none waits at that instant, so on a starved machine, where the workers that have
// answered are runnable but not yet running, a flood of misses starts one per datagram; without this bound each
// then waited missIdle: 880 idle workers on grown stacks in TestUpstreamOutageFlood beside the listeners' CPU
// hogs, the agent's peak RSS 3x its idle RSS. A busy server's misses must still find a worker waiting: its
// upstream's answers come back in bursts as large as the misses in flight, and each burst frees its workers
// together. At 2*batchSize, bench/serve's miss workload (about 100 misses in flight) ended workers after every
// burst and started 7,700 a second anew, for a fifth of its 37,000 misses a second, each growing its stack from
// 2 KiB three times in CoreDNS's chain: 7% of the agent's CPU. At 4*batchSize none starts in that storm, and
// the flood's peak RSS is unchanged (1.35-1.37x its idle RSS either way).
const missIdleMax = 4 * batchSize

// misses hands CoreDNS what the readers do not answer: each datagram goes to a worker goroutine, which unpacks
// it as miekg/dns's UDP server does (the same accept function and FORMERR/NOTIMP answers; the fast path serves
// no server with TSIG or a decorated writer, core.go) and calls the handler, CoreDNS's ServePacket's. Answers go
// out on the fast path's socket for that address.
//
// miekg/dns starts a goroutine per datagram. Its stack starts small and grows (copies) two or three times in
// CoreDNS's chain: 13% of the agent's CPU under the bench's miss workload, on top of the hand-off to the
// server's reader goroutine. A worker here waits for the next miss after answering, up to missIdle (and
// missIdleMax of them at once), so a busy server's misses run on stacks that have grown already, handed over
// in one channel send. Concurrency is unbounded, as with miekg/dns: a miss that waits on its upstream holds
// its worker, and the next one gets another.
type misses struct {
	handler dns.Handler
	out     *outbox      // sends the answers, from the listener's address (outbox.go)
	work    chan *packet // unbuffered: a send succeeds only when a worker waits for it

	idleFor time.Duration // missIdle
	idle    atomic.Int32  // workers waiting for a miss, or about to: missIdleMax at most
	workers atomic.Int32  // workers running

	mu     sync.Mutex // closed, and the workers' count with it
	closed bool
	quit   chan struct{}
	wg     sync.WaitGroup // the workers
}

func newMisses(out *net.UDPConn, send int, h dns.Handler) *misses {
	return &misses{handler: h, out: newOutbox(out, send), work: make(chan *packet), quit: make(chan struct{}), idleFor: missIdle}
}

// put hands a datagram to CoreDNS; it copies what CoreDNS reads of b (missRead bytes at most: a padded query
// holds no more memory than with CoreDNS alone while it waits for its answer). Once shut down, it drops it.
func (m *misses) put(b []byte, from netip.AddrPort) {
	a := from.Addr()
	p := &packet{addr: net.UDPAddr{IP: a.AsSlice(), Port: int(from.Port()), Zone: a.Zone()},
		raw: append([]byte(nil), b[:min(len(b), missRead)]...)}
	select {
	case m.work <- p:
		return
	default:
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.wg.Add(1)
	m.workers.Add(1)
	m.mu.Unlock()
	go m.worker(p)
}

func (m *misses) worker(p *packet) {
	defer m.wg.Done()
	defer m.workers.Add(-1)
	idle := time.NewTimer(m.idleFor)
	defer idle.Stop()
	for {
		m.serve(p)
		if m.idle.Add(1) > missIdleMax {
			m.idle.Add(-1)
			return
		}
		idle.Reset(m.idleFor)
		next := false
		select {
		case p = <-m.work:
			next = true
		case <-idle.C:
		case <-m.quit:
		}
		m.idle.Add(-1)
		if !next {
			return
		}
	}
}

// serve is miekg/dns's Server.serveDNS for one datagram: a message whose header does not parse is ignored
// (any reply could amplify), one the accept function rejects or that does not unpack is answered FORMERR (or
// NOTIMP) without its records, and the rest go to the handler.
func (m *misses) serve(p *packet) {
	b := p.raw
	if len(b) < 12 {
		return
	}
	w := &missWriter{out: m.out, addr: &p.addr, query: b}
	h := dns.Header{Id: binary.BigEndian.Uint16(b), Bits: binary.BigEndian.Uint16(b[2:]), Qdcount: binary.BigEndian.Uint16(b[4:]),
		Ancount: binary.BigEndian.Uint16(b[6:]), Nscount: binary.BigEndian.Uint16(b[8:]), Arcount: binary.BigEndian.Uint16(b[10:])}
	req := new(dns.Msg)
	action := dns.DefaultMsgAcceptFunc(h)
	switch action {
	case dns.MsgAccept:
		if req.Unpack(b) == nil {
			m.handler.ServeDNS(w, req)
			return
		}
		// What the failed unpack left in req (the question, if it read) is in the FORMERR answer, as with
		// miekg/dns.
	case dns.MsgReject, dns.MsgRejectNotImplemented:
		var hdr [12]byte // the header alone, its counts zero: the fields miekg/dns sets before the accept function
		copy(hdr[:4], b)
		req.Unpack(hdr[:])
	default: // MsgIgnore
		return
	}
	opcode := req.Opcode
	req.SetRcodeFormatError(req)
	req.Zero = false
	if action == dns.MsgRejectNotImplemented {
		req.Opcode, req.Rcode = opcode, dns.RcodeNotImplemented
	}
	req.Ns, req.Answer, req.Extra = nil, nil, nil
	w.WriteMsg(req)
}

// afterWorkers calls f once every worker has ended (after shutdown).
func (m *misses) afterWorkers(f func()) {
	go func() { m.wg.Wait(); f() }()
}

// shutdown stops taking misses and waits, until ctx ends, for the workers to answer what they hold.
func (m *misses) shutdown(ctx context.Context) {
	m.mu.Lock()
	if !m.closed {
		m.closed = true
		close(m.quit)
	}
	m.mu.Unlock()
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// missWriter is miekg/dns's UDP ResponseWriter for a datagram the fast path received: answers are sent to the
// sender from the listener's address, batched with other misses' answers (outbox.go). A write is queued, not
// sent, when it returns, so it reports no send error: as with the readers' answers, a datagram the kernel
// refuses is dropped.
type missWriter struct {
	out    *outbox
	addr   *net.UDPAddr
	query  []byte // the datagram answered, as it came
	closed bool
}

func (w *missWriter) LocalAddr() net.Addr  { return w.out.out.LocalAddr() }
func (w *missWriter) RemoteAddr() net.Addr { return w.addr }
func (w *missWriter) TsigStatus() error    { return nil }
func (w *missWriter) TsigTimersOnly(bool)  {}
func (w *missWriter) Hijack()              {}

func (w *missWriter) WriteMsg(m *dns.Msg) error {
	if w.closed {
		return errors.New("dns: WriteMsg called after Close")
	}
	data, err := m.Pack()
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

func (w *missWriter) Write(b []byte) (int, error) {
	if w.closed {
		return 0, errors.New("dns: Write called after Close")
	}
	w.out.write(b, w.addr)
	return len(b), nil
}

// Close only marks the writer: the socket is the listener's.
func (w *missWriter) Close() error {
	if w.closed {
		return errors.New("dns: connection already closed")
	}
	w.closed = true
	return nil
}

// ServeDNS is the miss workers' handler: CoreDNS's own (dnsserver.Server.ServePacket), and when the query is
// one the fast path could answer next time, a look at what our cache answered it from.
func (l *listener) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	v := l.view.Load()
	ctx := v.ctx
	if !probeable(r) {
		v.srv.ServeDNS(ctx, w, r)
		return
	}
	ctx, rep := dnscache.WithReport(ctx)
	cw := &capture{ResponseWriter: w}
	defer cw.release()
	v.srv.ServeDNS(ctx, cw, r)
	if rep.Hit == nil {
		return // forwarded, or answered by a plugin after the cache: nothing to learn
	}
	// The probe is made only now, when CoreDNS answered from its cache (a forwarded miss skips it: 3% of its
	// CPU), from the datagram as it came, since plugins may have changed r.
	if mw, ok := w.(*missWriter); ok {
		if pr := v.probe(w, mw.query); pr != nil {
			v.learn(pr, rep.Hit, cw)
		}
	}
}

// probe is a query the fast path may learn the answer to, as it was before CoreDNS saw it (plugins may change
// the request).
type probe struct {
	query  []byte // the query packed: what an identical datagram holds, ID aside
	qname  string
	reqLen int // the request size the prometheus plugin records
	series seriesKey
}

// probe returns the query in datagram (as it came, before any plugin) as the fast path keys it, or nil when its answer is not one to keep. The key is the
// query as miekg/dns packs it: a datagram that unpacks to the same message gets the same answer from CoreDNS,
// and one packed otherwise (a compression pointer in a query) only misses.
func (v *view) probe(w dns.ResponseWriter, datagram []byte) *probe {
	r := new(dns.Msg)
	if r.Unpack(datagram) != nil || !probeable(r) {
		return nil
	}
	q := r.Question[0]
	raw, err := r.Pack()
	if err != nil || len(raw) < 12 || len(raw) > maxQuery {
		return nil
	}
	state := request.Request{W: w, Req: r}
	family := "1"
	if state.Family() == 2 {
		family = "2"
	}
	return &probe{query: raw, qname: state.QName(), reqLen: r.Len(), series: seriesKey{server: v.srv.Addr, family: family,
		qtype: QTypeLabel(q.Qtype), do: state.Do()}}
}

// probeable says whether r is a query the fast path may learn the answer to.
func probeable(r *dns.Msg) bool {
	if r.Opcode != dns.OpcodeQuery || r.Response || len(r.Question) != 1 || r.IsTsig() != nil {
		return false
	}
	q := r.Question[0]
	return q.Qtype != dns.TypeDS && q.Qclass == dns.ClassINET // DS queries pick their block by the parent zone; other classes are rare
}

// learn stores what CoreDNS answered pr with, if it came fresh from an entry of a block the fast path serves,
// that entry is still the one the cache answers from, and CoreDNS answered pr from its cache before.
func (v *view) learn(pr *probe, hit *dnscache.Hit, cw *capture) {
	b := v.servable(hit.Cache)
	if b == nil || cw.writes != 1 || cw.err != nil || len(cw.data) > dnscache.MaxMsgBytes || !hit.Valid(v.now()) {
		return
	}
	if !v.store.admit(pr.query[2:]) {
		return // the first answer from the cache: stored the next time (store.admit)
	}
	ttls, _, ok := ttlOffsets(cw.data)
	if !ok {
		return
	}
	var m dns.Msg
	if m.Unpack(cw.data) != nil || m.Truncated {
		// Truncated: the prometheus plugin counted the whole message the cache wrote, which the answer no
		// longer holds. Left to CoreDNS (clients retry those over TCP anyway).
		return
	}
	var s *series
	if b.metrics != nil {
		sk := pr.series
		sk.rcode = rcode.ToString(m.Rcode)
		sk.zone = metricsZone(b.metrics.ZoneNames(), pr.qname)
		sk.plugin = b.afterMetrics
		s = v.series.get(sk)
	}
	// The message as the cache wrote it: the entry's records, no OPT (the server's scrubbing adds the query's),
	// and not compressed (a new dns.Msg; the scrubbing compresses large ones).
	m.Extra = slices.DeleteFunc(m.Extra, func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeOPT })
	m.Compress = false
	e := &entry{query: pr.query[2:], answer: append([]byte(nil), cw.data...), ttls: ttls, hit: hit, series: s,
		name: pr.qname, rcode: m.Rcode}
	if s != nil {
		e.sizeAt, e.reqAt = s.size.point(float64(m.Len())), s.reqSize.point(float64(pr.reqLen))
	}
	v.store.put(v.now(), e)
}

// capture is the ResponseWriter CoreDNS answers a probed query through: it packs as miekg/dns's does (no
// TSIG: probed queries have none) and keeps the bytes until release. It packs into a pooled buffer: the
// writer below copies what it sends, and learn copies what it keeps.
type capture struct {
	dns.ResponseWriter
	data   []byte
	writes int
	err    error
	buf    *[]byte // the pooled buffer WriteMsg packed into, if any
}

// packBufs are capture's buffers, as large as a UDP answer usually is (miekg/dns packs into a larger one
// when the message needs it).
var packBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1232); return &b }}

func (c *capture) WriteMsg(m *dns.Msg) error {
	if c.buf == nil {
		c.buf = packBufs.Get().(*[]byte)
	}
	data, err := m.PackBuffer((*c.buf)[:cap(*c.buf)])
	if err != nil {
		c.writes++
		c.err = err
		return err
	}
	_, err = c.Write(data)
	return err
}

// release returns the pooled buffer; data is not to be read after it.
func (c *capture) release() {
	if c.buf != nil {
		c.data = nil
		packBufs.Put(c.buf)
		c.buf = nil
	}
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
