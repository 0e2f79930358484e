package metrics

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// An idle scrape connection is closed within idleTimeout (issue 21: one was still served after 12 s).
func TestServeClosesIdleConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Serve(ctx, addr, prometheus.NewRegistry())
	var c net.Conn
	for range 100 {
		if c, err = net.Dial("tcp", addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
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
