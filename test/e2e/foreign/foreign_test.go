package foreign

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	nftforeign "github.com/nodelocaldns/nodelocaldns/internal/nft/foreign"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// Conventions: harness.NewNode's node, where the agent runs, with a pod and kube-dns hanging off it by veth; the
// pod queries harness.ClusterIP:53 and harness.LocalIP:53, and each answer says who served it.
const queryTimeout = 2 * time.Second

// Outcomes of one query, as the pod sees them.
const (
	fromKubeDNS = "answer from kube-dns"
	fromAgent   = "answer from the agent"
	timedOut    = "timeout"
	refused     = "refused (ICMP unreachable)"
)

// firewall is one foreign drop on the DNS path: how to put it in place and take it away, and what the
// foreign-drop check must report (chain, policy drop, number of drop/reject rules).
type firewall struct {
	name         string
	add, remove  func(t *testing.T)
	chain        string
	policy       bool
	rules        int
	withoutAgent string // what the pod sees for harness.ClusterIP without the agent
	withAgent    string // ... and with it (for both addresses)
}

func firewalls() []firewall {
	return []firewall{
		{name: "none", add: func(*testing.T) {}, remove: func(*testing.T) {},
			withoutAgent: fromKubeDNS, withAgent: fromAgent},
		{name: "iptables -P INPUT DROP (iptables-nft)",
			add: func(t *testing.T) {
				// Loopback and replies stay open, as on every host firewall: the agent's metrics listen on
				// loopback, and its upstream's answers are replies (established) to the agent's forwards.
				testenv.Run(t, "iptables", "-A", "INPUT", "-i", "lo", "-j", "ACCEPT")
				testenv.Run(t, "iptables", "-A", "INPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT")
				testenv.Run(t, "iptables", "-P", "INPUT", "DROP")
			},
			remove: func(t *testing.T) {
				testenv.Run(t, "iptables", "-P", "INPUT", "ACCEPT")
				testenv.Run(t, "iptables", "-F", "INPUT")
			},
			chain: "ip filter/INPUT", policy: true, rules: 0,
			withoutAgent: fromKubeDNS, withAgent: fromKubeDNS},
		{name: "inet table: udp dport 53 reject on input",
			add: func(t *testing.T) {
				testenv.NftApply(t, "table inet fw {\n\tchain input {\n\t\ttype filter hook input priority 0; policy accept;\n\t\tudp dport 53 reject\n\t}\n}\n")
			},
			remove: func(t *testing.T) { testenv.Run(t, "nft", "delete", "table", "inet", "fw") },
			chain:  "inet fw/input", policy: false, rules: 1,
			withoutAgent: fromKubeDNS, withAgent: fromKubeDNS},
	}
}

func TestWhatAPodSeesUnderAForeignDrop(t *testing.T) {
	testenv.RequireRoot(t)
	pod := harness.NewNode(t).Pod

	var report []string
	for _, fw := range firewalls() {
		t.Run(fw.name, func(t *testing.T) {
			fw.add(t)
			removed := false
			defer func() {
				if !removed {
					fw.remove(t)
				}
			}()
			checkDetected(t, fw)
			withoutAgent := ask(t, pod, harness.ClusterIP)
			if withoutAgent != fw.withoutAgent {
				t.Errorf("without the agent, clusterIP: the pod sees %q, want %q", withoutAgent, fw.withoutAgent)
			}

			a := startAgent(t)
			a.WaitReady()
			gotCluster, gotLocal := ask(t, pod, harness.ClusterIP), ask(t, pod, harness.LocalIP)
			if gotCluster != fw.withAgent {
				t.Errorf("with the agent, clusterIP: the pod sees %q, want %q", gotCluster, fw.withAgent)
			}
			if gotLocal != fw.withAgent {
				t.Errorf("with the agent, localIP: the pod sees %q, want %q", gotLocal, fw.withAgent)
			}
			checkDetected(t, fw)
			if fw.policy { // the agent's own report: one warning per drop-policy chain
				a.WaitLog(5*time.Second, "the foreign drop policy warning", func(l harness.LogLine) bool {
					return l.Level == "warn" && l.Raw["chain"] == fw.chain && strings.Contains(l.Msg, "drops by policy")
				})
			}
			takenBack := "-"
			if fw.chain != "" {
				// It stepped aside for both addresses, said so once each, and takes them back when the drop goes.
				for _, ip := range []string{harness.LocalIP, harness.ClusterIP} {
					if v, _ := a.Metric(`nodelocaldns_stepped_aside{ip="` + ip + `"}`); v != 1 {
						t.Errorf("nodelocaldns_stepped_aside{ip=%q} = %v, want 1", ip, v)
					}
				}
				fw.remove(t)
				removed = true
				testenv.Eventually(t, 5*time.Second, "the agent answering again once the drop is gone", func() bool {
					return ask(t, pod, harness.ClusterIP) == fromAgent
				})
				takenBack = ask(t, pod, harness.LocalIP)
				if takenBack != fromAgent {
					t.Errorf("after the drop went, localIP: the pod sees %q, want %q", takenBack, fromAgent)
				}
				if n := countLogs(a, "stepping aside for a local IP"); n != 2 {
					t.Errorf("%d step-aside warnings, want one per address (2)", n)
				}
			}
			stopped := time.Now()
			if code := a.Stop(10 * time.Second); code != 0 {
				t.Errorf("agent exit code %d", code)
			}
			t.Logf("agent stopped in %v", time.Since(stopped))
			report = append(report, fmt.Sprintf("%-42s | %-22s | %-26s | %-26s | %s", fw.name, withoutAgent, gotCluster, gotLocal, takenBack))
		})
	}
	writeReport(t, append([]string{fmt.Sprintf("%-42s | %-22s | %-26s | %-26s | %s", "foreign drop", "without agent: clusterIP",
		"with agent: clusterIP", "with agent: localIP", "drop removed: localIP")}, report...))
}

