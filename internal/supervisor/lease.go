package supervisor

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// The lease decides which of two overlapping instances on a node manages the table and the interface.
//
// During a surge rollout the new pod starts while the old one still runs. Both serve DNS (their listeners use
// SO_REUSEPORT), but only one may reconcile the kernel, and the old one must not delete the table on SIGTERM
// while the new one depends on it. The lease is an abstract unix socket named after the interface: abstract
// sockets live in the network namespace, which every hostNetwork pod of the node shares, need no hostPath, and
// vanish when their owner dies, even by SIGKILL. The holder is the leader. A later instance that finds the name
// taken connects to it and waits: the open connection tells the leader that a successor serves, so on SIGTERM
// the leader hands over (leaves table and interface in place) instead of tearing down; when the leader's
// socket closes, the successor takes the lease and reconciles.
type lease struct {
	name       string
	ln         *net.UnixListener
	successors atomic.Int32
}

func leaseName(ifname string) string { return "@nodelocaldns/" + ifname }

// tryAcquireLease binds the lease; ok is false when another instance holds it.
func tryAcquireLease(name string) (l *lease, ok bool, err error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	l = &lease{name: name, ln: ln}
	go l.acceptSuccessors()
	return l, true, nil
}

// acceptSuccessors counts the instances waiting for this lease while their connections stay open.
func (l *lease) acceptSuccessors() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.successors.Add(1)
		go func() {
			defer l.successors.Add(-1)
			defer c.Close()
			var b [1]byte
			c.Read(b[:]) // returns when the successor goes away
		}()
	}
}

// hasSuccessor reports whether another instance is serving and waiting to take over.
func (l *lease) hasSuccessor() bool { return l.successors.Load() > 0 }

func (l *lease) release() { l.ln.Close() }

// waitForLease registers as successor with the current holder and returns the lease once the holder is gone.
func waitForLease(ctx context.Context, name string) (*lease, error) {
	for {
		if l, ok, err := tryAcquireLease(name); err != nil || ok {
			return l, err
		}
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: name, Net: "unix"})
		if err == nil {
			stop := context.AfterFunc(ctx, func() { c.Close() })
			var b [1]byte
			c.Read(b[:]) // blocks until the leader's socket closes (or ctx is done)
			stop()
			c.Close()
			if ctx.Err() == nil {
				continue // the leader is gone: take the lease at once
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
