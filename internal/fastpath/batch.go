package fastpath

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"unsafe"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/clients"
)

// A reader receives with recvmmsg and sends its answers with sendmmsg: under load, one system call each way
// per batch of datagrams instead of one per datagram (receive and send were most of a hit's cost). It never
// waits to fill a batch: the socket is non-blocking, so recvmmsg returns what is queued, one datagram or
// batchSize, and the answers to a batch go out as soon as the batch is handled. An idle server's query costs
// the same two system calls as before.
const batchSize = 32

// missRead is how much of a datagram CoreDNS reads: its UDP server reads into buffers of miekg/dns's default
// UDPSize, and a longer datagram is truncated as recvfrom truncates it. A miss worker gets as much (miss.go),
// so a miss never holds more than CoreDNS alone would.
const missRead = dns.MinMsgSize

// slotSize is one receive buffer: one byte more than anything the fast path or CoreDNS reads, so that a longer
// datagram shows as longer than maxQuery (it is a miss) and CoreDNS gets exactly the bytes it would read itself.
const slotSize = max(maxQuery, missRead) + 1

// mmsghdr is struct mmsghdr (recvmmsg(2)); Go's alignment pads it as C does.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// batch is one reader's receive and send state, preallocated so that a batch does not allocate.
type batch struct {
	rc   syscall.RawConn
	send int      // the reader's send socket (sendSocket)
	m    *Metrics // counts the receive calls and their datagrams

	buf   [batchSize][slotSize]byte
	names [batchSize]unix.RawSockaddrInet6 // large enough for either family
	iov   [batchSize]unix.Iovec
	hdrs  [batchSize]mmsghdr

	out   [batchSize][]byte // answers built for the received datagrams, by slot; each grows as answers need
	siov  [batchSize]unix.Iovec
	shdrs [batchSize]mmsghdr
	nsend int

	answered answered // the entries the batch was answered from, whose metrics are recorded after the send

	clients *clients.Shard // the reader's per-client accounting, published after the send; nil when off
}

func newBatch(c *net.UDPConn, send int, m *Metrics) (*batch, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("raw socket: %w", err)
	}
	b := &batch{rc: rc, send: send, m: m}
	for i := range b.hdrs {
		b.iov[i].Base = &b.buf[i][0]
		b.iov[i].SetLen(slotSize)
		b.hdrs[i].hdr.Name = (*byte)(unsafe.Pointer(&b.names[i]))
		b.hdrs[i].hdr.Iov = &b.iov[i]
		b.hdrs[i].hdr.SetIovlen(1)
		b.out[i] = make([]byte, 0, 512)
	}
	return b, nil
}

// recv waits for at least one datagram and returns how many it received, at most batchSize.
func (b *batch) recv() (int, error) {
	b.reset()
	var n int
	var errno syscall.Errno
	err := b.rc.Read(func(fd uintptr) bool {
		r, e := mmsg(unix.SYS_RECVMMSG, fd, b.hdrs[:])
		if e == unix.EAGAIN {
			return false // the poller waits for the socket to be readable again
		}
		n, errno = r, e
		return true
	})
	return b.received(n, errno, err)
}

// recvQueued receives what is queued, without waiting and whatever the socket's read deadline: 0 when nothing
// is (the end of a reader's drain, listener.go).
func (b *batch) recvQueued() (int, error) {
	b.reset()
	var n int
	var errno syscall.Errno
	err := b.rc.Control(func(fd uintptr) { n, errno = mmsg(unix.SYS_RECVMMSG, fd, b.hdrs[:]) })
	if errno == unix.EAGAIN {
		return 0, nil
	}
	return b.received(n, errno, err)
}

func (b *batch) reset() {
	for i := range b.hdrs {
		b.hdrs[i].hdr.Namelen = unix.SizeofSockaddrInet6
		b.hdrs[i].hdr.Flags = 0
	}
}

// received counts a receive call's datagrams, or returns its error.
func (b *batch) received(n int, errno syscall.Errno, err error) (int, error) {
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, errno
	}
	b.m.receives.Add(1)
	b.m.received.Add(uint64(n))
	return n, nil
}

// datagram is the i-th datagram received and its sender.
func (b *batch) datagram(i int) ([]byte, netip.AddrPort) {
	q := b.buf[i][:b.hdrs[i].n]
	sa := &b.names[i]
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return q, netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port(&sa4.Port))
	case unix.AF_INET6:
		a := netip.AddrFrom16(sa.Addr)
		if sa.Scope_id != 0 {
			a = a.WithZone(strconv.FormatUint(uint64(sa.Scope_id), 10)) // net resolves a numeric zone
		}
		return q, netip.AddrPortFrom(a, port(&sa.Port))
	}
	return q, netip.AddrPort{}
}