// countLogs counts the agent's log lines whose message starts with msg.
func countLogs(a *harness.Agent, msg string) int {
	n := 0
	for _, l := range a.Lines() {
		if strings.HasPrefix(l.Msg, msg) {
			n++
		}
	}
	return n
}

// checkDetected asks the foreign-drop check, as the agent would, and compares with what fw put in place.
func checkDetected(t *testing.T, fw firewall) {
	t.Helper()
	drops, err := nftforeign.ScanDrops(53, nft.TableName)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(drops, func(d nftforeign.Drop) bool { return d.Chain == fw.chain })
	switch {
	case fw.chain == "" && len(drops) > 0:
		t.Errorf("ScanDrops = %+v, want none", drops)
	case fw.chain != "" && i < 0:
		t.Errorf("ScanDrops = %+v, want %s", drops, fw.chain)
	case fw.chain != "" && (drops[i].Policy != fw.policy || len(drops[i].Rules) != fw.rules):
		t.Errorf("ScanDrops[%s] = %+v, want policy drop %v and %d rules", fw.chain, drops[i], fw.policy, fw.rules)
	}
}

// ask sends one UDP query from the pod and names the outcome.
func ask(t *testing.T, pod *testenv.Peer, server string) string {
	t.Helper()
	var got string
	pod.Do(t, func() {
		addr, err := harness.Lookup(net.JoinHostPort(server, "53"), "udp", "probe.cluster.local", queryTimeout)
		var ne net.Error
		switch {
		case err == nil && addr == harness.AnswerKubeDNS:
			got = fromKubeDNS
		case err == nil && addr == harness.AnswerAgent:
			got = fromAgent
		case errors.Is(err, syscall.ECONNREFUSED):
			got = refused
		case errors.As(err, &ne) && ne.Timeout():
			got = timedOut
		case err != nil:
			got = "error: " + err.Error()
		default:
			got = "answer " + addr
		}
	})
	return got
}

func startAgent(t *testing.T) *harness.Agent {
	t.Helper()
	a := harness.Start(t, harness.Config{
		Args:         []string{"-localip", harness.LocalIP + "," + harness.ClusterIP, "-upstreamsvc", "kube-dns-upstream", "-health-port", "8080"},
		BaseCorefile: harness.StandardCorefile(harness.LocalIP, harness.ClusterIP, "cluster.local"),
		Env:          []string{"KUBE_DNS_UPSTREAM_SERVICE_HOST=" + harness.UpstreamClusterIP, "KUBE_DNS_SERVICE_HOST=" + harness.ClusterIP},
	})
	t.Cleanup(func() { a.Stop(10 * time.Second) })
	return a
}

// writeReport logs the table and writes it to $NODELOCALDNS_TEST_REPORTS/foreign-drops.txt when set.
func writeReport(t *testing.T, lines []string) {
	text := strings.Join(lines, "\n") + "\n"
	t.Logf("what a pod sees:\n%s", text)
	if dir := os.Getenv("NODELOCALDNS_TEST_REPORTS"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "foreign-drops.txt"), []byte(text), 0o644); err != nil {
			t.Errorf("write report: %v", err)
		}
	}
}
