package listeners

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

const (
	// floodRate is ten times the rate that failed 2 of 20 probes of the node's /health when it was first measured (about 50
	// idle connections a second from one pod).
	floodRate = 500
	floodFor  = 6 * time.Second
	// floodConns is what the flood opens to each port before the probes stop: floodRate for floodFor. A busy
	// machine dials slower; the flood then lasts longer (up to floodBound), never fewer connections.
	floodConns = floodRate * int64(floodFor/time.Second)
	floodBound = 5 * floodFor
	probeGap   = 200 * time.Millisecond
)

// holdIdle opens rate TCP connections a second from the pod to addr until opened reaches target, sends nothing
// on them and keeps them open (a connection the server drops stays dropped) until ctx ends, then closes them
// all. It counts in opened how many connected (a reset that beat connect's return counts: the handshake was
// made). The dials come from floodWorkers threads inside the pod's namespace, each at its share of the rate,
// so that one slow dial does not slow the flood.
func holdIdle(ctx context.Context, t *testing.T, from *testenv.Peer, addr string, rate int, opened *atomic.Int64, target int64) {
	var failed atomic.Int64
	defer func() { t.Logf("flood of %s: %d dials failed", addr, failed.Load()) }()
	var wg sync.WaitGroup
	for range floodWorkers {
		wg.Go(func() {
			from.Do(t, func() { // every socket is opened on this thread, inside the pod's namespace
				tick := time.NewTicker(time.Second * floodWorkers / time.Duration(rate))
				defer tick.Stop()
				var conns []net.Conn
				defer func() {
					for _, c := range conns {
						c.Close()
					}
				}()
				for {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
					if opened.Load() >= target {
						continue // hold what is open until the probes are done
					}
					c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
					switch {
					case err == nil:
						conns = append(conns, c)
						opened.Add(1)
					case errors.Is(err, syscall.ECONNRESET):
						opened.Add(1) // the server accepted it and reset it before connect returned
					default:
						failed.Add(1)
					}
				}
			})
		})
	}
	wg.Wait()
}

const floodWorkers = 8

// TestProbesUnderPodFlood: a pod opens 500 idle TCP connections a second to the health port (169.254.20.10:8080)
// and as many to the metrics port, 3,000 to each (6 s at that rate; longer on a busy machine). Meanwhile the node runs the shipped liveness and readiness probes,
// the standard manifest's HTTP probe of /health on 169.254.20.10:8080, and a Prometheus scrape, every 200 ms:
// none may fail. With the first-come-first-served bounds before (32 health, 8 metrics connections), 2 of 20
// /health probes failed at 50 connections a second.
func TestProbesUnderPodFlood(t *testing.T) {
	testenv.RequireRoot(t)
	n := harness.NewNode(t)
	metricsPort := harness.FreePort(t)
	p := startPod(t, "-metrics-listen-address", "0.0.0.0:"+metricsPort)
	p.WaitReady()
	for _, pr := range []struct {
		name string
		run  func() error
	}{{"liveness", func() error { return p.probe(p.ctr.LivenessProbe) }}, {"standard", func() error { return standardHealth(context.Background()) }}} {
		if err := pr.run(); err != nil {
			t.Fatalf("%s probe before the flood: %v", pr.name, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), floodBound)
	defer cancel()
	var wg sync.WaitGroup
	var healthConns, metricsConns atomic.Int64
	wg.Go(func() {
		holdIdle(ctx, t, n.Pod, net.JoinHostPort(harness.LocalIP, "8080"), floodRate, &healthConns, floodConns)
	})
	wg.Go(func() {
		holdIdle(ctx, t, n.Pod, net.JoinHostPort(harness.LocalIP, metricsPort), floodRate, &metricsConns, floodConns)
	})
	flooded := func() bool { return healthConns.Load() >= floodConns && metricsConns.Load() >= floodConns }
	started := time.Now()
	time.Sleep(time.Second) // the flood is under way

	checks := []struct {
		name string
		run  func() error
	}{
		{"shipped liveness probe", func() error { return p.probe(p.ctr.LivenessProbe) }},
		{"shipped readiness probe", func() error { return p.probe(p.ctr.ReadinessProbe) }},
		{"standard manifest's /health on " + harness.LocalIP + ":8080", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return standardHealth(ctx)
		}},
		{"scrape of :" + metricsPort, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return httpProbe(ctx, "http://127.0.0.1:"+metricsPort+"/metrics")
		}},
	}
	failed, runs := make([]int, len(checks)), 0
	for ctx.Err() == nil && !flooded() {
		var cw sync.WaitGroup
		for i, c := range checks {
			cw.Go(func() {
				if err := c.run(); err != nil {
					failed[i]++
					t.Logf("%s: %v", c.name, err)
				}
			})
		}
		cw.Wait()
		runs++
		time.Sleep(probeGap)
	}
	took := time.Since(started)
	cancel()
	wg.Wait()
	t.Logf("the pod connected %d times to the health port and %d times to the metrics port in %v", healthConns.Load(), metricsConns.Load(), took.Round(100*time.Millisecond))
	for i, c := range checks {
		msg := fmt.Sprintf("%s: %d of %d failed during the flood", c.name, failed[i], runs)
		if failed[i] > 0 {
			t.Error(msg + ", want 0")
		} else {
			t.Log(msg)
		}
	}
	if !flooded() {
		t.Errorf("the pod connected only %d and %d times in %v, want %d to each port: no flood to judge the probes under", healthConns.Load(), metricsConns.Load(), floodBound, floodConns)
	}
}
