package fastpath

import (
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// outbox sends the miss workers' answers as the readers send theirs: several per sendmmsg. A miss's answer is
// queued, and the worker that finds no send under way sends it along with every answer queued meanwhile; the
// others return at once. Before it, each answer was a sendto of its own, the largest single cost of a miss in
// the bench's miss workload (17% of the agent's CPU in a CPU profile): the system call, the runtime's
// entersyscall/exitsyscall around it, and a wake-up of the client per datagram. Answers come back from an
// upstream in bursts (one read of a TCP connection delivers several), so their workers are runnable together;
// the sender yields once before its first send so that theirs join it, as the upstream transport's writer does
// for queries. With nothing else runnable the yield returns at once: an idle server's miss is not delayed.
//
// Answers leave in the order they were queued. A message the kernel refuses is dropped and the rest sent, as
// the readers' flush does (CoreDNS's UDP server does not retry a failed write either).
type outbox struct {
	send int          // the send socket (batch.go's sendSocket)
	out  *net.UDPConn // the listener's socket, for what the send socket's full buffer refuses

	mu      sync.Mutex
	queued  answers
	sending bool

	calls atomic.Uint64 // sendmmsg calls made

	// The sender's alone (sending is true while it uses them).
	spare answers
	iov   []unix.Iovec
	hdrs  []mmsghdr
}

// answers are queued datagrams: their bytes back to back, and each one's length and destination.
type answers struct {
	data []byte
	msgs []queuedAnswer
}

type queuedAnswer struct {
	end  int // its end in data; it starts where the one before ends
	to   *net.UDPAddr
	name unix.RawSockaddrInet6 // to as a sockaddr (either family)
	nlen uint32
}

// maxOutboxBuf bounds the buffers an outbox keeps between bursts: a larger one, grown by a burst of large
// answers, is let go.
const maxOutboxBuf = 256 << 10

func newOutbox(out *net.UDPConn, send int) *outbox {
	return &outbox{send: send, out: out}
}

// write queues b (copied) for to, and sends the queue unless another worker already is.
func (o *outbox) write(b []byte, to *net.UDPAddr) {
	if len(b) == 0 {
		return
	}
	name, nlen := rawSockaddr(to)
	o.mu.Lock()
	o.queued.data = append(o.queued.data, b...)
	o.queued.msgs = append(o.queued.msgs, queuedAnswer{end: len(o.queued.data), to: to, name: name, nlen: nlen})
	if o.sending {
		o.mu.Unlock() // the sender under way takes it along
		return
	}
	o.sending = true
	o.mu.Unlock()
	runtime.Gosched() // the workers already runnable queue theirs first
	o.mu.Lock()
	for len(o.queued.msgs) > 0 {
		batch := o.queued
		o.queued = o.spare
		o.mu.Unlock()
		o.flush(batch)
		o.mu.Lock()
		if cap(batch.data) > maxOutboxBuf {
			batch = answers{}
		}
		o.spare = answers{data: batch.data[:0], msgs: batch.msgs[:0]}
	}
	o.sending = false
	o.mu.Unlock()
}

// flush sends a batch on the send socket, batchSize datagrams per call; what its full buffer refuses goes out
// on the listener's socket, which waits in the runtime's poller.
func (o *outbox) flush(a answers) {
	start := 0
	for i := 0; i < len(a.msgs); {
		n := min(len(a.msgs)-i, batchSize)
		hdrs := o.headers(a, i, n, start)
		sent, calls := sendQueued(o.send, hdrs)
		o.calls.Add(uint64(calls))
		for j := i + sent; j < i+n; j++ {
			_, _ = o.out.WriteTo(a.bytes(j), a.msgs[j].to)
		}
		start = a.msgs[i+n-1].end
		i += n
	}
}

// headers points the send headers at a's n datagrams from the i-th, which starts at start in a.data.
func (o *outbox) headers(a answers, i, n, start int) []mmsghdr {
	if cap(o.hdrs) < n {
		o.hdrs = make([]mmsghdr, batchSize)
		o.iov = make([]unix.Iovec, batchSize)
	}
	hdrs, iov := o.hdrs[:n], o.iov[:n]
	for k := range n {
		m := &a.msgs[i+k]
		iov[k].Base = &a.data[start]
		iov[k].SetLen(m.end - start)
		hdrs[k] = mmsghdr{hdr: unix.Msghdr{Name: (*byte)(unsafe.Pointer(&m.name)), Namelen: m.nlen, Iov: &iov[k]}}
		hdrs[k].hdr.SetIovlen(1)
		start = m.end
	}
	return hdrs
}

// bytes is the j-th datagram of a.
func (a answers) bytes(j int) []byte {
	start := 0
	if j > 0 {
		start = a.msgs[j-1].end
	}
	return a.data[start:a.msgs[j].end]
}

// rawSockaddr is to as the kernel takes it. An IPv6 zone is the interface's number as the readers name it
// (batch.datagram); a name is looked up.
func rawSockaddr(to *net.UDPAddr) (unix.RawSockaddrInet6, uint32) {
	var sa unix.RawSockaddrInet6
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	p[0], p[1] = byte(to.Port>>8), byte(to.Port) // network byte order
	if ip4 := to.IP.To4(); ip4 != nil {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&sa))
		sa4.Family = unix.AF_INET
		sa4.Addr = [4]byte(ip4)
		return sa, unix.SizeofSockaddrInet4
	}
	sa.Family = unix.AF_INET6
	copy(sa.Addr[:], to.IP.To16())
	if to.Zone != "" {
		if n, err := strconv.ParseUint(to.Zone, 10, 32); err == nil {
			sa.Scope_id = uint32(n)
		} else if ifi, err := net.InterfaceByName(to.Zone); err == nil {
			sa.Scope_id = uint32(ifi.Index) // #nosec G115 -- an interface index
		}
	}
	return sa, unix.SizeofSockaddrInet6
}
