package fastpath_test

import (
	"context"
	"go/parser"
	"go/token"
	"io/fs"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/coredns/caddy"
	coredns "github.com/coredns/coredns/core/dnsserver"
	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/dnscache"
	"github.com/nodelocaldns/nodelocaldns/internal/dnsserver"
)

// What the fast path still takes on trust from CoreDNS, pinned: a CoreDNS bump fails here first, and whoever
// bumps it re-reads these contracts in the new version's source before changing the version below.
//   - core/dnsserver/server.go ServePacket calls Config.UDPDecorateWriterFunc once per Server, with the Server,
//     the last block on a listener winning; NewServer copies it from the blocks (dnscache.Servers).
//   - Server.ServeDNS is the whole of what CoreDNS's UDP server does with a request once miekg/dns read it
//     (ServePacket's handler is two context values and ServeDNS: listener.ServeDNS repeats them).
//   - Server-level behaviour the fast path does not reproduce comes only from plugins our build leaves out:
//     proxy protocol (proxyproto's ConnPolicy), extra opcodes (dynupdate's AllowOpcode) and views (view's
//     FilterFuncs). TSIG secrets are exported and checked.
//   - The directive order puts the plugins of preCache (view.go) before cache, and prometheus before it.
func TestCoreDNSContractsPinned(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s*github\.com/coredns/coredns v1\.15\.0$`).Match(mod) {
		t.Fatal("go.mod's CoreDNS is not v1.15.0: re-read the contracts above in its source, then pin the new version here")
	}
	for _, p := range []string{"proxyproto", "dynupdate", "view"} {
		if slices.Contains(dnsserver.Plugins(), p) {
			t.Errorf("plugin %s is compiled in: the fast path cannot see what it changes in CoreDNS's server", p)
		}
	}
	dirs := dnsserver.Directives()
	if slices.Index(dirs, "prometheus") > slices.Index(dirs, "cache") {
		t.Errorf("prometheus runs after cache in %v: the fast path's metrics assume it runs before", dirs)
	}
}

// The hook delivers the server, once per listener, whichever of the blocks sharing it wins; its ServeDNS
// answers through the block the query's name selects.
func TestServerHookDeliversTheServer(t *testing.T) {
	registerOnce.Do(func() {
		if _, err := dnsserver.New(nopLogger(), dnsserver.Options{}); err != nil {
			t.Fatal(err)
		}
	})
	corefile := "a.example:0 {\n bind 127.0.0.1\n cache 30\n template IN A a.example {\n  answer \"{{ .Name }} 60 IN A 192.0.2.7\"\n }\n}\n" +
		"b.example:0 {\n bind 127.0.0.1\n cache 30\n template IN A b.example {\n  answer \"{{ .Name }} 60 IN A 192.0.2.8\"\n }\n}\n"
	in, err := dnsserver.Input([]byte(corefile), "Corefile")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := caddy.Start(in)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.ShutdownCallbacks(); inst.Stop() })
	servers := dnscache.ServersOf(inst)
	if servers == nil {
		t.Fatal("no dnscache.Servers in the instance's storage: our cache's setup did not run")
	}
	got := servers.Wait(announceTimeout)
	srv := got["127.0.0.1:0"]
	if len(got) != 1 || srv == nil {
		t.Fatalf("servers announced: %v, want the one on 127.0.0.1:0", got)
	}
	if n := len(servers.Caches("127.0.0.1:0")); n != 2 {
		t.Errorf("%d caches on the listener, want the two blocks'", n)
	}
	for name, want := range map[string]string{"x.a.example.": "192.0.2.7", "x.b.example.": "192.0.2.8"} {
		r := new(dns.Msg)
		r.SetQuestion(name, dns.TypeA)
		w := &recorder{}
		ctx := context.WithValue(context.Background(), coredns.Key{}, srv)
		srv.ServeDNS(ctx, w, r)
		if w.msg == nil || len(w.msg.Answer) != 1 || w.msg.Answer[0].(*dns.A).A.String() != want {
			t.Errorf("ServeDNS(%s) = %v, want %s", name, w.msg, want)
		}
	}
}

type recorder struct{ msg *dns.Msg }

func (w *recorder) LocalAddr() net.Addr       { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53} }
func (w *recorder) RemoteAddr() net.Addr      { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4242} }
func (w *recorder) WriteMsg(m *dns.Msg) error { w.msg = m; return nil }
func (w *recorder) Write([]byte) (int, error) { return 0, nil }
func (w *recorder) Close() error              { return nil }
func (w *recorder) TsigStatus() error         { return nil }
func (w *recorder) TsigTimersOnly(bool)       {}
func (w *recorder) Hijack()                   {}

const announceTimeout = 2 * time.Second

func nopLogger() *zap.Logger { return zap.NewNop() }

// Neither the fast path nor our cache reads another project's memory (the reflect-and-unsafe reading of
// CoreDNS's and caddy's fields this replaced broke silently on upgrades): no reflect at all, and unsafe only in
// a file that does not import CoreDNS or caddy (a raw syscall's buffer is not another project's memory).
func TestNoReflectionIntoCoreDNS(t *testing.T) {
	for _, dir := range []string{".", "../dnscache"} {
		pkgs, err := parser.ParseDir(token.NewFileSet(), dir, func(fi fs.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkgs {
			for name, f := range p.Files {
				unsafe, foreign := false, false
				for _, imp := range f.Imports {
					path := strings.Trim(imp.Path.Value, `"`)
					switch {
					case path == "reflect":
						t.Errorf("%s imports reflect", name)
					case path == "unsafe":
						unsafe = true
					case strings.HasPrefix(path, "github.com/coredns/"):
						foreign = true
					}
				}
				if unsafe && foreign {
					t.Errorf("%s imports unsafe beside CoreDNS or caddy", name)
				}
			}
		}
	}
}
