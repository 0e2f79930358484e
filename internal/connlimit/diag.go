package connlimit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel's socket table, through NETLINK_SOCK_DIAG (linux/inet_diag.h): the connections on a port, the
// kernel filtering by state and port, so that a pass costs one dump whatever else the process or the node
// holds; and SOCK_DESTROY, which resets one at once, accepted or still in a listener's queue.

// From linux/inet_diag.h (x/sys/unix has the message types, not these).
const (
	inetDiagReqBytecode = 1  // INET_DIAG_REQ_BYTECODE
	inetDiagInfo        = 2  // INET_DIAG_INFO: the socket's struct tcp_info
	inetDiagBcSEq       = 11 // INET_DIAG_BC_S_EQ (Linux 4.16)
	reqLen              = 56 // struct inet_diag_req_v2
	msgLen              = 72 // struct inet_diag_msg
	lastDataRecvOffset  = 52 // of tcpi_last_data_recv in struct tcp_info
)

// diagID is a socket's identity in the kernel's table (struct inet_diag_sockid), cookie included, so that a
// destroy can only reach the socket that was listed.
type diagID [48]byte

// established lists the established TCP sockets of family whose local port is port, in this network
// namespace, whoever holds them: those a listener's queue holds too (inode 0).
func established(family uint8, port uint16) ([]conn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("open sock_diag: %w", err)
	}
	defer unix.Close(fd)
	// One condition: local port == port; true jumps to the end (keep), false past it (drop).
	bc := []byte{inetDiagBcSEq, 8, 12, 0, 0, 0, 0, 0}
	binary.NativeEndian.PutUint16(bc[6:], port)
	req := make([]byte, unix.NLMSG_HDRLEN+reqLen+unix.SizeofRtAttr+len(bc))
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	r := req[unix.NLMSG_HDRLEN:]
	r[0], r[1], r[2] = family, unix.IPPROTO_TCP, 1<<(inetDiagInfo-1)
	binary.NativeEndian.PutUint32(r[4:], 1<<unix.BPF_TCP_ESTABLISHED)
	a := r[reqLen:]
	binary.NativeEndian.PutUint16(a[0:], uint16(unix.SizeofRtAttr+len(bc)))
	binary.NativeEndian.PutUint16(a[2:], inetDiagReqBytecode)
	copy(a[unix.SizeofRtAttr:], bc)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("ask sock_diag: %w", err)
	}
	var out []conn
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, fmt.Errorf("read sock_diag: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, fmt.Errorf("parse sock_diag: %w", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				return nil, fmt.Errorf("sock_diag dump: %w", nlError(m.Data))
			}
			if c, ok := parseMsg(m.Data); ok {
				out = append(out, c)
			}
		}
	}
}

func parseMsg(b []byte) (conn, bool) {
	if len(b) < msgLen {
		return conn{}, false
	}
	family := b[0]
	c := conn{family: family}
	copy(c.id[:], b[4:52])
	id := b[4:52]
	c.local = netip.AddrPortFrom(diagAddr(family, id[4:20]), binary.BigEndian.Uint16(id[0:]))
	c.remote = netip.AddrPortFrom(diagAddr(family, id[20:36]), binary.BigEndian.Uint16(id[2:]))
	c.inode = binary.NativeEndian.Uint32(b[68:])
	attrs, err := syscall.ParseNetlinkRouteAttr(&syscall.NetlinkMessage{Data: b[msgLen:]})
	if err == nil {
		for _, at := range attrs {
			if at.Attr.Type == inetDiagInfo && len(at.Value) >= lastDataRecvOffset+4 {
				c.idle = time.Duration(binary.NativeEndian.Uint32(at.Value[lastDataRecvOffset:])) * time.Millisecond
			}
		}
	}
	return c, c.local.IsValid() && c.remote.IsValid()
}

func diagAddr(family uint8, b []byte) netip.Addr {
	if family == unix.AF_INET {
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.AddrFrom16([16]byte(b)).Unmap()
}

// destroyer resets connections through one sock_diag socket, for one pass.
type destroyer struct{ fd int }

func newDestroyer() (*destroyer, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("open sock_diag: %w", err)
	}
	return &destroyer{fd: fd}, nil
}

func (d *destroyer) Close() error { return unix.Close(d.fd) }

// destroy resets c (SOCK_DESTROY: tcp_abort, so its holder's next read fails with ECONNABORTED and the
// client gets a reset). It needs CONFIG_INET_DIAG_DESTROY (EOPNOTSUPP without) and CAP_NET_ADMIN (EPERM).
// ENOENT: c is gone already.
func (d *destroyer) destroy(c conn) error {
	fd := d.fd
	req := make([]byte, unix.NLMSG_HDRLEN+reqLen)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.SOCK_DESTROY)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	r := req[unix.NLMSG_HDRLEN:]
	r[0], r[1] = c.family, unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(r[4:], ^uint32(0))
	copy(r[8:], c.id[:])
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("ask sock_diag: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return fmt.Errorf("read sock_diag: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil || len(msgs) == 0 || msgs[0].Header.Type != unix.NLMSG_ERROR {
		return fmt.Errorf("sock_diag destroy: unexpected answer")
	}
	return nlError(msgs[0].Data)
}

// nlError is the errno of an NLMSG_ERROR payload, nil for an acknowledgement.
func nlError(b []byte) error {
	if len(b) < 4 {
		return errors.New("short netlink error")
	}
	if e := int32(binary.NativeEndian.Uint32(b)); e != 0 {
		return unix.Errno(-e)
	}
	return nil
}
