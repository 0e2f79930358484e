// Package selfquery asks this process's own DNS listener one query over TCP: /health's proof that CoreDNS's
// server accepts, reads, dispatches and writes, told apart from another instance's listener on the same
// address during a surge (SO_REUSEPORT) by who holds the far end of the connection ([sockholder.PeerOwner]).
//
// May touch: the TCP connections it dials to our own DNS listener.
package selfquery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/sockholder"
)

// Ask sends one message with no question to addr over TCP, and says whether this process's own listener
// answered within timeout. Any answer proves that CoreDNS's server
// accepts, reads, dispatches and writes (it answers without consulting a plugin or an upstream, so the probe
// depends on nothing outside this process).
//
// Only an answer from this process's own listener counts. During a surge another instance listens on addr too
// (SO_REUSEPORT) and the kernel hands each new connection to either; counting the other's answer (or its
// silence, when it is the wedged one) is the cross-talk the kubelet's probes avoid by the health socket. So
// attempts, each a new connection and so a new draw from the group, start probeStagger apart, and at once
// after one the other instance answered or that failed without timing out (a reload resets the connections
// the old servers held); the first answer from our own listener ends the probe. Alone on the node, the first
// attempt is the only one.
func Ask(addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	results := make(chan error, probeAttempts)
	launched, pending := 0, 0
	launch := func() bool {
		if launched == probeAttempts {
			return false
		}
		launched++
		pending++
		go func() { results <- exchangeOwnTCP(ctx, addr) }()
		return true
	}
	launch()
	tick := time.NewTicker(probeStagger)
	defer tick.Stop()
	var last error
	for {
		select {
		case err := <-results:
			pending--
			if err == nil {
				return nil
			}
			last = err
			if ctx.Err() == nil && !isTimeout(err) && !launch() && pending == 0 {
				return last
			}
		case <-tick.C:
			launch()
		case <-ctx.Done():
			if last == nil || !isTimeout(last) {
				last = fmt.Errorf("dns listener %s does not answer over tcp: no answer from this process's listener within %v (%d connections): %w",
					addr, timeout, launched, context.DeadlineExceeded)
			}
			return last
		}
	}
}

// Attempts of one query (Ask): with two instances on the node, each lands on ours with even odds, so all
// eight miss it once in 256 probes, and the kubelet, which needs two failures in a row, kills a healthy
// instance beside a wedged one about once in 65,000 probe pairs; the wedged one is killed within 15 s.
const (
	probeAttempts = 8
	probeStagger  = 100 * time.Millisecond
)

// errNotOurs is an answer from another instance's listener on the shared address.
var errNotOurs = errors.New("answered by another process's listener (another instance on the node)")

// exchangeOwnTCP sends the probe on a new connection and says whether our own listener answered it.
func exchangeOwnTCP(ctx context.Context, addr string) error {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("dns listener %s does not answer over tcp: %w", addr, err)
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	m := new(dns.Msg)
	m.Id = dns.Id()
	co := &dns.Conn{Conn: nc}
	if err := co.WriteMsg(m); err != nil {
		return fmt.Errorf("dns listener %s does not answer over tcp: %w", addr, err)
	}
	r, err := co.ReadMsg()
	switch {
	case err != nil:
		return fmt.Errorf("dns listener %s does not answer over tcp: %w", addr, err)
	case r.Id != m.Id:
		return fmt.Errorf("dns listener %s answered another query (id %d, want %d)", addr, r.Id, m.Id)
	}
	// The listener that answered has accepted the connection: its socket is open in whichever process has it,
	// unless that process closed it since. Only a process proved to hold it is another's (sockholder.PeerOwner):
	// a far end closed at once after answering is a stopping server's, ours during a reload (the old servers
	// close what they accepted), which must never count against us; the other instance's only while it stops,
	// when its answer still says the node's DNS is served.
	switch o, err := sockholder.PeerOwner(nc); {
	case err != nil:
		return fmt.Errorf("dns listener %s: %w", addr, err)
	case o == sockholder.OwnerOther:
		return fmt.Errorf("dns listener %s: %w", addr, errNotOurs)
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
