// Package nodetaint removes the node's start-up taint once the agent serves: the opt-in start-up gate.
//
// A node that registers with a taint (the kubelet's --register-with-taints, registerWithTaints in its
// configuration) gets no pod that does not tolerate it. The agent's DaemonSet tolerates it; once the agent serves
// (interface, table and CoreDNS in place), it removes the taint, and pods pointed at the local address are
// scheduled onto a node where that address answers. This is what Cilium does with node.cilium.io/agent-not-ready.
// The taint is removed once and never added back: the agent only ever takes it off.
//
// The API server is reached as every in-cluster client reaches it: $KUBERNETES_SERVICE_HOST and
// $KUBERNETES_SERVICE_PORT, the service account's token and CA under /var/run/secrets/kubernetes.io/serviceaccount.
// Two requests need no client library: GET the node, and a JSON patch that tests the node's taints are still what
// was read and replaces them without ours. net/http, crypto/tls and encoding/json are in the binary anyway.
//
// client.go talks to the API server; remove.go decides and retries.
//
// May touch: the API server's node object, as the pod's service account (its token file).
package nodetaint

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ServiceAccountDir is where the kubelet mounts the pod's service account token and the cluster's CA.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// requestTimeout bounds one request; a pass is retried anyway.
const requestTimeout = 10 * time.Second

// Client is an in-cluster API client for the two requests the gate makes.
type Client struct {
	base      string // https://host:port
	tokenFile string // read on every request: the kubelet rotates bound tokens in place
	http      *http.Client
}

// InCluster builds a Client from the environment the kubelet gives every pod (getenv is os.Getenv) and the
// service account files in dir (ServiceAccountDir in production). The error names what is missing.
func InCluster(getenv func(string) string, dir string) (*Client, error) {
	base, tokenFile, tlsConfig, err := InClusterConfig(getenv, dir)
	if err != nil {
		return nil, err
	}
	return New(base, tokenFile, tlsConfig), nil
}

// InClusterConfig is what every in-cluster client of the agent needs (this one, and internal/podwatch's): the
// API server's address (https://host:port), the token's path and the TLS configuration trusting the cluster's
// CA. The error names what is missing.
func InClusterConfig(getenv func(string) string, dir string) (base, tokenFile string, tlsConfig *tls.Config, err error) {
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return "", "", nil, errors.New("$KUBERNETES_SERVICE_HOST and $KUBERNETES_SERVICE_PORT are not both set (the kubelet sets them in every pod)")
	}
	caFile := filepath.Join(dir, "ca.crt")
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return "", "", nil, fmt.Errorf("read the cluster's CA: %w (is the service account token mounted? automountServiceAccountToken)", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return "", "", nil, fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	return "https://" + net.JoinHostPort(host, port), filepath.Join(dir, "token"), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// New is a Client for the API server at base (https://host:port), with the bearer token read from tokenFile.
func New(base, tokenFile string, tlsConfig *tls.Config) *Client {
	tr := &http.Transport{TLSClientConfig: tlsConfig, Proxy: nil, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		TLSHandshakeTimeout: 5 * time.Second, MaxIdleConns: 1, IdleConnTimeout: 30 * time.Second}
	return &Client{base: strings.TrimSuffix(base, "/"), tokenFile: tokenFile, http: &http.Client{Transport: tr, Timeout: requestTimeout}}
}

// Taint is one entry of a node's spec.taints, kept as the API server sent it so that a patch's test compares
// exactly what was read.
type Taint map[string]any

// Key is the taint's key.
func (t Taint) Key() string { k, _ := t["key"].(string); return k }

// StatusError is an answer other than 2xx from the API server.
type StatusError struct {
	Code    int
	Message string // the Status object's message, or the body's start
}

func (e *StatusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Code, e.Message) }

// Taints returns the node's taints (none: an empty list).
func (c *Client) Taints(ctx context.Context, node string) ([]Taint, error) {
	body, err := c.do(ctx, http.MethodGet, node, "", nil)
	if err != nil {
		return nil, fmt.Errorf("get node %q: %w", node, err)
	}
	var n struct {
		Spec struct {
			Taints []Taint `json:"taints"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(body, &n); err != nil {
		return nil, fmt.Errorf("get node %q: decode: %w", node, err)
	}
	return n.Spec.Taints, nil
}

// PatchTaints replaces the node's taints with to, provided they still are from: one JSON patch, a test and a
// replace, so that a taint someone else added or removed in between is never lost (the API server refuses the
// patch, 422, and the caller reads again).
func (c *Client) PatchTaints(ctx context.Context, node string, from, to []Taint) error {
	if from == nil {
		from = []Taint{}
	}
	if to == nil {
		to = []Taint{}
	}
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/spec/taints", "value": from},
		{"op": "replace", "path": "/spec/taints", "value": to},
	})
	if err != nil {
		return err
	}
	if _, err := c.do(ctx, http.MethodPatch, node, "application/json-patch+json", patch); err != nil {
		return fmt.Errorf("patch node %q: %w", node, err)
	}
	return nil
}

// do sends one request for the node and returns the body of a 2xx answer.
func (c *Client) do(ctx context.Context, method, node, contentType string, body []byte) ([]byte, error) {
	token, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return nil, fmt.Errorf("read the service account token: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+"/api/v1/nodes/"+url.PathEscape(node), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "nodelocaldns")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, &StatusError{Code: resp.StatusCode, Message: statusMessage(b)}
	}
	return b, nil
}

// statusMessage is a metav1.Status's message, else the body's start.
func statusMessage(b []byte) string {
	var st struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &st) == nil && st.Message != "" {
		return st.Message
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
