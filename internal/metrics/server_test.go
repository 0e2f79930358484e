package metrics

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelocaldns/nodelocaldns/internal/listenlimit"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// An idle scrape connection is closed within idleTimeout (one was once still served after 12 s).
func TestServeClosesIdleConnections(t *testing.T) {
	addr := serveEmpty(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"))
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %v %v", resp, err)
	}
	resp.Body.Close()
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(3 * idleTimeout))
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("the server sent more on an idle connection")
	}
	if d := time.Since(start); d > idleTimeout+time.Second {
		t.Errorf("idle connection closed after %v, want within %v", d, idleTimeout)
	}
}

// TestScrapeWhileAPodHoldsConnections: one source (127.0.0.2, a pod) keeps 20 idle connections open to the
// metrics listener, opening a new one whenever the server drops one, while a scraper from another source
// (127.0.0.3) scrapes every 100 ms with a 1 s timeout. Every scrape is answered. With the 8-connection
// netutil.LimitListener before, the pod's connections took every place and the scrapes waited in the accept
// queue behind them (20 of 20 failed).
func TestScrapeWhileAPodHoldsConnections(t *testing.T) {
	addr := serveEmpty(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	pod := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: time.Second}
	var tried, holding atomic.Int64 // pod goroutines that have dialed once; connections the pod holds now
	for range 20 {
		go func() {
			for first := true; ctx.Err() == nil; first = false {
				c, err := pod.DialContext(ctx, "tcp", addr)
				if first {
					tried.Add(1)
				}
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				holding.Add(1)
				c.Read(make([]byte, 1)) // idle until the server drops it
				holding.Add(-1)
				c.Close()
			}
		}()
	}
	share := int64(listenlimit.AgentMetrics().PerSource)
	testenv.Eventually(t, 5*time.Second, "the pod to dial from every goroutine and hold its share", func() bool {
		return tried.Load() == 20 && holding.Load() >= share
	})

	scraper := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}}).DialContext, DisableKeepAlives: true}}
	failed := 0
	for range 20 {
		resp, err := scraper.Get("http://" + addr + "/metrics")
		if err != nil || resp.StatusCode != http.StatusOK {
			failed++
			t.Logf("scrape: %v", err)
		} else {
			resp.Body.Close()
		}
		time.Sleep(100 * time.Millisecond)
	}
	if failed > 0 {
		t.Errorf("%d of 20 scrapes failed while a pod held idle connections, want 0", failed)
	}
}

// serveEmpty serves an empty registry on a free loopback port until the test ends, and returns the address
// once it listens.
func serveEmpty(t *testing.T) string { return serve(t, prometheus.NewRegistry()) }

// serve serves reg on a free loopback port until the test ends (Serve must then return nil), and returns the
// address once it listens.
func serve(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, addr, reg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	testenv.EventuallyNil(t, 5*time.Second, "listen on "+addr, func() error {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	})
	return addr
}
