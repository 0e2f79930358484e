package deploy

import (
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	// The plugins the agent compiles in register CoreDNS's metrics with the default registry, as in the agent
	// (chart_values_test.go imports the package for its directive list).
	"github.com/nodelocaldns/nodelocaldns/internal/clients"
	"github.com/nodelocaldns/nodelocaldns/internal/dnsserver"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
)

// metricName matches the series names the chart's queries use.
var metricName = regexp.MustCompile(`\b(?:coredns|nodelocaldns)_[a-z0-9_]+`)

// TestChartMetricNamesExist: every series the dashboard and the alerts query is one the agent exports today:
// CoreDNS 1.15's, as its plugins register them (not the pre-1.7 names the community dashboards still query),
// or the agent's own. A name is known when registering a probe of that name fails as a duplicate.
func TestChartMetricNamesExist(t *testing.T) {
	// The agent's registry: our directives' series (our cache's among them) are registered where the agent's
	// own are, in the agent the default registry, here one of the test's.
	agent := prometheus.NewRegistry()
	if _, err := dnsserver.New(zap.NewNop(), dnsserver.Options{Registerer: agent}); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(agent, nil); err != nil {
		t.Fatal(err)
	}
	if err := clients.New(zap.NewNop()).Register(agent); err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	b, err := os.ReadFile(chartDir + "/files/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	var exprs []string
	for _, p := range dash["panels"].([]any) {
		for _, tg := range asSlice(p.(map[string]any)["targets"]) {
			exprs = append(exprs, tg.(map[string]any)["expr"].(string))
		}
	}
	if len(exprs) < 15 {
		t.Fatalf("dashboard has %d queries", len(exprs))
	}
	r := renderChart(t, nil, "prometheusRule.enabled=true")
	exprs = append(exprs, ruleExprs(t, r.other["PrometheusRule kube-system/node-local-dns"])...)

	seen := map[string]bool{}
	for _, e := range exprs {
		names := metricName.FindAllString(e, -1)
		if len(names) == 0 && !strings.HasPrefix(e, "up{") {
			t.Errorf("query %q names no coredns_ or nodelocaldns_ series", e)
		}
		for _, n := range names {
			if seen[n] {
				continue
			}
			seen[n] = true
			if !registered(prometheus.DefaultRegisterer, n) && !registered(agent, n) {
				t.Errorf("%s (in %q) is exported neither by CoreDNS's plugins nor by the agent", n, e)
			}
		}
	}
	// The names the community dashboards still query are gone from CoreDNS 1.15 (and the probe tells them apart).
	for _, n := range []string{"coredns_dns_request_count_total", "coredns_dns_response_rcode_count_total", "coredns_dns_request_type_count_total",
		"coredns_cache_size", "coredns_forward_requests_total", "coredns_forward_request_duration_seconds_bucket"} {
		if registered(prometheus.DefaultRegisterer, n) || registered(agent, n) {
			t.Errorf("%s is registered: expected gone from CoreDNS 1.15", n)
		}
	}
	// The panels the issue asks for, on the agent's own series.
	for _, n := range []string{"nodelocaldns_fail_open", "nodelocaldns_instances", "nodelocaldns_node_capability", "nodelocaldns_foreign_drop_rules", "nodelocaldns_foreign_drop_policy",
		"coredns_nodecache_setup_errors_total", "coredns_dns_requests_total",
		"nodelocaldns_top_client_answers_per_second", "nodelocaldns_top_client_nxdomain_per_second", "coredns_cache_hits_total", "coredns_proxy_request_duration_seconds_count"} {
		if !seen[n] {
			t.Errorf("no panel or alert queries %s", n)
		}
	}
}

// registered reports whether reg already has a metric family named name: registering a probe of that name
// fails when it has (a duplicate, or a clash of labels or help). Histogram series (_bucket, _count, _sum) are
// looked up by their family. An accepted probe is unregistered again.
func registered(reg prometheus.Registerer, name string) bool {
	families := []string{name}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if f, ok := strings.CutSuffix(name, suffix); ok {
			families = append(families, f)
		}
	}
	for _, fam := range families {
		probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: fam, Help: "probe of deploy's chart tests"})
		err := reg.Register(probe)
		if err == nil {
			reg.Unregister(probe)
			continue
		}
		var dup prometheus.AlreadyRegisteredError
		if errors.As(err, &dup) || strings.Contains(err.Error(), "same fully-qualified name") {
			return true
		}
	}
	return false
}

// ruleExprs is every alert expression of a PrometheusRule object.
func ruleExprs(t *testing.T, pr map[string]any) []string {
	t.Helper()
	if pr == nil {
		t.Fatal("no PrometheusRule")
	}
	var exprs []string
	for _, g := range asSlice(pr["spec"].(map[string]any)["groups"]) {
		for _, r := range asSlice(g.(map[string]any)["rules"]) {
			r := r.(map[string]any)
			if _, ok := r["alert"].(string); !ok || r["expr"] == nil {
				t.Errorf("rule %v: want alert and expr", r)
				continue
			}
			exprs = append(exprs, r["expr"].(string))
		}
	}
	if slices.Contains(exprs, "") {
		t.Errorf("an empty expression")
	}
	return exprs
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

// TestDegradedNodeAlert: a node whose kernel lacks a capability (nodelocaldns_node_capability 0, the agent's
// preflight) is named by an alert, at once (the value is set at start and never changes), and listed by the
// dashboard's table.
func TestDegradedNodeAlert(t *testing.T) {
	r := renderChart(t, nil, "prometheusRule.enabled=true")
	var rule map[string]any
	for _, g := range asSlice(r.other["PrometheusRule kube-system/node-local-dns"]["spec"].(map[string]any)["groups"]) {
		for _, ru := range asSlice(g.(map[string]any)["rules"]) {
			if ru.(map[string]any)["alert"] == "NodeLocalDNSDegradedNode" {
				rule = ru.(map[string]any)
			}
		}
	}
	if rule == nil {
		t.Fatal("no alert NodeLocalDNSDegradedNode")
	}
	if e, _ := rule["expr"].(string); !strings.HasPrefix(e, "min by (pod, instance, name) (nodelocaldns_node_capability{") || !strings.HasSuffix(e, "}) == 0") {
		t.Errorf("NodeLocalDNSDegradedNode expr %q: want the capabilities at 0, by pod, instance and name", e)
	}
	if d := rule["annotations"].(map[string]any)["description"].(string); !strings.Contains(d, "$labels.name") || !strings.Contains(d, "$labels.instance") {
		t.Errorf("description %q does not name the node and the capability", d)
	}
	b, err := os.ReadFile(chartDir + "/files/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `min by (instance, pod, name) (nodelocaldns_node_capability{job=~\"$job\", pod=~\"$pod\"}) == 0`) {
		t.Error("the dashboard has no table of the nodes with a capability at 0")
	}
}
