// Package sockholder says who holds a local address when binding it fails with "address already in use": the
// sockets bound to that port in this network namespace (from /proc/net/{tcp,tcp6,udp,udp6}) and, by their
// inode, the processes that have them open (from /proc/*/fd).
//
// With hostNetwork the agent shares the node's network namespace, so every socket on the node's ports is listed,
// but a pod without hostPID sees only its own processes: a holder outside the pod is named by its socket (uid
// and inode) and the command that finds it on the node, not by its process.
//
// May touch: /proc, read-only.
package sockholder

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// Explain returns err with the holders of the address it failed to bind added, when err is a bind's
// "address already in use"; any other err is returned as it is. The address comes from err's *net.OpError (as
// net.Listen and net.ListenPacket return it) or, where a caller flattened it into text (caddy starts CoreDNS's
// servers and wraps their errors with %v), from the text.
func Explain(err error) error {
	if err == nil {
		return nil
	}
	var op *net.OpError
	if errors.Is(err, syscall.EADDRINUSE) && errors.As(err, &op) && op.Addr != nil {
		if e := inUse(err, op.Net, op.Addr.String()); e != nil {
			return e
		}
	}
	if m := bindInUse.FindStringSubmatch(err.Error()); m != nil {
		if e := inUse(err, m[1], m[2]); e != nil {
			return e
		}
	}
	return err
}

// Describe says who holds the address a line of text (a log line, an error) says could not be bound, and ""
// when the text says no such thing.
func Describe(text string) string {
	m := bindInUse.FindStringSubmatch(text)
	if m == nil {
		return ""
	}
	if e := inUse(nil, m[1], m[2]); e != nil {
		return e.holders()
	}
	return ""
}

// bindInUse is how Go's net package words a failed bind: "listen tcp 169.254.20.10:53: bind: address already
// in use" (and "listen udp4 ...", "listen tcp :9253: ...").
var bindInUse = regexp.MustCompile(`listen (tcp|udp)[46]? (\S+): bind: address already in use`)

func inUse(err error, netw, addr string) *InUseError {
	host, p, serr := net.SplitHostPort(addr)
	port, perr := strconv.ParseUint(p, 10, 16)
	if serr != nil || perr != nil {
		return nil
	}
	ip := netip.IPv6Unspecified() // ":9253": every address
	if host != "" {
		if ip, serr = netip.ParseAddr(host); serr != nil {
			return nil
		}
	}
	proto := "tcp"
	if strings.HasPrefix(netw, "udp") {
		proto = "udp"
	}
	ap := netip.AddrPortFrom(ip.Unmap(), uint16(port))
	return &InUseError{Err: err, Proto: proto, Addr: ap, Holders: Find("/proc", proto, ap)}
}

// InUseError is a bind that failed because others hold the address.
type InUseError struct {
	Err     error
	Proto   string // tcp or udp
	Addr    netip.AddrPort
	Holders []Holder // empty when /proc/net showed none (the holder went in between)
}

func (e *InUseError) Unwrap() error { return e.Err }

func (e *InUseError) Error() string { return fmt.Sprintf("%v: %s", e.Err, e.holders()) }

// holders is the part of the message that names them.
func (e *InUseError) holders() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s port %d is held by ", e.Proto, e.Addr.Port())
	if len(e.Holders) == 0 {
		fmt.Fprintf(&b, "no socket listed in /proc/net/%s any more (it may have closed since)", e.Proto)
		return b.String()
	}
	hidden := false
	for i, h := range e.Holders {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(h.String())
		hidden = hidden || len(h.Procs) == 0
	}
	b.WriteString(" (a socket without SO_REUSEPORT, or another user's, keeps others off its port)")
	if hidden {
		ssFlag := "-ltnp"
		if e.Proto == "udp" {
			ssFlag = "-lunp"
		}
		fmt.Fprintf(&b, "; a process not shown is outside this pid namespace (a pod without hostPID sees only its own) or not readable: `ss %s 'sport = :%d'` on the node names it",
			ssFlag, e.Addr.Port())
	}
	return b.String()
}

// Holder is one socket bound to the port, and the processes that have it open.
type Holder struct {
	Local netip.AddrPort
	UID   int
	Inode uint64
	Procs []Proc // empty when no process visible here has it open
}

func (h Holder) String() string {
	who := fmt.Sprintf("a socket on %s (uid %d, inode %d)", h.Local, h.UID, h.Inode)
	if len(h.Procs) == 0 {
		return who + " of no process visible here"
	}
	var ps []string
	for _, p := range h.Procs {
		ps = append(ps, p.String())
	}
	return who + " of " + strings.Join(ps, ", ")
}

// Proc is a process that has a holder's socket open.
type Proc struct {
	PID  int
	Comm string
}

func (p Proc) String() string { return fmt.Sprintf("pid %d (%s)", p.PID, p.Comm) }
