package dnsserver

import (
	"bytes"
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy/caddyfile"
	"golang.org/x/crypto/x509roots/fallback/bundle"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// Which Corefiles get the compiled-in roots: any that names TLS, HTTPS or QUIC, in an imported file too; not
// node-cache's standard one.
func TestMayUseTLS(t *testing.T) {
	dir := t.TempDir()
	override := filepath.Join(dir, "tls.override")
	if err := os.WriteFile(override, []byte("forward . tls://9.9.9.9 {\n  tls_servername dns.quad9.net\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		corefile string
		want     bool
	}{
		{"standard", standardTestCorefile, false},
		{"forward tls://", ".:53 {\n  forward . tls://1.1.1.1 {\n    tls_servername cloudflare-dns.com\n  }\n}\n", true},
		{"forward's tls option", ".:53 {\n  forward . 10.0.0.10 {\n    tls\n  }\n}\n", true},
		{"DNS over HTTPS", ".:53 {\n  forward . https://dns.google/dns-query\n}\n", true},
		{"DNS over QUIC", ".:53 {\n  forward . quic://dns.adguard-dns.com\n}\n", true},
		{"dnstap over TLS", ".:53 {\n  dnstap tls://10.0.0.1:6000\n  forward . 10.0.0.10\n}\n", true},
		{"an imported override", ".:53 {\n  import " + filepath.Join(dir, "*.override") + "\n}\n", true},
	}
	for _, c := range cases {
		blocks, err := caddyfile.Parse(filepath.Join(dir, "Corefile"), bytes.NewReader([]byte(c.corefile)), Directives())
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := mayUseTLS(blocks); got != c.want {
			t.Errorf("%s: mayUseTLS = %v, want %v", c.name, got, c.want)
		}
	}
}

// standardTestCorefile is node-cache's standard Corefile, as the template renders it, without its imports.
const standardTestCorefile = `cluster.local:53 {
    errors
    cache {
            success 9984 30
            denial 9984 5
    }
    reload
    loop
    bind 169.254.20.10 10.96.0.10
    forward . 10.96.0.11 {
            force_tcp
    }
    prometheus :9253
    health 169.254.20.10:8080
    }
.:53 {
    errors
    cache 30
    reload
    loop
    bind 169.254.20.10 10.96.0.10
    forward . /etc/resolv.conf
    prometheus :9253
    }
`

const rootsChildEnv = "DNSSERVER_TEST_ROOTS_CHILD"

// On a system without root CAs (the image's empty base, here SSL_CERT_FILE and SSL_CERT_DIR pointing nowhere), a
// public root verifies only once a Corefile that uses TLS has been handed to caddy, and not after the standard
// one. In a child process: the roots are the process's, set once.
func TestRootsInstalledForTLSCorefiles(t *testing.T) {
	name, args := os.Args[0], []string{"-test.run=^TestRootsChild$", "-test.v"}
	if emu := testenv.Emulator(); emu != "" {
		name, args = emu, append([]string{os.Args[0]}, args...) // no binfmt_misc: the emulator runs the binary
	}
	cmd := exec.Command(name, args...)
	none := filepath.Join(t.TempDir(), "none")
	cmd.Env = append(os.Environ(), rootsChildEnv+"=1", "SSL_CERT_FILE="+none, "SSL_CERT_DIR="+none)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestRootsChild") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func TestRootsChild(t *testing.T) {
	if os.Getenv(rootsChildEnv) == "" {
		t.Skip("run by TestRootsInstalledForTLSCorefiles")
	}
	var root *x509.Certificate
	for r := range bundle.Roots() {
		c, err := x509.ParseCertificate(r.Certificate)
		if err == nil && r.Constraint == nil && time.Now().Before(c.NotAfter) && time.Now().After(c.NotBefore) {
			root = c
			break
		}
	}
	if root == nil {
		t.Fatal("no root in the bundle is valid today without a constraint")
	}
	verifies := func() bool {
		_, err := root.Verify(x509.VerifyOptions{})
		return err == nil
	}
	if verifies() {
		t.Fatal("a bundle root verifies before any Corefile: the system has roots, or they were installed at init")
	}
	if _, err := Input([]byte(standardTestCorefile), "Corefile"); err != nil {
		t.Fatal(err)
	}
	if verifies() {
		t.Fatal("the standard Corefile installed the compiled-in roots")
	}
	if _, err := Input([]byte(".:53 {\n  forward . tls://1.1.1.1\n}\n"), "Corefile"); err != nil {
		t.Fatal(err)
	}
	if !verifies() {
		t.Fatalf("%s does not verify after a Corefile with a tls:// upstream", root.Subject)
	}
}
