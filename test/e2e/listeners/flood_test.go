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
	probeGap  = 200 * time.Millisecond
)

// holdIdle opens rate TCP connections a second from the pod to addr until ctx ends, sends nothing on them and
// keeps them open (a connection the server drops stays dropped), then closes them all. It returns how many
// connected (a reset that beat connect's return counts: the handshake was made). The dials come from floodWorkers threads inside the pod's namespace, each at its share of the rate,
// so that one slow dial does not slow the flood.
func holdIdle(ctx context.Context, t *testing.T, from *testenv.Peer, addr string, rate int) int {
	var opened, failed atomic.Int64
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
	return int(opened.Load())
}

const floodWorkers = 8

// TestProbesUnderPodFlood: a pod opens 500 idle TCP connections a second to the health port (169.254.20.10:8080)
// and as many to the metrics port, for 6 s. Meanwhile the node runs the shipped liveness and readiness probes,
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

	ctx, cancel := context.WithTimeout(context.Background(), floodFor)
	defer cancel()
	var wg sync.WaitGroup
	var healthConns, metricsConns atomic.Int64
	wg.Go(func() {
		healthConns.Store(int64(holdIdle(ctx, t, n.Pod, net.JoinHostPort(harness.LocalIP, "8080"), floodRate)))
	})
	wg.Go(func() {
		metricsConns.Store(int64(holdIdle(ctx, t, n.Pod, net.JoinHostPort(harness.LocalIP, metricsPort), floodRate)))
	})
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
	for ctx.Err() == nil {
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
	wg.Wait()
	t.Logf("the pod connected %d times to the health port and %d times to the metrics port in %v", healthConns.Load(), metricsConns.Load(), floodFor)
	for i, c := range checks {
		msg := fmt.Sprintf("%s: %d of %d failed during the flood", c.name, failed[i], runs)
		if failed[i] > 0 {
			t.Error(msg + ", want 0")
		} else {
			t.Log(msg)
		}
	}
	// The flood starts a second before the probes and runs floodFor in all: at least 80 % of its rate.
	if want := int64(floodRate * floodFor / time.Second * 8 / 10); healthConns.Load() < want {
		t.Errorf("the pod connected only %d times to the health port, want at least %d: no flood at %d a second", healthConns.Load(), want, floodRate)
	}
}
