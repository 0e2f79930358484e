package listenlimit

import (
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/reuseport"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// The kernel contract internal/fastpath's TCP serving relies on: in a reuseport group where a listener with
// SO_INCOMING_CPU set stands for every CPU, a listener without it (CoreDNS's) gets no connection; beside
// the same listeners without the option it gets its share (the control: the group is one, and the steering is
// what keeps it out).
func TestSteeredListenersTakeEveryConnection(t *testing.T) {
	if !testenv.KernelAtLeast(6, 1) {
		t.Skip("SO_INCOMING_CPU steers within a reuseport group from Linux 6.1")
	}
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		t.Skip(err)
	}
	ncpu := 0
	for part := range strings.SplitSeq(strings.TrimSpace(string(b)), ",") {
		lo, hi, ok := strings.Cut(part, "-")
		a, _ := strconv.Atoi(lo)
		z := a
		if ok {
			z, _ = strconv.Atoi(hi)
		}
		ncpu += z - a + 1
	}
	pool := NewPool(Limits{PerSource: 1 << 20, Total: 1 << 20})
	run := func(t *testing.T, open func(addr string, cpu int) (net.Listener, error)) (plain, steered int64) {
		core, err := reuseport.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer core.Close()
		addr := core.Addr().String()
		var nPlain, nSteered atomic.Int64
		count := func(ln net.Listener, n *atomic.Int64) {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				n.Add(1)
				c.Close()
			}
		}
		go count(core, &nPlain)
		for cpu := range ncpu {
			ln, err := open(addr, cpu)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go count(ln, &nSteered)
		}
		const dials = 400
		done := make(chan struct{})
		for range 4 { // from goroutines the runtime spreads over the CPUs
			go func() {
				defer func() { done <- struct{}{} }()
				for range dials / 4 {
					c, err := net.Dial("tcp", addr)
					if err != nil {
						t.Error(err)
						return
					}
					buf := make([]byte, 1)
					c.Read(buf) // the server's close
					c.Close()
				}
			}()
		}
		for range 4 {
			<-done
		}
		return nPlain.Load(), nSteered.Load()
	}
	if plain, steered := run(t, pool.OpenSteered); plain != 0 {
		t.Errorf("with a steered listener for each of %d cpus, the plain listener accepted %d connections (steered: %d)", ncpu, plain, steered)
	}
	// The control: as many listeners without SO_INCOMING_CPU leave it a share (400 dials: none at all would
	// happen with odds below 1e-40 for two cpus).
	plainOpen := func(addr string, _ int) (net.Listener, error) { return pool.Open(addr) }
	if plain, others := run(t, plainOpen); plain == 0 {
		t.Errorf("with %d plain listeners beside it, the plain listener accepted none of %d: not one group", ncpu, others)
	}
}
