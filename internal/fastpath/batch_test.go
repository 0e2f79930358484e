package fastpath_test

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
)

// A burst from several clients that queues up while the reader is held (so it receives and answers it in
// batches) gets every query answered, to the client that sent it, with its own ID: hits and misses,
// interleaved. And the reader did receive it in batches.
func TestBurstsAreAnsweredPerSender(t *testing.T) {
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	up, p, addr := startLearnt(t, "burst.example.", func(next fastpath.HitFunc) fastpath.HitFunc {
		return func(q []byte, from netip.AddrPort, out []byte, now time.Time) ([]byte, *fastpath.Entry) {
			once.Do(func() { close(held); <-release })
			return next(q, from, out, now)
		}
	})
	hold, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	hold.Write(packed(t, "burst.example.", 1)) // the reader takes it and waits in the hook
	<-held
	calls0, got0 := p.Metrics().Received()

	const clients, perClient = 4, 32
	conns := make([]*net.UDPConn, clients)
	for c := range conns {
		conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetReadBuffer(1 << 20)
		conns[c] = conn
	}
	for i := range perClient {
		for c, conn := range conns {
			name := "burst.example." // a hit
			if i%8 == 7 {
				name = "miss" + string(rune('a'+c)) + string(rune('a'+i/8)) + ".example." // a miss
			}
			if _, err := conn.Write(packed(t, name, uint16(c<<8|i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(release)
	for c, conn := range conns {
		seen := map[uint16]bool{}
		buf := make([]byte, 512)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		for len(seen) < perClient {
			n, err := conn.Read(buf)
			if err != nil {
				t.Fatalf("client %d: %d of %d answers: %v", c, len(seen), perClient, err)
			}
			var m dns.Msg
			if err := m.Unpack(buf[:n]); err != nil || len(m.Answer) != 1 {
				t.Fatalf("client %d: answer %v (%v)", c, &m, err)
			}
			if int(m.Id>>8) != c || seen[m.Id] {
				t.Fatalf("client %d got the answer with ID %#x: not one of its own, or twice", c, m.Id)
			}
			seen[m.Id] = true
		}
	}
	if n := up.QueriesFor("burst.example."); n != 1 {
		t.Errorf("upstream saw %d queries for the hit, want 1", n)
	}
	calls, got := p.Metrics().Received()
	t.Logf("%d datagrams in %d receive calls", got-got0, calls-calls0)
	if calls -= calls0; got-got0 < 4*calls {
		t.Errorf("%d datagrams in %d receive calls, want batches (at least 4 a call on average)", got-got0, calls)
	}
}
