package dnsserver

import (
	"fmt"
	stdlog "log"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	tap "github.com/dnstap/golang-dnstap"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/proto"
)

// kubeDNS is the cluster DNS's Corefile as docs/clients.md ("Towards kube-dns") tells operators to change it,
// with template standing in for the kubernetes plugin (no API server here): the stock log line, dnstap with the
// wire messages to a collector, and the client's address taken off the query before it is answered or forwarded.
const kubeDNS = `cluster.local:0 {
    bind 127.0.0.1
    log
    dnstap tcp://%s full
    rewrite edns0 subnet unset
    template IN A cluster.local {
        answer "{{ .Name }} 5 IN A 10.0.0.1"
    }
}
`

// dnstapCollector reads the dnstap frames CoreDNS sends, as the `dnstap` tool does (`dnstap -l ADDR -y`), and
// delivers each message in the tool's YAML, the DNS message in dig's format.
func dnstapCollector(t *testing.T) (string, <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	frames, out := make(chan []byte, 256), make(chan string, 256)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { conn.Close() })
			in, err := tap.NewFrameStreamInputTimeout(conn, true, time.Second)
			if err != nil {
				t.Errorf("dnstap input: %v", err)
				return
			}
			go in.ReadInto(frames)
		}
	}()
	go func() {
		for f := range frames {
			var dt tap.Dnstap
			if err := proto.Unmarshal(f, &dt); err != nil {
				t.Errorf("dnstap frame: %v", err)
				continue
			}
			if y, ok := tap.YamlFormat(&dt); ok {
				out <- string(y)
			}
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String(), out
}

// startKubeDNS starts stock CoreDNS with kubeDNS's Corefile (caddy.Start, none of this package's renames) and
// returns its UDP address.
func startKubeDNS(t *testing.T, collector string) netip.AddrPort {
	t.Helper()
	in, err := Input([]byte(fmt.Sprintf(kubeDNS, collector)), "Corefile")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := caddy.Start(in)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.ShutdownCallbacks(); inst.Stop() })
	for _, sl := range inst.Servers() {
		if a, ok := sl.LocalAddr().(*net.UDPAddr); ok {
			return a.AddrPort()
		}
	}
	t.Fatal("kube-dns: no UDP listener")
	return netip.AddrPort{}
}

// clientQuery waits for kube-dns's dnstap record of the query for name as it came in.
func clientQuery(t *testing.T, records <-chan string, name string) string {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case y := <-records:
			if strings.Contains(y, "type: CLIENT_QUERY") && strings.Contains(y, name) {
				return y
			}
		case <-deadline:
			t.Fatalf("kube-dns's dnstap recorded no query for %s", name)
		}
	}
}

// TestClientSubnetToKubeDNS: with -upstream-client-subnet (Options.ClientSubnetTo the cluster DNS), kube-dns's
// query log (dnstap) names the pod that asked through the cache; without it, only the node (the agent's
// address). The stock log line names the agent either way: its {remote} is the packet's source.
func TestClientSubnetToKubeDNS(t *testing.T) {
	collector, records := dnstapCollector(t)
	kubeDNS := startKubeDNS(t, collector)
	const pod = "127.0.0.7"
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("on=%v", on), func(t *testing.T) {
			core, logs := observer.New(zap.InfoLevel)
			log := zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core()))
			// CoreDNS's log plugin writes to the standard logger, which the agent's main routes into zap.
			stdlog.SetOutput(LogWriter(log.Named("coredns")))
			stdlog.SetFlags(0)
			t.Cleanup(func() { stdlog.SetOutput(os.Stderr); stdlog.SetFlags(stdlog.LstdFlags) })
			o := Options{}
			if on {
				o.ClientSubnetTo = kubeDNS.Addr()
			}
			s, err := New(log, o)
			if err != nil {
				t.Fatal(err)
			}
			corefile := fmt.Sprintf("cluster.local:0 {\n  bind 127.0.0.1\n  cache 30\n  forward . %s\n}\n", kubeDNS)
			if err := s.Start([]byte(corefile), "Corefile"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Stop() })
			name := fmt.Sprintf("svc-%v.default.svc.cluster.local.", on)
			if r := askFrom(t, udpAddr(t, s), "udp", pod, name); len(r.Answer) != 1 || r.IsEdns0() != nil {
				t.Fatalf("answer %s: want kube-dns's one record, and no OPT (the pod sent none)", r)
			}

			y := clientQuery(t, records, name)
			t.Logf("kube-dns's dnstap (as `dnstap -y` prints it):\n%s", y)
			if !strings.Contains(y, "query_address: 127.0.0.1\n") {
				t.Errorf("the query did not come from the agent (127.0.0.1)")
			}
			subnet := "; SUBNET: " + pod + "/32/0"
			if on != strings.Contains(y, subnet) {
				t.Errorf("on=%v: the record has %q: %v", on, subnet, !on)
			}
			if !on && strings.Contains(y, pod) {
				t.Errorf("off, the record names the pod")
			}

			// kube-dns's stock log line: the packet's source, the agent, either way.
			lines := logs.FilterMessageSnippet(name).All()
			if len(lines) == 0 {
				t.Fatalf("kube-dns's log has no line for %s", name)
			}
			if l := lines[0].Message; !strings.HasPrefix(l, "127.0.0.1:") || strings.Contains(l, pod) {
				t.Errorf("kube-dns's log line %q: want the agent's address, not the pod's", l)
			}
		})
	}
}
