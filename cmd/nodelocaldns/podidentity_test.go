package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/clients"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// TestPodIdentityNeedsThePod: with -pod-identity, a missing $NODE_NAME or service account, or the accounting
// turned off, is refused at start, naming the flag and what is missing; without it, nothing is needed.
func TestPodIdentityNeedsThePod(t *testing.T) {
	parse := func(args ...string) *options.Options {
		o, err := options.Parse(append([]string{"-localip", "169.254.20.10"}, args...), nil)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	acct := clients.New(zap.NewNop())
	if a, err := podIdentity(parse(), getenv, t.TempDir(), acct, zap.NewNop()); a != nil || err != nil {
		t.Errorf("off: %v, %v", a, err)
	}
	o := parse("-pod-identity")
	if _, err := podIdentity(o, getenv, t.TempDir(), nil, zap.NewNop()); err == nil || !strings.Contains(err.Error(), clients.Env) {
		t.Errorf("accounting off: %v", err)
	}
	if _, err := podIdentity(o, getenv, t.TempDir(), acct, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "-pod-identity") || !strings.Contains(err.Error(), "$NODE_NAME") {
		t.Errorf("no NODE_NAME: %v", err)
	}
	env["NODE_NAME"] = "node-1"
	if _, err := podIdentity(o, getenv, t.TempDir(), acct, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Errorf("no API server address: %v", err)
	}
	env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"] = "10.96.0.1", "443"
	if _, err := podIdentity(o, getenv, t.TempDir(), acct, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "automountServiceAccountToken") {
		t.Errorf("no service account: %v", err)
	}
	sa := t.TempDir()
	os.WriteFile(filepath.Join(sa, "ca.crt"), selfSigned(t), 0o644)
	if a, err := podIdentity(o, getenv, sa, acct, zap.NewNop()); err != nil || a == nil || a.Name != "pod identity" {
		t.Errorf("with all it needs: %v, %v", a, err)
	}
}

// selfSigned is a CA certificate in PEM, as the service account's ca.crt.
func selfSigned(t *testing.T) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, NotBefore: time.Now(),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
