package main

import (
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// TestStartupTaintNeedsThePod: with -startup-taint, a missing $NODE_NAME or service account is refused at
// start, naming the flag and what is missing; without it, nothing is needed.
func TestStartupTaintNeedsThePod(t *testing.T) {
	parse := func(args ...string) *options.Options {
		o, err := options.Parse(append([]string{"-localip", "169.254.20.10"}, args...), nil)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if a, err := startupTaint(parse(), getenv, t.TempDir(), zap.NewNop()); a != nil || err != nil {
		t.Errorf("off: %v, %v", a, err)
	}
	o := parse("-startup-taint", "nodelocaldns.io/agent-not-ready")
	if _, err := startupTaint(o, getenv, t.TempDir(), zap.NewNop()); err == nil || !strings.Contains(err.Error(), "-startup-taint") || !strings.Contains(err.Error(), "$NODE_NAME") {
		t.Errorf("no NODE_NAME: %v", err)
	}
	env["NODE_NAME"] = "node-1"
	if _, err := startupTaint(o, getenv, t.TempDir(), zap.NewNop()); err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Errorf("no API server address: %v", err)
	}
	env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"] = "10.96.0.1", "443"
	if _, err := startupTaint(o, getenv, t.TempDir(), zap.NewNop()); err == nil || !strings.Contains(err.Error(), "automountServiceAccountToken") {
		t.Errorf("no service account: %v", err)
	}
}
