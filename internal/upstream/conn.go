package upstream

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
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
	born   time.Time
	// renewAt is when the connection is replaced whatever its load; renewAfter is the number of queries after
	// which it is replaced once it is older than the pool's minimum age.
	renewAt    time.Time
	renewAfter uint64

	wmu  sync.Mutex // one writer at a time; wbuf is the frame being written
	wbuf []byte

	mu      sync.Mutex
	pending map[uint16]*query
	closed  bool

	inflight atomic.Int32
	sent     atomic.Uint64
	draining atomic.Bool
	dead     atomic.Bool
	beaten   atomic.Int32
	renewing atomic.Bool  // a replacement was asked for
	lastUsed atomic.Int64 // unix nanoseconds of the last send
}

func newConn(p *pool, nc net.Conn) *conn {
	now := time.Now()
	c := &conn{
		p: p, nc: nc, stream: p.stream, born: now,
		renewAt:    now.Add(jitter(p.opts.MaxAge)),
		renewAfter: p.opts.RenewQueries,
		pending:    make(map[uint16]*query, 16),
		wbuf:       make([]byte, 0, 512),
	}
	c.lastUsed.Store(now.UnixNano())
	return c
}

// jitter spreads d over [d/2, 3d/2), so that connections opened together are not renewed together.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d/2 + rand.N(d)
}

// live says the connection takes new queries.
func (c *conn) live() bool { return !c.dead.Load() && !c.draining.Load() }

// send registers q under a fresh ID and writes it. An error here means nothing was sent and nothing will be
// delivered for this attempt; a failure after registration is delivered to q as a result.
func (c *conn) send(q *query) (uint16, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, errClosed
	}
	id := uint16(rand.Uint32())
	for c.pending[id] != nil {
		id++
	}
	c.pending[id] = q
	c.inflight.Add(1)
	c.mu.Unlock()
	now := time.Now()
	c.lastUsed.Store(now.UnixNano())
	if c.sent.Add(1) >= c.renewAfter && c.renewAfter > 0 && now.Sub(c.born) >= c.p.opts.MinAge && c.renewing.CompareAndSwap(false, true) {
		c.p.replace()
	}

	c.wmu.Lock()
	b := c.wbuf[:0]
	if c.stream {
		b = binary.BigEndian.AppendUint16(b, uint16(len(q.wire)))
	}
	off := len(b)
	b = append(b, q.wire...)
	binary.BigEndian.PutUint16(b[off:], id)
	c.wbuf = b
	// A write blocks only when the peer stopped reading (its window is full): that is a dead pod, not a slow
	// one, and the bound keeps it from holding the query.
	_ = c.nc.SetWriteDeadline(time.Now().Add(maxDialBound))
	_, err := c.nc.Write(b)
	c.wmu.Unlock()
	if err != nil {
		c.die(err)
	}
	return id, nil
}

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
// must match too; over TCP the ID is enough (forward checks the question as CoreDNS does). The first answer for
// a query wins; later ones (its hedges) are dropped.
func (c *conn) deliver(msg []byte) {
	if len(msg) < headerLen {
		return
	}
	id := binary.BigEndian.Uint16(msg)
	c.mu.Lock()
	q := c.pending[id]
	if q == nil || (!c.stream && !q.sameQuestion(msg)) {
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

func (c *conn) readStream() {
	br := bufio.NewReaderSize(c.nc, readBufSize)
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
	buf := make([]byte, 65535)
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
