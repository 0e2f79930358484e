package upstream

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"
)

// errClosed says a connection was closed before the query could be sent on it.
var errClosed = errors.New("upstream: connection closed")

// errBeaten says a connection was taken out because other connections kept answering its queries first.
var errBeaten = errors.New("upstream: connection silent while others answered")

// beatenLimit is how many hedges in a row another connection may win, while this one answers nothing, before
// this one is taken as dead. A live but busy pod answers between hedges and resets the count.
const beatenLimit = 2

// readBufSize is a TCP connection's read buffer: answers are read in as few calls as the kernel allows, and an
// answer that fits is matched straight from it.
const readBufSize = 16 << 10

// conn is one flow to the upstream: a TCP stream (answers framed by a length prefix) or a connected UDP socket.
// Several queries are in flight on it at once, each under an ID unique on the connection.
type conn struct {
	p      *pool
	nc     net.Conn
	stream bool
	born   int64 // unix nanoseconds

	// Frames are written by whichever sender finds no write under way: the others append theirs to wbuf and
	// return, and the writer takes them along in its next write (one system call, one segment, for a burst of
	// queries). wdeadline is the write deadline last set: a write blocks only when the peer stopped reading
	// (its window is full), a dead pod rather than a slow one, and the deadline ends it; it is moved only when
	// half of it is used up, not on every write (each move is a timer update in the runtime's poller).
	wmu       sync.Mutex
	wbuf      []byte
	wspare    []byte
	writing   bool
	wdeadline int64

	mu      sync.Mutex
	pending map[uint16]*query
	closed  bool

	inflight atomic.Int32
	draining atomic.Bool
	dead     atomic.Bool
	beaten   atomic.Int32
	renewing atomic.Bool  // a replacement was asked for
	lastUsed atomic.Int64 // unix nanoseconds of the last send
}

func newConn(p *pool, nc net.Conn, now int64) *conn {
	c := &conn{
		p: p, nc: nc, stream: p.stream, born: now,
		pending: make(map[uint16]*query, 16),
		wbuf:    make([]byte, 0, 512),
		wspare:  make([]byte, 0, 512),
	}
	c.lastUsed.Store(now)
	return c
}

// jitter spreads d over [d/2, 3d/2), so that renewals do not fall in step.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d/2 + rand.N(d)
}

// live says the connection takes new queries.
func (c *conn) live() bool { return !c.dead.Load() && !c.draining.Load() }

// send registers q under a fresh ID and writes it (now is the time of the send, unix nanoseconds). It returns
// the ID and how many queries were in flight on the connection before this one. An error here means nothing was
// sent and nothing will be delivered for this attempt; a failure after registration is delivered to q as a
// result.
func (c *conn) send(q *query, now int64) (uint16, int32, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, 0, errClosed
	}
	id := uint16(rand.Uint32())
	for c.pending[id] != nil {
		id++
	}
	c.pending[id] = q
	ahead := c.inflight.Add(1) - 1
	c.mu.Unlock()
	c.lastUsed.Store(now)
	if !c.stream {
		return id, ahead, c.sendDatagram(q, id)
	}

	c.wmu.Lock()
	b := binary.BigEndian.AppendUint16(c.wbuf, uint16(len(q.wire)))
	off := len(b)
	b = append(b, q.wire...)
	binary.BigEndian.PutUint16(b[off:], id)
	c.wbuf = b
	if c.writing {
		c.wmu.Unlock() // the writer under way takes it along
		return id, ahead, nil
	}
	c.writing = true
	// Let the goroutines already runnable (the other misses of the batch the fast path just received) run up to
	// their own send first: theirs join this write. With none runnable it returns at once.
	c.wmu.Unlock()
	runtime.Gosched()
	c.wmu.Lock()
	for len(c.wbuf) > 0 {
		out := c.wbuf
		c.wbuf = c.wspare[:0]
		if now > c.wdeadline-int64(maxDialBound/2) {
			c.wdeadline = now + int64(maxDialBound)
			_ = c.nc.SetWriteDeadline(time.Unix(0, c.wdeadline))
		}
		c.wmu.Unlock()
		_, err := c.nc.Write(out)
		c.p.u.m.Writes.Add(1)
		c.wmu.Lock()
		if cap(out) <= maxKeptBuf {
			c.wspare = out[:0]
		}
		if err != nil {
			c.writing = false
			c.wbuf = c.wbuf[:0]
			c.wmu.Unlock()
			c.die(err)
			return id, ahead, nil
		}
	}
	c.writing = false
	c.wmu.Unlock()
	return id, ahead, nil
}

// sendDatagram writes q as a datagram of its own under id. The query's own buffer carries the ID: its attempts
// are sent one after the other by its own goroutine, and the kernel has copied each before the next.
func (c *conn) sendDatagram(q *query, id uint16) error {
	binary.BigEndian.PutUint16(q.wire, id)
	_, err := c.nc.Write(q.wire)
	c.p.u.m.Writes.Add(1)
	if err != nil {
		c.die(err)
	}
	return nil
}

// maxKeptBuf bounds the write buffers a connection keeps for reuse: a burst's larger one is let go.
const maxKeptBuf = 64 << 10

// forget drops q's attempt id if it is still pending (the query was answered elsewhere or gave up), and closes
// a draining connection once nothing is left in flight.
func (c *conn) forget(id uint16, q *query) {
	c.mu.Lock()
	if c.pending[id] == q {
		delete(c.pending, id)
		c.inflight.Add(-1)
	}
	idle := len(c.pending) == 0
	c.mu.Unlock()
	if idle && c.draining.Load() {
		c.retire()
	}
}

