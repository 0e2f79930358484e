package nodetaint

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// fakeAPIServer serves one node's GET and JSON patch as the API server does: it checks the bearer token, the
// patch's content type, applies a test op by comparing the JSON values and answers 422 when it fails, as
// kube-apiserver does for a failed JSON patch (handlers/patch.go), and stores a replace. fail, when set, answers
// a request first (a 5xx, a 403) instead.
type fakeAPIServer struct {
	t     *testing.T
	url   string
	mu    sync.Mutex
	name  string
	token string
	// taints is spec.taints as JSON values; nil is a node without the field.
	taints []any
	// requests, in order: "GET", "PATCH <status>"; patches holds each patch body received.
	requests []string
	patches  [][]map[string]any
	tokens   []string
	// fail answers the n-th request (0-based) with a status instead of serving it.
	fail map[int]int
	// beforePatch runs before a patch is applied (another writer changing the taints in between).
	beforePatch func(f *fakeAPIServer)
}

func (f *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.requests)
	f.tokens = append(f.tokens, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	status := func(code int, msg string) {
		f.requests = append(f.requests, r.Method+" "+http.StatusText(code))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": msg, "code": code})
	}
	if code, ok := f.fail[n]; ok {
		status(code, "injected")
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+f.token {
		status(http.StatusUnauthorized, "Unauthorized")
		return
	}
	if r.URL.EscapedPath() != "/api/v1/nodes/"+url.PathEscape(f.name) {
		status(http.StatusNotFound, `nodes "`+r.URL.Path+`" not found`)
		return
	}
	switch r.Method {
	case http.MethodGet:
		spec := map[string]any{"podCIDR": "10.244.0.0/24"}
		if f.taints != nil {
			spec["taints"] = f.taints
		}
		f.requests = append(f.requests, "GET OK")
		json.NewEncoder(w).Encode(map[string]any{"kind": "Node", "metadata": map[string]any{"name": f.name}, "spec": spec})
	case http.MethodPatch:
		if ct := r.Header.Get("Content-Type"); ct != "application/json-patch+json" {
			status(http.StatusUnsupportedMediaType, "the body of the request was in an unknown format: "+ct)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var ops []map[string]any
		if err := json.Unmarshal(b, &ops); err != nil {
			status(http.StatusBadRequest, err.Error())
			return
		}
		f.patches = append(f.patches, ops)
		if f.beforePatch != nil {
			f.beforePatch(f)
		}
		next := f.taints
		for _, op := range ops {
			if op["path"] != "/spec/taints" {
				status(http.StatusUnprocessableEntity, "unexpected path")
				return
			}
			switch op["op"] {
			case "test":
				if f.taints == nil || !reflect.DeepEqual(f.taints, op["value"]) {
					status(http.StatusUnprocessableEntity, "the server rejected our request due to an error in our request")
					return
				}
			case "replace":
				v, _ := op["value"].([]any)
				next = v
			default:
				status(http.StatusUnprocessableEntity, "unexpected op")
				return
			}
		}
		f.taints = next
		f.requests = append(f.requests, "PATCH OK")
		json.NewEncoder(w).Encode(map[string]any{"kind": "Node"})
	default:
		status(http.StatusMethodNotAllowed, r.Method)
	}
}

// taintJSON is a taint as the API server holds it.
func taintJSON(key, effect string) any {
	return map[string]any{"key": key, "effect": effect}
}

const ourKey = "nodelocaldns.io/agent-not-ready"

// startAPI serves f over TLS and returns a Client that trusts it through InCluster, as in a pod: the
// environment, and the token and CA files in a service account directory.
func startAPI(t *testing.T, f *fakeAPIServer) (*Client, string) {
	t.Helper()
	f.t, f.name, f.token = t, "node-1", "token-1"
	srv := httptest.NewTLSServer(f)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(f.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(srv.URL)
	env := map[string]string{"KUBERNETES_SERVICE_HOST": u.Hostname(), "KUBERNETES_SERVICE_PORT": u.Port()}
	c, err := InCluster(func(k string) string { return env[k] }, dir)
	if err != nil {
		t.Fatal(err)
	}
	return c, dir
}

// waits records the backoff instead of sleeping.
type waits struct {
	mu sync.Mutex
	d  []time.Duration
}

func (w *waits) sleep(ctx context.Context, d time.Duration) bool {
	w.mu.Lock()
	w.d = append(w.d, d)
	w.mu.Unlock()
	return ctx.Err() == nil
}

func remover(c API, w *waits) (*Remover, *observer.ObservedLogs) {
	core, logs := observer.New(zap.DebugLevel)
	return &Remover{API: c, Node: "node-1", Key: ourKey, Log: zap.New(core), First: 10 * time.Millisecond, Last: 40 * time.Millisecond, Sleep: w.sleep}, logs
}

func runWithin(t *testing.T, r *Remover, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(d + 5*time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// TestRemovesOnlyOurTaintOnce: one GET, one JSON patch that tests the taints read and replaces them with the
// others, every effect of our key gone, the token sent as a bearer token.
func TestRemovesOnlyOurTaintOnce(t *testing.T) {
	other := taintJSON("node.kubernetes.io/not-ready", "NoSchedule")
	f := &fakeAPIServer{taints: []any{other, taintJSON(ourKey, "NoSchedule"), taintJSON(ourKey, "NoExecute")}}
	c, _ := startAPI(t, f)
	var w waits
	r, logs := remover(c, &w)
	runWithin(t, r, 10*time.Second)

	if want := []string{"GET OK", "PATCH OK"}; !reflect.DeepEqual(f.requests, want) {
		t.Fatalf("requests %q, want %q", f.requests, want)
	}
	if !reflect.DeepEqual(f.taints, []any{other}) {
		t.Errorf("taints after %v, want only %v", f.taints, other)
	}
	wantPatch := []map[string]any{
		{"op": "test", "path": "/spec/taints", "value": []any{other, taintJSON(ourKey, "NoSchedule"), taintJSON(ourKey, "NoExecute")}},
		{"op": "replace", "path": "/spec/taints", "value": []any{other}},
	}
	if !reflect.DeepEqual(f.patches[0], wantPatch) {
		t.Errorf("patch %v, want %v", f.patches[0], wantPatch)
	}
	for _, tok := range f.tokens {
		if tok != "token-1" {
			t.Errorf("bearer token %q, want the service account's (token-1, trailing newline trimmed)", tok)
		}
	}
	if len(w.d) != 0 || logs.FilterMessage("start-up taint removed").Len() != 1 {
		t.Errorf("waits %v, logs %v: want one success at once", w.d, logs.All())
	}
}

// TestLastTaintLeavesAnEmptyList: the replace sends [] (not null), which the API server stores as no taints.
func TestLastTaintLeavesAnEmptyList(t *testing.T) {
	f := &fakeAPIServer{taints: []any{taintJSON(ourKey, "NoSchedule")}}
	c, _ := startAPI(t, f)
	var w waits
	r, _ := remover(c, &w)
	runWithin(t, r, 10*time.Second)
	if len(f.patches) != 1 || !reflect.DeepEqual(f.patches[0][1]["value"], []any{}) || len(f.taints) != 0 {
		t.Errorf("patches %v, taints %v: want one replace with []", f.patches, f.taints)
	}
}

// TestAbsentTaintIsNotPatched: a node without our taint (none at all, or others only) gets no patch: the
// agent never writes the node when it has nothing to take off, and never adds the taint.
func TestAbsentTaintIsNotPatched(t *testing.T) {
	for name, taints := range map[string][]any{"no taints": nil, "others only": {taintJSON("example.com/x", "NoSchedule")}} {
		t.Run(name, func(t *testing.T) {
			f := &fakeAPIServer{taints: taints}
			c, _ := startAPI(t, f)
			var w waits
			r, logs := remover(c, &w)
			runWithin(t, r, 10*time.Second)
			if !reflect.DeepEqual(f.requests, []string{"GET OK"}) || !reflect.DeepEqual(f.taints, taints) {
				t.Errorf("requests %q, taints %v: want one GET and the node unchanged", f.requests, f.taints)
			}
			if logs.FilterMessage("start-up taint not on the node").Len() != 1 {
				t.Errorf("logs %v", logs.All())
			}
		})
	}
}

// TestConcurrentChangeIsKept: another writer adds a taint between our GET and our PATCH. The test op fails
// (422), the remover reads again, and the node ends with the other writer's taint and without ours.
func TestConcurrentChangeIsKept(t *testing.T) {
	added := taintJSON("example.com/maintenance", "NoSchedule")
	f := &fakeAPIServer{taints: []any{taintJSON(ourKey, "NoSchedule")}}
	f.beforePatch = func(f *fakeAPIServer) {
		if len(f.patches) == 1 {
			f.taints = append(append([]any{}, f.taints...), added)
		}
	}
	c, _ := startAPI(t, f)
	var w waits
	r, logs := remover(c, &w)
	runWithin(t, r, 10*time.Second)
	want := []string{"GET OK", "PATCH Unprocessable Entity", "GET OK", "PATCH OK"}
	if !reflect.DeepEqual(f.requests, want) {
		t.Fatalf("requests %q, want %q", f.requests, want)
	}
	if !reflect.DeepEqual(f.taints, []any{added}) {
		t.Errorf("taints %v, want only the concurrently added %v", f.taints, added)
	}
	warn := logs.FilterMessage("remove start-up taint; retrying").All()
	if len(warn) != 1 || !strings.Contains(warn[0].ContextMap()["error"].(string), "HTTP 422") {
		t.Errorf("warnings %v: want one naming HTTP 422", warn)
	}
}

// TestRetriesWithBackoff: failures (an API server not up, RBAC missing) are logged with a hint and retried,
// each wait double the last up to the bound, and the taint comes off once they stop.
func TestRetriesWithBackoff(t *testing.T) {
	f := &fakeAPIServer{taints: []any{taintJSON(ourKey, "NoSchedule")},
		fail: map[int]int{0: 503, 1: 500, 2: 403, 3: 403, 4: 401}}
	c, _ := startAPI(t, f)
	var w waits
	r, logs := remover(c, &w)
	runWithin(t, r, 10*time.Second)
	if want := []time.Duration{10, 20, 40, 40, 40}; !reflect.DeepEqual(w.d, scale(want, time.Millisecond)) {
		t.Errorf("waits %v, want %v ms", w.d, want)
	}
	if len(f.taints) != 0 || f.requests[len(f.requests)-1] != "PATCH OK" {
		t.Errorf("requests %q, taints %v: want the taint removed after the failures", f.requests, f.taints)
	}
	hints := map[string]bool{}
	for _, e := range logs.FilterMessage("remove start-up taint; retrying").All() {
		hints[e.ContextMap()["hint"].(string)] = true
	}
	if !hints["the service account may not get and patch nodes: the chart's startupTaint RBAC (ClusterRole) is missing"] ||
		!hints["the service account token was refused"] {
		t.Errorf("hints %v: want the RBAC and the token ones", hints)
	}
}

// TestTokenIsReadOnEveryRequest: the kubelet rotates a bound token in place; the next request sends the new one.
func TestTokenIsReadOnEveryRequest(t *testing.T) {
	f := &fakeAPIServer{taints: []any{taintJSON(ourKey, "NoSchedule")}}
	c, dir := startAPI(t, f)
	f.fail = map[int]int{0: 500}
	f.token = "token-2"
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("token-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	var w waits
	r, _ := remover(c, &w)
	runWithin(t, r, 10*time.Second)
	if len(f.taints) != 0 || f.tokens[len(f.tokens)-1] != "token-2" {
		t.Errorf("tokens %q, taints %v", f.tokens, f.taints)
	}
}

// TestStopsWhenTheAgentStops: an API server that never answers well does not hold the agent: Run returns
// once its context is done, having removed nothing.
func TestStopsWhenTheAgentStops(t *testing.T) {
	f := &fakeAPIServer{taints: []any{taintJSON(ourKey, "NoSchedule")}, fail: map[int]int{}}
	for i := range 1000 {
		f.fail[i] = 503
	}
	c, _ := startAPI(t, f)
	core, _ := observer.New(zap.DebugLevel)
	r := &Remover{API: c, Node: "node-1", Key: ourKey, Log: zap.New(core), First: time.Millisecond, Last: 5 * time.Millisecond}
	start := time.Now()
	runWithin(t, r, 200*time.Millisecond)
	took := time.Since(start)
	// A request Run gave up on may still be in the handler: read under its lock.
	f.mu.Lock()
	defer f.mu.Unlock()
	if took > 2*time.Second || len(f.taints) != 1 || len(f.requests) < 2 {
		t.Errorf("took %v, %d requests, taints %v: want retries until the context ended, the taint left", took, len(f.requests), f.taints)
	}
}

func TestInClusterErrors(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
	getenv := func(k string) string { return env[k] }
	if _, err := InCluster(func(string) string { return "" }, dir); err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Errorf("no environment: %v", err)
	}
	if _, err := InCluster(getenv, dir); err == nil || !strings.Contains(err.Error(), "automountServiceAccountToken") {
		t.Errorf("no CA: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "ca.crt"), []byte("not a certificate"), 0o644)
	if _, err := InCluster(getenv, dir); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("bad CA: %v", err)
	}
}

// TestUntrustedServerIsRefused: the client trusts only the service account's CA.
func TestUntrustedServerIsRefused(t *testing.T) {
	f := &fakeAPIServer{taints: []any{taintJSON(ourKey, "NoSchedule")}}
	_, dir := startAPI(t, f)
	// Another CA in the service account directory: httptest's server certificate is not signed by it.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other-ca"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	u, _ := url.Parse(f.url)
	env := map[string]string{"KUBERNETES_SERVICE_HOST": u.Hostname(), "KUBERNETES_SERVICE_PORT": u.Port()}
	c, err := InCluster(func(k string) string { return env[k] }, dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Taints(context.Background(), "node-1")
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Taints from a server the CA did not sign: %v", err)
	}
	if hint(err) == "" {
		t.Error("no hint for a TLS failure")
	}
	if len(f.requests) != 0 {
		t.Errorf("requests %q reached the server: the token must not be sent to it", f.requests)
	}
}

func scale(ds []time.Duration, unit time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d * unit
	}
	return out
}

// TestHintNamesTheAdmissionPolicy: the chart's ValidatingAdmissionPolicy refuses with 422, the code of a patch
// whose test failed; the hint must say a policy refused it rather than that the taints changed.
func TestHintNamesTheAdmissionPolicy(t *testing.T) {
	denied := &StatusError{Code: http.StatusUnprocessableEntity, Message: `nodes "node-1" is forbidden: ValidatingAdmissionPolicy 'node-local-dns-startup-taint' with binding 'node-local-dns-startup-taint' denied request: the start-up gate of node node-2 may not patch node node-1`}
	if h := hint(fmt.Errorf("patch node: %w", denied)); !strings.Contains(h, "admission policy") {
		t.Errorf("hint for a policy's refusal = %q, want it to name the admission policy", h)
	}
	changed := &StatusError{Code: http.StatusUnprocessableEntity, Message: "the server rejected our request due to an error in our request"}
	if h := hint(changed); !strings.Contains(h, "changed since they were read") {
		t.Errorf("hint for a failed test op = %q, want the taints changed", h)
	}
}
