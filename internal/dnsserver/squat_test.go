package dnsserver

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// TestSquattedPortNamesHolder: a port the Corefile binds (DNS over TCP and UDP, our health) held by a socket
// without SO_REUSEPORT fails Start with an error that names the port and the process holding it (this test
// process, holding it through a plain listener). The prometheus directive only logs a bind it cannot make and
// serves on without metrics, as upstream's does: its log line names the holder.
func TestSquattedPortNamesHolder(t *testing.T) {
	for _, which := range []string{"prometheus", "health", "dns tcp", "dns udp"} {
		t.Run(which, func(t *testing.T) {
			squat := func(netw string) string {
				if netw == "udp" {
					pc, err := net.ListenPacket("udp", "127.0.0.1:0")
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { pc.Close() })
					return pc.LocalAddr().String()
				}
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ln.Close() })
				return ln.Addr().String()
			}
			// A port nothing holds, below the ephemeral range: a port bound and released there was handed to
			// the squatter's bind to port 0 next (an arm64 run under qemu-user: the health listener's port was
			// "held by" the prometheus squatter).
			free := func() string { return net.JoinHostPort("127.0.0.1", testenv.FreePort(t, "tcp")) }
			dnsAddr, prom, health := free(), free(), free()
			var held string
			switch which {
			case "dns tcp":
				held = squat("tcp")
				dnsAddr = held
			case "dns udp":
				held = squat("udp")
				dnsAddr = held
			case "prometheus":
				held = squat("tcp")
				prom = held
			case "health":
				held = squat("tcp")
				health = held
			}
			host, port, _ := net.SplitHostPort(dnsAddr)
			corefile := fmt.Sprintf(".:%s {\n\tbind %s\n\twhoami\n\tprometheus %s\n\thealth %s\n}\n", port, host, prom, health)
			core, logs := observer.New(zapcore.InfoLevel)
			s, err := New(zap.New(core), Options{})
			if err != nil {
				t.Fatal(err)
			}
			err = s.Start([]byte(corefile), "Corefile")
			msg := fmt.Sprint(err)
			if which == "prometheus" {
				if err != nil {
					t.Fatalf("Start with CoreDNS's metrics port held: %v (CoreDNS serves on without it)", err)
				}
				// It serves. The answer also means CoreDNS's servers have started: a Stop before they have
				// misses them and waits for them forever (caddy's Instance.Wait).
				query(t, udpAddr(t, s), "example.org")
				s.Stop()
				for _, e := range logs.FilterMessageSnippet("metrics listener not opened").All() {
					msg = fmt.Sprint(e.ContextMap()["error"])
				}
			} else if err == nil {
				s.Stop()
				t.Fatalf("Start with %s held by another socket succeeded", held)
			}
			_, heldPort, _ := net.SplitHostPort(held)
			for _, want := range []string{"port " + heldPort + " is held by", "pid " + strconv.Itoa(os.Getpid())} {
				if !strings.Contains(msg, want) {
					t.Errorf("error lacks %q:\n%v", want, msg)
				}
			}
			t.Logf("%v", msg)
		})
	}
}
