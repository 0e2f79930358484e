package harness

import (
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// Answers of the servers the fail-safe tests add beside the agent and kube-dns.
const (
	AnswerRogue     = "203.0.113.66" // whoever takes kube-dns-upstream's freed ClusterIP
	AnswerNodeCache = "203.0.113.7"  // node-cache, back after a rollback
)

// Who names the server an answer came from: agent, kube-dns, rogue, node-cache, or none.
func Who(answer string) string {
	switch answer {
	case AnswerAgent:
		return "agent"
	case AnswerKubeDNS:
		return "kube-dns"
	case AnswerRogue:
		return "rogue"
	case AnswerNodeCache:
		return "node-cache"
	case "":
		return "none"
	}
	return "unknown " + answer
}

// Dig is dig's short answer to cmd (a dig command line), "" on a timeout, a refusal or an error.
func Dig(cmd *exec.Cmd) string {
	b, _ := cmd.CombinedOutput()
	if s := strings.TrimSpace(string(b)); !strings.Contains(s, ";;") {
		return s
	}
	return ""
}

// AskEverywhere asks both addresses (LocalIP, ClusterIP) from pod and from the node, over UDP and TCP, with
// dig (an independent client), and says who answered each: "pod udp link-local" -> "kube-dns".
func AskEverywhere(pod *testenv.Peer, name string) map[string]string {
	out := map[string]string{}
	for _, from := range []string{"pod", "node"} {
		for _, proto := range []string{"udp", "tcp"} {
			for target, ip := range map[string]string{"link-local": LocalIP, "ClusterIP": ClusterIP} {
				args := []string{"+short", "+tries=1", "+time=1", "@" + ip, name, "A"}
				if proto == "tcp" {
					args = append(args, "+tcp")
				}
				cmd := exec.Command("dig", args...)
				if from == "pod" {
					cmd = pod.Command("dig", args...)
				}
				out[from+" "+proto+" "+target] = Who(Dig(cmd))
			}
		}
	}
	return out
}

// ExpectEverywhere asks as AskEverywhere does and fails for each query not answered by want(query).
func ExpectEverywhere(t testing.TB, pod *testenv.Peer, phase string, want func(query string) string) map[string]string {
	t.Helper()
	got := AskEverywhere(pod, "failsafe.default.svc.cluster.local.")
	Expect(t, phase, got, want)
	return got
}

// Expect compares what AskEverywhere got with want, one error per query answered by another.
func Expect(t testing.TB, phase string, got map[string]string, want func(query string) string) {
	t.Helper()
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if e := want(k); got[k] != e {
			t.Errorf("%s: %s answered by %s, want %s", phase, k, got[k], e)
		}
	}
}

// All wants every query answered by who.
func All(who string) func(string) string { return func(string) string { return who } }
