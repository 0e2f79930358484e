package corefile

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coredns/caddy/caddyfile"
	"github.com/coredns/coredns/core/dnsserver"
)

// FuzzRender feeds arbitrary kube-dns ConfigMap values and base Corefiles through the production path
// (parseKubeDNS, the core of LoadKubeDNS, then Render). Any input must be refused with an error or render a
// Corefile that Validate accepts, that is the base plus exactly one server block per accepted stub domain, each
// holding exactly node-cache's four directives, and that has no template variable left.
//
//	go test ./internal/corefile -run '^$' -fuzz FuzzRender -fuzztime 5m
func FuzzRender(f *testing.F) {
	dirs, _ := filepath.Glob(filepath.Join(goldenDir, "*", "params.json"))
	for _, pj := range dirs {
		dir := filepath.Dir(pj)
		stub, _ := os.ReadFile(filepath.Join(dir, "kube-dns", keyStubDomains))
		upstream, _ := os.ReadFile(filepath.Join(dir, "kube-dns", keyUpstreamNameservers))
		base, err := os.ReadFile(filepath.Join(dir, "Corefile.base"))
		if err != nil {
			base, _ = os.ReadFile(filepath.Join(goldenDir, "bases", "standard-domain.base"))
		}
		f.Add(stub, upstream, base)
	}
	f.Add([]byte(`{"a.com": ["1.1.1.1"]}`), []byte(`["8.8.8.8"]`), []byte(".:53 {\n    forward . __PILLAR__UPSTREAM__SERVERS__\n}\nx,"))
	f.Add([]byte(`{"a.com": ["1.1.1.1"]}`), []byte(``), []byte(".:53\nwhoami"))

	p := testParams
	f.Fuzz(func(t *testing.T, stub, upstream, base []byte) {
		kd, err := parseKubeDNS(map[string][]byte{keyStubDomains: stub, keyUpstreamNameservers: upstream},
			func(k string) string { return k })
		if err != nil {
			return
		}
		out, err := Render(base, kd, p)
		if err != nil {
			return
		}
		if err := Validate(out, testDirectives); err != nil {
			t.Fatalf("Render output does not validate: %v\n%s", err, out)
		}
		stubs := stubBlocks(kd, "169.254.20.10 10.96.0.10", p.DNSPort)
		if !bytes.HasSuffix(out, stubs) {
			t.Fatalf("output does not end with the stub blocks:\n%s", out)
		}
		baseBlocks := parseBlocks(t, out[:len(out)-len(stubs)])
		all := parseBlocks(t, out)
		if len(all) != len(baseBlocks)+len(kd.StubDomains) {
			t.Fatalf("%d server blocks, want %d from the base + %d stub domains:\n%s",
				len(all), len(baseBlocks), len(kd.StubDomains), out)
		}
		// The base may serve a stub's zone too, on other addresses; the stub blocks are the ones after the base's.
		for d, servers := range kd.StubDomains {
			checkStubBlock(t, all[len(baseBlocks):], fmt.Sprintf("%s:%d", d, p.DNSPort), servers, out)
		}
		d := caddyfile.NewDispenser(corefileName, bytes.NewReader(out))
		for d.Next() {
			if strings.Contains(d.Val(), pillarPrefix) || strings.Contains(d.Val(), varPrometheusEndpoint) {
				t.Fatalf("line %d: template variable left in %q:\n%s", d.Line(), d.Val(), out)
			}
		}
	})
}

func parseBlocks(t *testing.T, corefile []byte) []caddyfile.ServerBlock {
	t.Helper()
	blocks, err := caddyfile.Parse(corefileName, bytes.NewReader(corefile), dnsserver.Directives)
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, corefile)
	}
	return blocks
}

// checkStubBlock asserts that exactly one block is keyed by key and that it holds node-cache's directives only.
func checkStubBlock(t *testing.T, blocks []caddyfile.ServerBlock, key string, servers []string, out []byte) {
	t.Helper()
	var found []caddyfile.ServerBlock
	for _, b := range blocks {
		for _, k := range b.Keys {
			if k == key {
				found = append(found, b)
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d server blocks keyed %q, want 1:\n%s", len(found), key, out)
	}
	b := found[0]
	if len(b.Keys) != 1 || len(b.Tokens) != 4 {
		t.Fatalf("stub block %q has keys %q and %d directives, want 1 key and errors, cache, bind, forward:\n%s",
			key, b.Keys, len(b.Tokens), out)
	}
	var fwd []string
	for _, tok := range b.Tokens["forward"] {
		fwd = append(fwd, tok.Text)
	}
	if want := append([]string{"forward", "."}, servers...); strings.Join(fwd, " ") != strings.Join(want, " ") {
		t.Fatalf("stub block %q forwards %q, want %q", key, fwd, want)
	}
}
