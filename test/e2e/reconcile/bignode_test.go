package reconcile

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// The big node: next to 25,000 foreign chains (kube-proxy's nftables mode with ~6k
// Services) and 128 keep-alive clients (each from an address of its own) looping on /ready, as any pod on the
// node can, the agent still repairs
// its interface within a second, /health stays 200 and no liveness failure is counted. Before /ready answered
// from memory and our listings named our own chains, each /ready dumped every chain under the one nftables
// lock: passes queued behind the probes for seconds.
func TestBigNode(t *testing.T) {
	const (
		foreign   = 25_000
		clients   = 128
		repairs   = 5
		repairMax = time.Second
	)
	testenv.RequireRoot(t)
	var b strings.Builder
	b.WriteString("add table ip big-node\n")
	for i := range foreign {
		fmt.Fprintf(&b, "add chain ip big-node svc-%d\n", i)
	}
	testenv.NftApply(t, b.String())
	t.Cleanup(func() { exec.Command("nft", "delete", "table", "ip", "big-node").Run() })
	a := StartAgent(t)
	liveBefore, _ := a.Metric(`nodelocaldns_liveness_failures_total{reason="dns"}`)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var readies, readyErrs atomic.Int64
	for i := range clients {
		wg.Go(func() {
			// Each client is a pod of its own: a source address of its own (127.0.0.2 on), as the health
			// listener bounds connections per source.
			src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i))}
			c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1,
				DialContext: (&net.Dialer{LocalAddr: src}).DialContext}}
			for ctx.Err() == nil {
				resp, err := c.Get("http://" + LocalIP + ":8080/ready")
				if err != nil {
					readyErrs.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				readies.Add(1)
			}
		})
	}
	var healthBad, healthExcused atomic.Int64
	var healthLast atomic.Value
	var down atomic.Int64 // the address is off while this is odd: a probe then meets no route, not the agent
	wg.Go(func() {        // the kubelet: one /health every 200 ms, on a fresh connection, with its 2 s timeout
		c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		for ctx.Err() == nil {
			before := down.Load()
			resp, err := c.Get("http://" + LocalIP + ":8080/health")
			switch {
			case before%2 == 1 || down.Load() != before:
				// The agent's own DNS probe may have met the missing address too, and counted a liveness
				// failure that this /health reported: excused below as well.
				if err != nil || resp.StatusCode != http.StatusOK {
					healthExcused.Add(1)
				}
			case err != nil:
				healthBad.Add(1)
				healthLast.Store(err.Error())
			case resp.StatusCode != http.StatusOK:
				healthBad.Add(1)
				healthLast.Store(resp.Status)
			}
			if resp != nil {
				resp.Body.Close()
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	time.Sleep(500 * time.Millisecond) // the clients at full speed
	var worst time.Duration
	for i := range repairs {
		down.Add(1)
		if out, err := exec.Command("ip", "addr", "del", LocalIP+"/32", "dev", LinkName).CombinedOutput(); err != nil {
			t.Fatalf("ip addr del: %v %s", err, out)
		}
		deleted := time.Now()
		for !hasAddr(LocalIP) {
			if time.Since(deleted) > 10*time.Second {
				t.Fatalf("repair %d: %s not back after 10 s", i, LocalIP)
			}
			time.Sleep(5 * time.Millisecond)
		}
		worst = max(worst, time.Since(deleted))
		down.Add(1)
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	liveAfter, _ := a.Metric(`nodelocaldns_liveness_failures_total{reason="dns"}`)
	t.Logf("%d foreign chains, %d /ready clients: %d answers (%d errors), slowest of %d repairs %v, %d bad /health (%d more while the address was gone)",
		foreign, clients, readies.Load(), readyErrs.Load(), repairs, worst, healthBad.Load(), healthExcused.Load())
	if worst > repairMax {
		t.Errorf("slowest interface repair %v, want under %v", worst, repairMax)
	}
	if n := healthBad.Load(); n > 0 {
		t.Errorf("%d /health probes failed (last: %v), want none", n, healthLast.Load())
	}
	// Only this test's loop asks for /health, and every liveness failure answers one /health with an error: the
	// failures outside the address's gaps are those the loop did not excuse.
	if d := liveAfter - liveBefore; d > float64(healthExcused.Load()) {
		t.Errorf("liveness failures went from %v to %v, %d of them while the address was gone, want no others",
			liveBefore, liveAfter, healthExcused.Load())
	}
	if readies.Load() == 0 {
		t.Error("no /ready answered at all")
	}
}

func hasAddr(ip string) bool {
	out, err := exec.Command("ip", "-o", "addr", "show", "dev", LinkName).Output()
	return err == nil && strings.Contains(string(out), " "+ip+"/32 ")
}