// port reads a sockaddr's port, which is in network byte order.
func port(p *uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(p))
	return uint16(b[0])<<8 | uint16(b[1])
}

// queue sends answer to the sender of the i-th datagram with the batch's next flush. answer must stay as it is
// until then (it is b.out[i], or memory that lives as long).
func (b *batch) queue(i int, answer []byte) {
	if len(answer) == 0 {
		return
	}
	k := b.nsend
	b.siov[k].Base = &answer[0]
	b.siov[k].SetLen(len(answer))
	b.shdrs[k].hdr = unix.Msghdr{Name: b.hdrs[i].hdr.Name, Namelen: b.hdrs[i].hdr.Namelen, Iov: &b.siov[k]}
	b.shdrs[k].hdr.SetIovlen(1)
	b.nsend++
}

// flush sends what was queued, on the send socket; when its buffer is full, the rest waits for the receiving
// socket's (in the runtime's poller) and goes out there. As with CoreDNS's UDP server, a failed write is not
// retried: sendmmsg stops at a message it cannot send, which is then skipped.
func (b *batch) flush() {
	sent, _ := sendQueued(b.send, b.shdrs[:b.nsend])
	for sent < b.nsend {
		var n int
		var errno syscall.Errno
		err := b.rc.Write(func(fd uintptr) bool {
			r, e := mmsg(unix.SYS_SENDMMSG, fd, b.shdrs[sent:b.nsend])
			if e == unix.EAGAIN {
				return false
			}
			n, errno = r, e
			return true
		})
		switch {
		case err != nil:
			sent = b.nsend // the socket is closed: nothing more goes out
		case errno != 0 || n == 0:
			sent++ // the first message failed: drop it, send the rest
		default:
			sent += n
		}
	}
	b.nsend = 0
}

// sendQueued sends hdrs on the non-blocking socket fd, with as few sendmmsg calls as the kernel takes them in,
// until its buffer is full. It returns how many messages it handled (sent, or dropped: sendmmsg stops at a
// message it cannot send, which is then skipped, as CoreDNS's UDP server does not retry a failed write either)
// and the calls it made; the rest wait for the caller's fallback.
func sendQueued(fd int, hdrs []mmsghdr) (handled, calls int) {
	for handled < len(hdrs) {
		n, errno := mmsg(unix.SYS_SENDMMSG, uintptr(fd), hdrs[handled:])
		calls++
		if errno == unix.EAGAIN {
			break
		}
		if errno != 0 || n == 0 {
			n = 1 // the first message failed: drop it, send the rest
		}
		handled += n
	}
	return handled, calls
}

// sendSocket opens the socket a reader of c sends its answers on: bound to c's address (SO_REUSEPORT) and
// connected to it, as internal/handover detaches a socket, so that the kernel's reuseport selection never
// gives it a datagram; not in the runtime's poller; non-blocking. Answers sent on c itself each woke the
// poller's registration of c for EPOLLOUT when the kernel freed the datagram (sock_wfree): about 3% of the
// agent's CPU per cache hit in a perf profile of the bench. From here they leave with c's source address.
func sendSocket(c *net.UDPConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	var sa unix.Sockaddr
	var serr error
	if err := rc.Control(func(fd uintptr) { sa, serr = unix.Getsockname(int(fd)) }); err != nil {
		return -1, err
	}
	if serr != nil {
		return -1, fmt.Errorf("own address: %w", serr)
	}
	family := unix.AF_INET
	if _, ok := sa.(*unix.SockaddrInet6); ok {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("send socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("send socket: SO_REUSEPORT: %w", err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("send socket: bind: %w", err)
	}
	if err := unix.Connect(fd, sa); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("send socket: connect to its own address: %w", err)
	}
	return fd, nil
}

// mmsg is recvmmsg or sendmmsg on hdrs, retried when a signal interrupts it.
//
// It is a raw system call, without the runtime's entersyscall/exitsyscall: the socket is non-blocking, so the
// call never waits, it only works (tens of microseconds for a batch of 32 on loopback), and the goroutine keeps
// its P throughout. Through syscall.Syscall6, a sendmmsg that ran longer than sysmon's 20 µs tick had its P
// retaken and handed off, which kept sysmon waking every 20 µs under load: 3.4% of the agent's CPU per cache
// hit in a perf profile of the bench, and the handoffs' scheduling on top.
func mmsg(trap, fd uintptr, hdrs []mmsghdr) (int, syscall.Errno) {
	for {
		r, _, e := unix.RawSyscall6(trap, fd, uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), 0, 0, 0)
		if e != unix.EINTR {
			return int(r), e
		}
	}
}

// errClosed reports whether err is the socket closing under a reader.
func errClosed(err error) bool { return errors.Is(err, net.ErrClosed) }
