package corefile

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestCanonicalServer(t *testing.T) {
	ok := map[string]string{
		"192.0.2.1":               "192.0.2.1",
		"192.0.2.1:5353":          "192.0.2.1:5353",
		"192.0.2.1:053":           "192.0.2.1:53",
		"2001:db8::1":             "2001:db8::1",
		"2001:DB8::0001":          "2001:db8::1",
		"[2001:db8::1]:53":        "[2001:db8::1]:53",
		"dns://192.0.2.1":         "dns://192.0.2.1",
		"tls://[2001:db8::1]:853": "tls://[2001:db8::1]:853",
		"::ffff:192.0.2.1":        "::ffff:192.0.2.1",
	}
	for in, want := range ok {
		got, err := canonicalServer(in)
		if err != nil || got != want {
			t.Errorf("canonicalServer(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	// Every character that means something to the Corefile lexer must be refused, wherever it sits.
	var bad []string
	for _, c := range []string{" ", "\t", "\n", "\r", "{", "}", `"`, "'", "#", "\\", "`", "$", "\x00", ";", ","} {
		bad = append(bad, "192.0.2.1"+c, c+"192.0.2.1", "192.0.2.1"+c+":53", "[2001:db8::1]"+c+":53", "dns://"+c+"192.0.2.1")
	}
	bad = append(bad, "", "ns1.example.com", "ns1.example.com:53", "/etc/resolv.conf", "resolv.conf", "192.0.2.1:0",
		"192.0.2.1:65536", "192.0.2.1:-1", "[192.0.2.1]:53", "fe80::1%eth0", "[fe80::1%eth0]:53", "https://192.0.2.1",
		"DNS://192.0.2.1", "dns://dns://192.0.2.1", "unix:///tmp/s", "192.0.2.256", "0192.0.2.1", "1.2.3", "{$HOME}")
	for _, in := range bad {
		if got, err := canonicalServer(in); err == nil {
			t.Errorf("canonicalServer(%q) = %q, want an error", in, got)
		}
	}
}

func TestCheckDomain(t *testing.T) {
	for _, d := range []string{"a", "acme.local", "10.in-addr.arpa", "x-1.y2.z", strings.Repeat("a", 63) + ".b"} {
		if err := checkDomain(d); err != nil {
			t.Errorf("checkDomain(%q) = %v, want nil", d, err)
		}
	}
	for _, d := range []string{"", ".", "a.", ".a", "a..b", "-a.b", "a-.b", "A.b", "a_b", "a b", "a:53", "a{", "*.a",
		"é.local", strings.Repeat("a", 64) + ".b", strings.Repeat("a.", 127) + "ab"} {
		if err := checkDomain(d); err == nil {
			t.Errorf("checkDomain(%q) = nil, want an error", d)
		}
	}
}

func TestLoadKubeDNSDirectory(t *testing.T) {
	t.Run("missing", func(t *testing.T) {
		kd, err := LoadKubeDNS(filepath.Join(t.TempDir(), "nope"))
		if err != nil || !reflect.DeepEqual(kd, KubeDNS{}) {
			t.Fatalf("got %+v, %v; want zero config, no error", kd, err)
		}
	})
	t.Run("empty", func(t *testing.T) {
		kd, err := LoadKubeDNS(t.TempDir())
		if err != nil || !reflect.DeepEqual(kd, KubeDNS{}) {
			t.Fatalf("got %+v, %v; want zero config, no error", kd, err)
		}
	})
	t.Run("not a directory", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadKubeDNS(f); err == nil || !strings.Contains(err.Error(), "not a directory") {
			t.Fatalf("got %v, want a not-a-directory error", err)
		}
	})
	t.Run("dangling key symlink is an absent key", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Symlink("..data/stubDomains", filepath.Join(dir, keyStubDomains)); err != nil {
			t.Fatal(err)
		}
		kd, err := LoadKubeDNS(dir)
		if err != nil || !reflect.DeepEqual(kd, KubeDNS{}) {
			t.Fatalf("got %+v, %v; want zero config", kd, err)
		}
	})
	// A ConfigMap volume has no directories among its keys; one that appears is skipped, by this reader as by
	// the watcher (internal/volume), so what is loaded is what the watcher hashes.
	t.Run("key that is a directory is an absent key", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, keyUpstreamNameservers), 0o755); err != nil {
			t.Fatal(err)
		}
		kd, err := LoadKubeDNS(dir)
		if err != nil || !reflect.DeepEqual(kd, KubeDNS{}) {
			t.Fatalf("got %+v, %v; want zero config", kd, err)
		}
	})
	t.Run("canonical values", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, keyStubDomains, `{"b.example": ["2001:DB8::1"], "a.example": ["192.0.2.1:053"]}`)
		write(t, dir, keyUpstreamNameservers, `["tls://198.51.100.1"]`)
		kd, err := LoadKubeDNS(dir)
		want := KubeDNS{
			StubDomains:         map[string][]string{"a.example": {"192.0.2.1:53"}, "b.example": {"2001:db8::1"}},
			UpstreamNameservers: []string{"tls://198.51.100.1"},
		}
		if err != nil || !reflect.DeepEqual(kd, want) {
			t.Fatalf("got %+v, %v; want %+v", kd, err, want)
		}
	})
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestServiceHostEnv(t *testing.T) {
	for svc, want := range map[string]string{
		"kube-dns-upstream": "KUBE_DNS_UPSTREAM_SERVICE_HOST",
		"kube-dns":          "KUBE_DNS_SERVICE_HOST",
		"coredns":           "COREDNS_SERVICE_HOST",
	} {
		if got := ServiceHostEnv(svc); got != want {
			t.Errorf("ServiceHostEnv(%q) = %q, want %q", svc, got, want)
		}
	}
}
