package lifecycle

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// Conventions: harness.NewNode's node (the test's own throwaway namespace, where the agent runs and creates its
// interface ifname holding harness.LocalIP and harness.ClusterIP), with a pod and kube-dns hanging off it by
// veth; the pod sends the load to both addresses.
const (
	newIP  = "169.254.20.11" // the address a surge rollout adds to -localip
	ifname = "nodelocaldns"
	table  = "inet nodelocaldns"
	// fallbackTable is the link-local fallback's table: not an instance's, and it outlives them all.
	fallbackTable = "nodelocaldns-fallback"
	readyURL      = "http://" + harness.LocalIP + ":8080/ready"
	healthURL     = "http://" + harness.LocalIP + ":8080/health"
)

// family is what a cluster of one IP family gives the agent: the node-local address and the kube-dns ClusterIP
// (the pod's two ways to DNS, and -localip), and the kube-dns-upstream ClusterIP it forwards to.
type family struct {
	local, clusterIP, upstreamClusterIP string
}

var (
	ipv4 = family{harness.LocalIP, harness.ClusterIP, harness.UpstreamClusterIP}
	ipv6 = family{harness.LocalIP6, harness.ClusterIP6, harness.UpstreamClusterIP6}
)

// node is the fixture around the agents.
type node struct {
	t *testing.T
	*harness.Node
	fam family
	env []string // more environment for the agents, after (and so over) the service links below
	bin string   // the agents' binary; "" = harness.Binary's
}

func newNode(t *testing.T) *node {
	t.Helper()
	return &node{t: t, Node: harness.NewNode(t), fam: ipv4}
}

// newNode6 is the node of an IPv6-only cluster.
func newNode6(t *testing.T) *node {
	t.Helper()
	return &node{t: t, Node: harness.NewNode6(t), fam: ipv6}
}

// start runs an agent with node-cache's DaemonSet flags plus extra.
func (n *node) start(extra ...string) *harness.Agent {
	n.t.Helper()
	return n.startWith(n.fam.local+","+n.fam.clusterIP, n.fam.clusterIP, extra...)
}

// startWith runs an agent listening on localips (the -localip value); bind is what the Corefile binds besides
// the node-local address.
func (n *node) startWith(localips, bind string, extra ...string) *harness.Agent {
	n.t.Helper()
	return n.startCorefile(localips, harness.StandardCorefile(n.fam.local, bind, "cluster.local"), extra...)
}

// startCorefile runs an agent with the given base Corefile.
func (n *node) startCorefile(localips, corefile string, extra ...string) *harness.Agent {
	n.t.Helper()
	args := append([]string{"-localip", localips, "-upstreamsvc", "kube-dns-upstream", "-health-port", "8080"}, extra...)
	var stderr io.Writer
	if os.Getenv("LIFECYCLE_AGENT_LOG") != "" {
		stderr = os.Stderr
	}
	return harness.Start(n.t, harness.Config{
		Bin:          n.bin,
		Args:         args,
		BaseCorefile: corefile,
		Env:          append([]string{"KUBE_DNS_UPSTREAM_SERVICE_HOST=" + n.fam.upstreamClusterIP, "KUBE_DNS_SERVICE_HOST=" + n.fam.clusterIP}, n.env...),
		Stderr:       stderr,
	})
}

// instanceTables lists the instance tables (inet nodelocaldns, nodelocaldns-<n>) in the kernel, as the nft tool
// sees them.
func instanceTables(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(testenv.Run(t, "nft", "list", "tables"), "\n") {
		name, ok := strings.CutPrefix(strings.TrimSpace(line), "table inet ")
		if ok && (name == "nodelocaldns" || strings.HasPrefix(name, "nodelocaldns-")) && name != fallbackTable &&
			!strings.HasSuffix(name, "-drain") { // a leaving instance's drain table: no instance's
			out = append(out, name)
		}
	}
	return out
}

func ourTables(t *testing.T) int { return len(instanceTables(t)) }

var (
	countersRE = regexp.MustCompile(`counter packets \d+ bytes \d+`)
	progname   = regexp.MustCompile(` # progname \S+`)
)

// listing is the only instance table as `nft list table` prints it, counters zeroed, its name and owning
// process normalised, "" when there is none.
func listing(t *testing.T) string {
	t.Helper()
	tables := instanceTables(t)
	if len(tables) == 0 {
		return ""
	}
	out, err := exec.Command("nft", "list", "table", "inet", tables[0]).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list table %s: %v\n%s", tables[0], err, out)
	}
	l := countersRE.ReplaceAllString(string(out), "counter packets 0 bytes 0")
	l = progname.ReplaceAllString(l, "")
	return strings.Replace(l, "table inet "+tables[0]+" {", "table "+table+" {", 1)
}

// requireOneCopy checks the kernel holds exactly one instance table with no rule twice, and returns its listing.
func requireOneCopy(t *testing.T) string {
	t.Helper()
	if n := ourTables(t); n != 1 {
		t.Fatalf("nft list tables shows %d instance tables, want 1:\n%s", n, testenv.Run(t, "nft", "list", "tables"))
	}
	l := listing(t)
	seen := map[string]bool{}
	for _, line := range strings.Split(l, "\n") {
		line = strings.TrimSpace(line)
		if !strings.Contains(line, "comment ") {
			continue
		}
		if seen[line] {
			t.Fatalf("rule listed twice in table %s: %s\n%s", table, line, l)
		}
		seen[line] = true
	}
	if len(seen) == 0 {
		t.Fatalf("table %s has no rules:\n%s", table, l)
	}
	return l
}

// linkExists reports whether our interface exists in the node namespace, per `ip link`.
func linkExists(t *testing.T) bool {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link", "show", "dev", ifname).CombinedOutput()
	if err == nil {
		return true
	}
	if strings.Contains(string(out), "does not exist") {
		return false
	}
	t.Fatalf("ip link show dev %s: %v\n%s", ifname, err, out)
	return false
}

// requireNothingLeft checks a graceful stop removed both the table and the interface.
func requireNothingLeft(t *testing.T) {
	t.Helper()
	if n := ourTables(t); n != 0 {
		t.Errorf("instance table left behind after a graceful stop:\n%s", listing(t))
	}
	if linkExists(t) {
		t.Errorf("interface %s left behind after a graceful stop:\n%s", ifname, testenv.Run(t, "ip", "addr", "show", "dev", ifname))
	}
}

// ready asks /ready on the Corefile's health address: the HTTP status, or 0 when nothing answers.
func ready() (int, string) { return probe(readyURL) }

// ready asks /ready on n's node-local address.
func (n *node) ready() (int, string) {
	return probe("http://" + net.JoinHostPort(n.fam.local, "8080") + "/ready")
}

// probe asks url as the kubelet's probes do: the HTTP status, or 0 when nothing answers.
func probe(url string) (int, string) {
	c := &http.Client{Timeout: 500 * time.Millisecond}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
}
