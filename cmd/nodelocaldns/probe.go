package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// trialTimeout bounds `-probe`, below the manifests' timeoutSeconds (2 s), so that a probe that gets no answer
// says why before the kubelet kills it. /health's own DNS probe takes up to 900 ms.
const trialTimeout = 1800 * time.Millisecond

// probe is `-probe PATH`: the kubelet's exec probe. It asks the agent in this pod, through its health socket
// (dnsserver/health_socket.go), and exits 0 on 200; otherwise it writes the answer or the error to stderr,
// which the kubelet puts in the probe's event, and exits 1.
func probe(socket, path string, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), trialTimeout)
	defer cancel()
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://health"+path, nil)
	if err != nil {
		fmt.Fprintf(stderr, "nodelocaldns: probe %s: %v\n", path, err)
		return 1
	}
	resp, err := c.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "nodelocaldns: probe %s on %s: %v\n", path, socket, err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "nodelocaldns: probe %s: %s: %s\n", path, resp.Status, strings.TrimSpace(string(body)))
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", strings.TrimSpace(string(body)))
	return 0
}
