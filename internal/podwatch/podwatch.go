// Package podwatch names the sources of DNS queries: it watches the pods on the agent's own node through the API
// server (list, then watch from the list's resourceVersion, with a spec.nodeName field selector) and says which
// pod an address is, for the per-client accounting (internal/clients). Opt-in (-pod-identity); it needs get,
// list and watch on pods, nothing else.
//
// It speaks to the API server as internal/nodetaint does, over net/http with the pod's service account
// (nodetaint.InClusterConfig), rather than through client-go's informers: two requests (a list and a watch
// stream of JSON lines) need no client library, and client-go would add its dependency tree to the binary for
// them. Every change recomputes the names from the whole set of pods; a watch that ends or fails is followed by
// a new list, after a backoff on error.
//
// May touch: the API server's pods (get, list, watch), as the pod's service account (its token file).
package podwatch

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Bounds of the watch: the API server ends a watch after watchTimeout (and the watcher lists again, as
// informers do); a failed list or watch is retried after backoffMin, doubling up to backoffMax.
const (
	watchTimeout = 5 * time.Minute
	backoffMin   = time.Second
	backoffMax   = time.Minute
	listTimeout  = 30 * time.Second
)

// Watcher knows the pods on one node.
type Watcher struct {
	log       *zap.Logger
	base      string
	tokenFile string
	node      string
	http      *http.Client

	mu    sync.RWMutex
	names map[netip.Addr]string
}

// New watches the pods of node through the API server at base (https://host:port), with the bearer token read
// from tokenFile on every request (the kubelet rotates it in place).
func New(log *zap.Logger, base, tokenFile string, tlsConfig *tls.Config, node string) *Watcher {
	tr := &http.Transport{TLSClientConfig: tlsConfig, Proxy: nil, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		TLSHandshakeTimeout: 5 * time.Second, ResponseHeaderTimeout: listTimeout, MaxIdleConns: 1, IdleConnTimeout: 30 * time.Second}
	return &Watcher{log: log, base: strings.TrimSuffix(base, "/"), tokenFile: tokenFile, node: node,
		http: &http.Client{Transport: tr}, names: map[netip.Addr]string{}}
}

// Name is who addr is: "namespace/pod", "host network (...)", or "" when no pod on the node has it.
func (w *Watcher) Name(addr netip.Addr) string {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.names[addr.Unmap()]
}

// Run lists and watches until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	backoff := backoffMin
	for ctx.Err() == nil {
		err := w.pass(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			backoff = backoffMin
			continue
		}
		w.log.Warn("watch pods", zap.Error(err), zap.Duration("retry_in", backoff))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, backoffMax)
	}
}

// pass lists the node's pods, then follows the watch from there until it ends: nil when the API server ended it
// (its timeout), an error otherwise.
func (w *Watcher) pass(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	body, err := w.get(lctx, url.Values{})
	if err != nil {
		return fmt.Errorf("list pods on node %q: %w", w.node, err)
	}
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []pod `json:"items"`
	}
	err = json.NewDecoder(io.LimitReader(body, 64<<20)).Decode(&list)
	body.Close()
	if err != nil {
		return fmt.Errorf("list pods on node %q: decode: %w", w.node, err)
	}
	pods := map[string]pod{}
	for _, p := range list.Items {
		pods[p.key()] = p
	}
	w.set(pods)
	return w.watch(ctx, list.Metadata.ResourceVersion, pods)
}

// watch applies the events after resourceVersion rv to pods.
func (w *Watcher) watch(ctx context.Context, rv string, pods map[string]pod) error {
	body, err := w.get(ctx, url.Values{"watch": {"1"}, "resourceVersion": {rv}, "allowWatchBookmarks": {"true"},
		"timeoutSeconds": {fmt.Sprint(int(watchTimeout.Seconds()))}})
	if err != nil {
		return fmt.Errorf("watch pods on node %q: %w", w.node, err)
	}
	defer body.Close()
	go func() { <-ctx.Done(); body.Close() }() // a stream waiting for its next event ends with ctx
	dec := json.NewDecoder(bufio.NewReader(body))
	for {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("watch pods on node %q: %w", w.node, err)
		}
		var p pod
		switch ev.Type {
		case "ADDED", "MODIFIED", "DELETED":
			if err := json.Unmarshal(ev.Object, &p); err != nil {
				return fmt.Errorf("watch pods on node %q: decode a pod: %w", w.node, err)
			}
		case "BOOKMARK":
			continue
		default: // ERROR: a 410 Gone when rv is too old, among others; list again
			return fmt.Errorf("watch pods on node %q: %s", w.node, strings.TrimSpace(string(ev.Object)))
		}
		if ev.Type == "DELETED" {
			delete(pods, p.key())
		} else {
			pods[p.key()] = p
		}
		w.set(pods)
	}
}

func (w *Watcher) set(pods map[string]pod) {
	n := names(pods)
	w.mu.Lock()
	w.names = n
	w.mu.Unlock()
}

// get asks for the node's pods with extra query parameters and returns the body of a 200.
func (w *Watcher) get(ctx context.Context, q url.Values) (io.ReadCloser, error) {
	token, err := os.ReadFile(w.tokenFile)
	if err != nil {
		return nil, fmt.Errorf("read the service account token: %w", err)
	}
	q.Set("fieldSelector", "spec.nodeName="+w.node)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.base+"/api/v1/pods?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "nodelocaldns")
	resp, err := w.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return resp.Body, nil
}