// deliver hands an answer to the query its ID names. Over UDP, where anyone can send to our port, the question
// must match too, and a datagram without the QR bit is a query, not an answer (a socket connected to its own
// address reads back what it sent); over TCP the ID is enough (forward checks the rest as CoreDNS does). The
// first answer for a query wins; later ones (its hedges) are dropped.
func (c *conn) deliver(msg []byte) {
	if len(msg) < headerLen {
		return
	}
	id := binary.BigEndian.Uint16(msg)
	c.mu.Lock()
	q := c.pending[id]
	if q == nil || (!c.stream && (msg[2]&0x80 == 0 || !q.sameQuestion(msg))) {
		c.mu.Unlock()
		return
	}
	delete(c.pending, id)
	c.inflight.Add(-1)
	if q.won.CompareAndSwap(false, true) {
		q.ans = append(q.ans[:0], msg...)
		q.ch <- result{c: c} // never blocks: one slot per attempt
	}
	idle := len(c.pending) == 0
	c.mu.Unlock()
	c.beaten.Store(0)
	if idle && c.draining.Load() {
		c.retire()
	}
}

// beat records that another connection answered first a query this one still holds. After beatenLimit such
// hedges in a row, with no answer here between them, the connection is taken as dead.
func (c *conn) beat() {
	if c.beaten.Add(1) >= beatenLimit {
		c.die(errBeaten)
	}
}

// die takes the connection out at its first sign of death: every query it held gets the error at once (and is
// retried elsewhere by its sender), and the pool replaces it.
func (c *conn) die(err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.dead.Store(true)
	for _, q := range c.pending {
		q.ch <- result{c: c, err: err}
	}
	c.pending = nil
	c.inflight.Store(0)
	c.mu.Unlock()
	_ = c.nc.Close()
	c.p.remove(c, true)
}

// drain stops new queries on the connection and closes it once those in flight are answered, or after
// drainLimit with some still unanswered (the pod went silent meanwhile): the limit is a timer armed here, by the
// renewal or the expiry that drains it.
func (c *conn) drain() {
	if c.startDrain() {
		c.forget(0, nil) // closes it now if nothing is in flight
	}
}

// startDrain marks the connection draining and arms its limit; false if it already was. The caller closes it
// if nothing is in flight (forget), outside any lock of the pool's.
func (c *conn) startDrain() bool {
	if !c.draining.CompareAndSwap(false, true) {
		return false
	}
	// The timer holds the connection weakly: a connection drained under load is retired within a round trip,
	// and a strong hold kept it, its buffers, its map and its socket, on the heap for drainLimit after that
	// (hundreds of them in a miss storm, with a renewal every few queries, for every GC cycle to mark). A
	// stopped timer is no help: the runtime drops it from its heap only lazily.
	w := weak.Make(c)
	time.AfterFunc(drainLimit, func() {
		if c := w.Value(); c != nil {
			c.die(errDrainSilent)
		}
	})
	return true
}

// errDrainSilent says a draining connection still held unanswered queries after drainLimit.
var errDrainSilent = errors.New("upstream: draining connection still silent")

// drainLimit bounds how long a draining connection may keep queries unanswered: forward's whole budget.
const drainLimit = 5 * time.Second

// retire closes a drained connection: nothing is in flight and nothing new is sent on it.
func (c *conn) retire() {
	c.mu.Lock()
	if c.closed || len(c.pending) != 0 {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.dead.Store(true)
	c.mu.Unlock()
	// Nothing is in flight: close with a reset instead of a FIN, so that renewing a connection every few
	// queries leaves no TIME_WAIT socket (and no port) behind on the node.
	if tc, ok := c.nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.nc.Close()
	c.p.remove(c, false)
}

// read is the connection's reader goroutine: it matches answers to queries until the connection fails.
func (c *conn) read() {
	if c.stream {
		c.readStream()
	} else {
		c.readDatagrams()
	}
}

// Readers' buffers are pooled: connections are renewed every few queries, and each would otherwise allocate its
// own.
var (
	streamReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}
	datagramBufs  = sync.Pool{New: func() any { b := make([]byte, 65535); return &b }}
)

func (c *conn) readStream() {
	br := streamReaders.Get().(*bufio.Reader)
	br.Reset(c.nc)
	defer func() {
		br.Reset(nil)
		streamReaders.Put(br)
	}()
	var big []byte
	for {
		hdr, err := br.Peek(2)
		if err != nil {
			c.die(readErr(err))
			return
		}
		n := int(binary.BigEndian.Uint16(hdr))
		_, _ = br.Discard(2)
		if n <= readBufSize {
			msg, err := br.Peek(n)
			if err != nil {
				c.die(readErr(err))
				return
			}
			c.deliver(msg)
			_, _ = br.Discard(n)
			continue
		}
		if cap(big) < n {
			big = make([]byte, n)
		}
		if _, err := io.ReadFull(br, big[:n]); err != nil {
			c.die(readErr(err))
			return
		}
		c.deliver(big[:n])
	}
}

func (c *conn) readDatagrams() {
	bp := datagramBufs.Get().(*[]byte)
	defer datagramBufs.Put(bp)
	buf := *bp
	for {
		n, err := c.nc.Read(buf)
		if err != nil {
			// A connected UDP socket reports an ICMP port or host unreachable as ECONNREFUSED on the next read:
			// the far end is gone. Anything else (the socket closed) ends the reader too.
			c.die(readErr(err))
			return
		}
		c.deliver(buf[:n])
	}
}

// readErr names EOF for what it is on a DNS connection: the upstream closed it.
func readErr(err error) error {
	if errors.Is(err, io.EOF) {
		return errors.New("upstream: connection closed by the upstream")
	}
	return err
}
