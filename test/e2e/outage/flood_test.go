package outage

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// flood sends queries for unique names under zone to server at rate queries a second from a few UDP sockets
// until ctx ends, without waiting for answers (a flood does not wait), and counts the answers by rcode.
type flood struct {
	sent    atomic.Int64
	mu      sync.Mutex
	answers map[int]int // rcode -> count
}

func (f *flood) run(ctx context.Context, server, zone string, rate int) error {
	const sockets = 4
	const tick = 10 * time.Millisecond
	perTick := max(1, rate*int(tick)/int(time.Second)/sockets)
	f.answers = map[int]int{}
	var wg sync.WaitGroup
	errs := make(chan error, sockets)
	for s := range sockets {
		conn, err := net.Dial("udp", server)
		if err != nil {
			return fmt.Errorf("dial %s: %w", server, err)
		}
		wg.Add(2)
		go func() { defer wg.Done(); f.read(conn) }()
		go func() {
			defer wg.Done()
			defer conn.Close()
			t := time.NewTicker(tick)
			defer t.Stop()
			m := new(dns.Msg)
			for n := 0; ; {
				select {
				case <-ctx.Done():
					// Leave the readers a moment for late answers before the close ends them.
					time.Sleep(200 * time.Millisecond)
					return
				case <-t.C:
				}
				for range perTick {
					n++
					m.SetQuestion(fmt.Sprintf("u%d-%d.flood.%s", s, n, zone), dns.TypeA)
					m.Id = uint16(n)
					buf, err := m.Pack()
					if err == nil {
						_, err = conn.Write(buf)
					}
					if err != nil && ctx.Err() == nil {
						errs <- fmt.Errorf("send: %w", err)
						return
					}
					f.sent.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (f *flood) read(conn net.Conn) {
	buf := make([]byte, 1500)
	var m dns.Msg
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return // closed when the flood ends
		}
		if m.Unpack(buf[:n]) != nil {
			continue
		}
		f.mu.Lock()
		f.answers[m.Rcode]++
		f.mu.Unlock()
	}
}

// summary is "sent N, answered: NOERROR a, SERVFAIL b, ...".
func (f *flood) summary() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := fmt.Sprintf("sent %d, answered:", f.sent.Load())
	for rc := range 24 {
		if c := f.answers[rc]; c > 0 {
			s += fmt.Sprintf(" %s %d", dns.RcodeToString[rc], c)
		}
	}
	return s
}
