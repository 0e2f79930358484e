package metrics

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// scrape serves reg on a free loopback port and returns the text exposition.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	addr := serve(t, reg)
	var resp *http.Response
	testenv.EventuallyNil(t, 5*time.Second, "GET /metrics", func() (err error) {
		resp, err = http.Get("http://" + addr + "/metrics")
		return err
	})
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Dashboards built for node-cache must find every one of its series, at zero, before anything happened.
func TestNodeCacheSeriesPreinitialised(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg, nil); err != nil {
		t.Fatal(err)
	}
	out := scrape(t, reg)
	for _, typ := range []string{"iptables", "iptables_lock", "interface_add", "interface_check", "configmap", "nftables"} {
		want := `coredns_nodecache_setup_errors_total{errortype="` + typ + `"} 0`
		if !strings.Contains(out, want) {
			t.Errorf("missing %s in:\n%s", want, out)
		}
	}
}

func TestRuleCountersAreReadAtScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	reads := 0
	counters := []RuleCounter{{Chain: "raw-prerouting", Comment: "NodeLocal DNS Cache: skip conntrack: ipv4 udp queries", Packets: 7, Bytes: 420}}
	if _, err := New(reg, func() ([]RuleCounter, error) { reads++; return counters, nil }); err != nil {
		t.Fatal(err)
	}
	out := scrape(t, reg)
	for _, want := range []string{
		`nodelocaldns_nftables_packets_total{chain="raw-prerouting",rule="NodeLocal DNS Cache: skip conntrack: ipv4 udp queries"} 7`,
		`nodelocaldns_nftables_bytes_total{chain="raw-prerouting",rule="NodeLocal DNS Cache: skip conntrack: ipv4 udp queries"} 420`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %s in:\n%s", want, out)
		}
	}
	if reads != 1 {
		t.Errorf("counters read %d times for one scrape, want 1", reads)
	}
}

// A failing read (a race with a repair, no permission) leaves the counters out of that scrape and must not fail
// the scrape: the default registry also backs CoreDNS's prometheus endpoint, which answers 500 to any error.
func TestRuleCounterErrorKeepsTheScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg, func() ([]RuleCounter, error) { return nil, errors.New("chain vanished") }); err != nil {
		t.Fatal(err)
	}
	gathered, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather error = %v; a counter read failure must not fail the scrape", err)
	}
	found := false
	for _, mf := range gathered {
		switch mf.GetName() {
		case "coredns_nodecache_setup_errors_total":
			found = true
		case "nodelocaldns_nftables_packets_total":
			t.Error("counters exported although the read failed")
		}
	}
	if !found {
		t.Error("setup error series lost because the counter read failed")
	}
}
