package podwatch

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// Conventions: the node is node-a; pods have 10.244.0.x, the node (and its host-network pods) 192.168.0.10.

func mkpod(ns, name, ip string, host bool) map[string]any {
	return map[string]any{"metadata": map[string]any{"namespace": ns, "name": name}, "spec": map[string]any{"hostNetwork": host, "nodeName": "node-a"},
		"status": map[string]any{"podIPs": []any{map[string]any{"ip": ip}}}}
}

func TestNames(t *testing.T) {
	pods := map[string]pod{}
	for _, m := range []map[string]any{
		mkpod("default", "web-1", "10.244.0.5", false), mkpod("kube-system", "node-local-dns-x", "192.168.0.10", true),
		mkpod("kube-system", "kube-proxy-y", "192.168.0.10", true), mkpod("dual", "v6", "fd00::5", false),
	} {
		var p pod
		b, _ := json.Marshal(m)
		json.Unmarshal(b, &p)
		pods[p.key()] = p
	}
	got := names(pods)
	want := map[string]string{"10.244.0.5": "default/web-1", "fd00::5": "dual/v6",
		"192.168.0.10": "host network (kube-system/kube-proxy-y, kube-system/node-local-dns-x)"}
	if len(got) != len(want) {
		t.Errorf("names %v: want %v", got, want)
	}
	for a, n := range want {
		if got[netip.MustParseAddr(a)] != n {
			t.Errorf("%s: %q, want %q", a, got[netip.MustParseAddr(a)], n)
		}
	}
}

// fakeAPI is the API server's pods endpoint for one node: a list at resourceVersion rv, then a watch stream of
// the events a test sends; a watch from an old resourceVersion gets 410 Gone as an ERROR event.
type fakeAPI struct {
	t      *testing.T
	mu     sync.Mutex
	pods   []map[string]any
	rv     int
	events chan map[string]any
	asked  []string // "list" or "watch <rv>"
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer token-1" || r.URL.Path != "/api/v1/pods" || r.URL.Query().Get("fieldSelector") != "spec.nodeName=node-a" {
		http.Error(w, "forbidden: "+r.URL.String(), http.StatusForbidden)
		return
	}
	f.mu.Lock()
	if r.URL.Query().Get("watch") != "1" {
		f.asked = append(f.asked, "list")
		items := f.pods
		rv := f.rv
		f.mu.Unlock()
		json.NewEncoder(w).Encode(map[string]any{"kind": "PodList", "metadata": map[string]any{"resourceVersion": fmt.Sprint(rv)}, "items": items})
		return
	}
	f.asked = append(f.asked, "watch "+r.URL.Query().Get("resourceVersion"))
	stale := r.URL.Query().Get("resourceVersion") != fmt.Sprint(f.rv)
	events := f.events
	f.mu.Unlock()
	enc := json.NewEncoder(w)
	if stale {
		enc.Encode(map[string]any{"type": "ERROR", "object": map[string]any{"kind": "Status", "code": 410, "message": "too old resource version"}})
		return
	}
	w.(http.Flusher).Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev, ok := <-events:
			if !ok {
				return // the API server's timeout: the stream ends
			}
			enc.Encode(ev)
			w.(http.Flusher).Flush()
		}
	}
}

func TestWatcherFollowsThePodsOnItsNode(t *testing.T) {
	f := &fakeAPI{t: t, rv: 7, events: make(chan map[string]any), pods: []map[string]any{mkpod("default", "web-1", "10.244.0.5", false)}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	token := filepath.Join(t.TempDir(), "token")
	os.WriteFile(token, []byte("token-1\n"), 0o600)
	w := New(zap.NewNop(), srv.URL, token, nil, "node-a")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	named := func(addr, want string) {
		t.Helper()
		testenv.Eventually(t, 5*time.Second, addr+" named "+want, func() bool { return w.Name(netip.MustParseAddr(addr)) == want })
	}
	named("10.244.0.5", "default/web-1")
	if w.Name(netip.MustParseAddr("::ffff:10.244.0.5")) != "default/web-1" {
		t.Error("a v4-mapped address is not named as its IPv4 address")
	}
	events := f.events // only this test changes it, below
	events <- map[string]any{"type": "ADDED", "object": mkpod("shop", "cart-2", "10.244.0.6", false)}
	named("10.244.0.6", "shop/cart-2")
	events <- map[string]any{"type": "BOOKMARK", "object": map[string]any{"metadata": map[string]any{"resourceVersion": "9"}}}
	events <- map[string]any{"type": "DELETED", "object": mkpod("default", "web-1", "10.244.0.5", false)}
	named("10.244.0.5", "")
	events <- map[string]any{"type": "ADDED", "object": mkpod("kube-system", "kube-proxy-y", "192.168.0.10", true)}
	named("192.168.0.10", "host network (kube-system/kube-proxy-y)")

	// The API server ends the watch; the watcher lists again and watches from the new list.
	f.mu.Lock()
	f.pods = []map[string]any{mkpod("shop", "cart-2", "10.244.0.6", false), mkpod("shop", "cart-3", "10.244.0.7", false)}
	f.rv = 12
	old := f.events
	f.events = make(chan map[string]any)
	f.mu.Unlock()
	close(old)
	named("10.244.0.7", "shop/cart-3")
	named("192.168.0.10", "")
	var asked []string
	testenv.Eventually(t, 5*time.Second, "the watch from the new list", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		asked = append([]string(nil), f.asked...)
		return len(asked) >= 4
	})
	if len(asked) < 4 || asked[0] != "list" || asked[1] != "watch 7" || asked[2] != "list" || asked[3] != "watch 12" {
		t.Errorf("requests %v: want list, watch 7, list, watch 12", asked)
	}
}

// A watch from a resourceVersion the API server no longer has (410 Gone) lists again.
func TestWatcherListsAgainAfterGone(t *testing.T) {
	f := &fakeAPI{t: t, rv: 3, events: make(chan map[string]any), pods: []map[string]any{mkpod("default", "web-1", "10.244.0.5", false)}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "1" {
			f.mu.Lock()
			f.rv++ // the list's version is gone by the time the watch asks
			f.mu.Unlock()
		}
		f.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	token := filepath.Join(t.TempDir(), "token")
	os.WriteFile(token, []byte("token-1"), 0o600)
	w := New(zap.NewNop(), srv.URL, token, nil, "node-a")
	if err := w.pass(context.Background()); err == nil {
		t.Fatal("a watch answered 410 Gone returned no error")
	}
	if w.Name(netip.MustParseAddr("10.244.0.5")) != "default/web-1" {
		t.Error("the list's pods are not named")
	}
}
