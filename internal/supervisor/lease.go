package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"
)

// The lease decides which of two overlapping instances on a node manages the table and the interface.
//
// During a surge rollout the new pod starts while the old one still runs. Both serve DNS (their listeners use
// SO_REUSEPORT), but only one may reconcile the kernel, and the old one must not delete the table on SIGTERM
// while the new one depends on it. The lease is an abstract unix socket named after the interface: abstract
// sockets live in the network namespace, which every hostNetwork pod of the node shares, need no hostPath, and
// vanish when their owner dies, even by SIGKILL. The holder is the leader.
//
// A later instance that finds the name taken connects to it as a successor, once it serves DNS and before it
// says ready. The leader counts it and acknowledges (msgAck), so a successor that says ready is known to the
// leader: the kubelet stops the old pod only once the new one is ready, and the old one must then hand over
// (leave the table and interface in place) instead of tearing down. When the leader's socket closes, the
// successor takes the lease and reconciles.
//
// A successor that stops while still a successor (the DaemonSet deleted mid-rollout) says so (msgLeaving) and
// waits for the answer: msgKeep when the leader still owns the kernel state, msgYours when the leader already
// decided to hand over to it, in which case the successor takes the lease once the leader lets go and tears
// down as a leader would. The leader decides and answers under one mutex, so exactly one of them tears down.
const (
	msgAck     = 'a' // leader -> successor: counted
	msgLeaving = 'l' // successor -> leader: stopping
	msgKeep    = 'k' // leader -> successor: the kernel state stays mine
	msgYours   = 'y' // leader -> successor: already handed over; it is yours to tear down
	leaseAck   = 2 * time.Second
)

func leaseName(ifname string) string { return "@nodelocaldns/" + ifname }

// lease is the leader's side.
type lease struct {
	name string
	ln   *net.UnixListener

	mu         sync.Mutex
	successors map[*net.UnixConn]bool
	handedOver bool
}

// tryAcquireLease binds the lease; ok is false when another instance holds it.
func tryAcquireLease(name string) (l *lease, ok bool, err error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("bind lease %s: %w", name, err)
	}
	l = &lease{name: name, ln: ln, successors: map[*net.UnixConn]bool{}}
	go l.acceptSuccessors()
	return l, true, nil
}

// acceptSuccessors counts the instances waiting for this lease while their connections stay open.
func (l *lease) acceptSuccessors() {
	for {
		c, err := l.ln.AcceptUnix()
		if err != nil {
			return
		}
		go l.serveSuccessor(c)
	}
}

func (l *lease) serveSuccessor(c *net.UnixConn) {
	defer c.Close()
	l.mu.Lock()
	l.successors[c] = true
	l.mu.Unlock()
	if _, err := c.Write([]byte{msgAck}); err == nil {
		var b [1]byte
		for {
			if _, err := c.Read(b[:]); err != nil || b[0] == msgLeaving {
				break
			}
		}
	}
	l.mu.Lock()
	delete(l.successors, c)
	reply := byte(msgKeep)
	if l.handedOver && len(l.successors) == 0 {
		reply = msgYours
	}
	l.mu.Unlock()
	c.Write([]byte{reply}) // best effort: a successor that died does not read it
}

// handOver decides, once, whether the leader leaves the kernel state to a successor: true when one is serving.
func (l *lease) handOver() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.handedOver = len(l.successors) > 0
	return l.handedOver
}

// release closes the lease and every successor's connection, so a successor takes over at once.
func (l *lease) release() {
	l.ln.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.successors {
		c.Close()
	}
}

// follower is a successor's registration with the leader.
type follower struct {
	conn *net.UnixConn
	msgs chan byte // the leader's messages; closed when its connection closes
}

// follow registers with the current leader and returns once the leader has counted this instance. It fails
// with ECONNREFUSED when nobody holds the lease any more.
func follow(name string) (*follower, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return nil, err
	}
	c.SetReadDeadline(time.Now().Add(leaseAck))
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil || b[0] != msgAck {
		c.Close()
		return nil, fmt.Errorf("lease %s: no acknowledgement from the leader: %v", name, err)
	}
	c.SetReadDeadline(time.Time{})
	f := &follower{conn: c, msgs: make(chan byte, 1)}
	go func() {
		defer close(f.msgs)
		var b [1]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				return
			}
			f.msgs <- b[0]
		}
	}()
	return f, nil
}

// wait returns when the leader's connection closes (true) or ctx is done (false).
func (f *follower) wait(ctx context.Context) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case _, ok := <-f.msgs:
			if !ok {
				return true
			}
		}
	}
}

// leave tells the leader this successor stops and reports whether the leader had already handed over to it.
// When the leader is gone, whoever can take the lease is responsible: ok tells the caller to try.
func (f *follower) leave() (yours, leaderGone bool) {
	defer f.conn.Close()
	f.conn.Write([]byte{msgLeaving})
	timeout := time.After(leaseAck)
	for {
		select {
		case m, ok := <-f.msgs:
			switch {
			case !ok:
				return false, true
			case m == msgYours:
				return true, false
			case m == msgKeep:
				return false, false
			}
		case <-timeout:
			return false, false
		}
	}
}

// acquireLease takes the lease, retrying until the current holder lets go or ctx is done.
func acquireLease(ctx context.Context, name string) (*lease, error) {
	for {
		l, ok, err := tryAcquireLease(name)
		if err != nil || ok {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
