package dnsserver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/nodelocaldns/nodelocaldns/internal/listenlimit"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

func TestCorefileForCaddy(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{".:53 {\n\tprometheus :9253\n}\n", ".:53 {\n\t" + metricsDirective + " :9253\n}\n"},
		{".:53 {\n\tprometheus\n}\n", ".:53 {\n\t" + metricsDirective + "\n}\n"},
		// A zone or an argument that contains the word is left alone; the directive in a snippet is renamed.
		{"prometheus.example.:53 {\n\tprometheus 127.0.0.1:9253\n}\n", "prometheus.example.:53 {\n\t" + metricsDirective + " 127.0.0.1:9253\n}\n"},
		{"(m) {\n\tprometheus :9253\n}\n.:53 {\n\timport m\n}\n", "(m) {\n\t" + metricsDirective + " :9253\n}\n.:53 {\n\timport m\n}\n"},
		{".:53 {\n\twhoami\n}\n", ".:53 {\n\twhoami\n}\n"},
		{".:53 {\n\tprometheus :9253\n", ".:53 {\n\tprometheus :9253\n"}, // does not parse: caddy says why
	} {
		got, err := corefileForCaddy([]byte(c.in), "Corefile")
		if err != nil || string(got) != c.want {
			t.Errorf("corefileForCaddy(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// Users see `prometheus`, in its place in the order; caddy runs ours there.
func TestPrometheusDirectiveInUpstreamsPlace(t *testing.T) {
	d := Directives()
	if i := indexOf(d, "prometheus"); i < 0 || indexOf(d, metricsDirective) >= 0 {
		t.Errorf("Directives() = %v: want prometheus, and not %s", d, metricsDirective)
	}
	// A prometheus in an imported file would run upstream's setup: refused.
	dir := t.TempDir()
	imported := dir + "/metrics.conf"
	if err := os.WriteFile(imported, []byte("prometheus :9253\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := corefileForCaddy([]byte(".:53 {\n\timport "+imported+"\n}\n"), dir+"/Corefile"); err == nil || !strings.Contains(err.Error(), "imported file") {
		t.Errorf("prometheus in an imported file: %v, want refused", err)
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// The standard Corefile's `prometheus` serves upstream's series (coredns_build_info, the requests counted by its
// handler), on a listener bounded as listenlimit.CoreDNSMetrics that stays open across a reload: a source
// holding PerSource idle connections gets its next one reset, while a scrape from another source is served.
func TestPrometheusServesBounded(t *testing.T) {
	metricsAddr := freeTCP(t)
	dns := freeTCP(t)
	host, port, _ := net.SplitHostPort(dns)
	corefile := fmt.Sprintf(".:%s {\n\tbind %s\n\twhoami\n\tprometheus %s\n}\n", port, host, metricsAddr)
	// The default registry, as the agent passes it: upstream's plugins register their series there at init.
	s, err := New(zaptest.NewLogger(t), Options{Registerer: prometheus.DefaultRegisterer, Gatherer: prometheus.DefaultGatherer})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start([]byte(corefile), "Corefile"); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	query(t, udpAddr(t, s), "example.org")

	scrape := func(from string) string {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
		c, err := d.Dial("tcp", metricsAddr)
		if err != nil {
			t.Fatalf("scrape from %s: %v", from, err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
		b, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("scrape from %s: %v", from, err)
		}
		return string(b)
	}
	// The handler counts a request after its answer is written: wait for the count (bounded).
	body, i := scrape("127.0.0.1"), 0
	testenv.Eventually(t, 5*time.Second, "coredns_dns_requests_total in a scrape", func() bool {
		if strings.Contains(body, "coredns_dns_requests_total{") {
			return true
		}
		body, i = scrape(fmt.Sprintf("127.0.1.%d", 1+i%250)), i+1 // a source each: a scraped connection is held 0.5 s more
		return false
	})
	for _, want := range []string{"coredns_build_info{", `coredns_dns_requests_total{`, `coredns_plugin_enabled{`} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}

	// One source (not the first scrape's: the server keeps a connection it answered half a second after its
	// answer, net/http's reset avoidance) holds its share idle; its next connection is reset, another source's
	// scrape is served.
	flooder := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}
	var held []net.Conn
	for range listenlimit.CoreDNSMetrics().PerSource {
		c, err := flooder.Dial("tcp", metricsAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	// The reset may come before connect returns.
	if extra, err := flooder.Dial("tcp", metricsAddr); err == nil {
		defer extra.Close()
		extra.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, err = extra.Read(make([]byte, 1))
		if err == nil || isTimeoutErr(err) {
			t.Errorf("connection %d of one source: read %v, want it reset", len(held)+1, err)
		}
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatal(err)
	}
	if body := scrape("127.0.0.2"); !strings.Contains(body, "coredns_build_info{") {
		t.Errorf("scrape from another source while one holds its share: %.200q", body)
	}

	// A reload keeps the listener: the idle connections stay open.
	if _, err := s.Reload([]byte(corefile + "\n")); err != nil {
		t.Fatal(err)
	}
	held[0].SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := held[0].Read(make([]byte, 1)); !isTimeoutErr(err) {
		t.Errorf("an idle connection across a reload: read %v, want it still open", err)
	}
}

// freeTCP is an address on 127.0.0.1 nothing listens on, below the ephemeral range (testenv.FreePort).
func freeTCP(t *testing.T) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", testenv.FreePort(t, "tcp"))
}

func isTimeoutErr(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
