package main

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
)

// answer is what `dnsq q` printed: the rcode and the answer records in zone-file form.
type answer struct {
	rcode   string
	records []string
}

func (a answer) has(rtype, data string) bool {
	for _, rr := range a.records {
		f := strings.Split(rr, "\t")
		if len(f) >= 5 && f[3] == rtype && strings.Contains(f[4], data) {
			return true
		}
	}
	return false
}

func (a answer) String() string { return a.rcode + " " + strings.Join(a.records, " | ") }

func parseAnswer(out string) answer {
	var a answer
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if r, ok := strings.CutPrefix(l, "rcode="); ok {
			a.rcode = r
		} else if l != "" {
			a.records = append(a.records, l)
		}
	}
	return a
}

// query asks from inside a pod (kubectl exec … dnsq q).
// sport, when not 0, is the source port of its first try (dnsq q -sport: the tries use sport, sport+1, sport+2).
func query(ctx context.Context, c *cluster, pod, server string, tcp bool, qtype, name string, sport int) (answer, error) {
	args := []string{"/dnsq", "q", "-type", qtype}
	if sport != 0 {
		args = append(args, "-sport", fmt.Sprint(sport))
	}
	if server != "" {
		args = append(args, "-server", server)
	}
	if tcp {
		args = append(args, "-tcp")
	}
	out, err := c.exec(ctx, "default", pod, append(args, name)...)
	if err != nil {
		return answer{}, err
	}
	return parseAnswer(out), nil
}

// hostQuery asks from the node's own network namespace (the driver's dnsq), without kubectl exec in between:
// the ConfigMap cases poll with it.
func hostQuery(ctx context.Context, n *node, server, qtype, name string) (answer, error) {
	out, err := n.sh(ctx, n.cfg.dnsq, "q", "-server", server, "-type", qtype, name)
	if err != nil {
		return answer{}, err
	}
	return parseAnswer(out), nil
}

func want(a answer, rtype, data string) error {
	if a.rcode != "NOERROR" || !a.has(rtype, data) {
		return fmt.Errorf("got %s, want NOERROR with %s %s", a, rtype, data)
	}
	return nil
}

// dnsCases: a pod resolves through the cache by the ClusterIP and the local IP, over UDP and TCP, with no
// conntrack entry for those flows; so does a hostNetwork pod; and the cases of Kubernetes' DNS conformance test.
func dnsCases(ctx context.Context, c *cluster, r *results, prefix string) {
	kname := "kubernetes.default.svc." + clusterDomain
	// The conntrack check must see only the flows of the queries below, made once the cache intercepts. So first
	// wait for that state (the standard DaemonSet has no readiness probe: it is Ready, and answers /health,
	// before the agent has put its table in), then delete every DNS entry to those addresses, made before it
	// while queries rightly went to kube-dns through kube-proxy, and only then query and look. And look only at
	// these queries' flows, by their source ports: the agent's own queries to its address before its table is
	// in (CoreDNS's loop probes, one per server block, and /health's probe) are tracked, rightly, and a
	// host-network client's flow to the local IP has the same addresses.
	intercepting := waitIntercepting(ctx, c.local)
	if intercepting == nil {
		for _, ip := range []string{kubeDNSIP, localDNSIP} {
			flushConntrackDNS(ctx, c.local, ip)
		}
	}
	sports := map[string][]int{} // by server: the source ports of its queries' tries
	for _, pod := range []string{"dns-client", "dns-client-hostnet"} {
		for _, ip := range []string{kubeDNSIP, localDNSIP} {
			for _, tcp := range []bool{false, true} {
				proto := map[bool]string{false: "udp", true: "tcp"}[tcp]
				sport := c.sourcePorts(3)
				sports[ip] = append(sports[ip], sport, sport+1, sport+2)
				a, err := query(ctx, c, pod, ip, tcp, "A", kname, sport)
				if err == nil {
					err = want(a, "A", kubernetesIP)
				}
				r.check(fmt.Sprintf("%s%s resolves via %s/%s", prefix, pod, ip, proto), "", err)
			}
		}
	}
	for _, ip := range []string{kubeDNSIP, localDNSIP} {
		err := intercepting
		if err == nil {
			var all []string
			all, err = conntrackDNS(ctx, c.local, ip)
			ours, others := fromPorts(all, sports[ip])
			if err == nil && len(ours) != 0 {
				err = fmt.Errorf("%d conntrack entries for the queries to %s, sent once the cache intercepted:\n%s",
					len(ours), ip, strings.Join(ours, "\n"))
			}
			if len(others) > 0 {
				r.printf("     note: %d other DNS flows to %s tracked (not this check's queries):\n       %s\n",
					len(others), ip, strings.Join(others, "\n       "))
			}
		}
		r.check(fmt.Sprintf("%sno conntrack entry for DNS to %s", prefix, ip), "", err)
	}
	// The resolv.conf the kubelet wrote, used as an application would (search list, ndots).
	for _, pod := range []string{"dns-client", "dns-client-hostnet"} {
		out, err := c.exec(ctx, "default", pod, "/dnsq", "lookup", "kubernetes.default")
		if err == nil && strings.TrimSpace(out) != kubernetesIP {
			err = fmt.Errorf("kubernetes.default resolved to %q, want %s", out, kubernetesIP)
		}
		r.check(prefix+pod+" resolves kubernetes.default through its resolv.conf", "", err)
	}
	conformance(ctx, c, r, prefix)
}

// waitIntercepting waits until the agent on the node intercepts: its /ready says 200 (CoreDNS serves, its table
// and interface are in place) and its own table is there.
func waitIntercepting(ctx context.Context, n *node) error {
	if err := waitHTTP(ctx, n, "/ready"); err != nil {
		return fmt.Errorf("waiting for the cache to intercept: %w", err)
	}
	t, err := ourTables(ctx, n)
	if err != nil {
		return err
	}
	if len(slices.DeleteFunc(t, func(s string) bool { return s == fallbackTable })) == 0 {
		return fmt.Errorf("%s: /ready says 200 but no table of the agent's is there: %v", n.name, t)
	}
	return nil
}

// conformance mirrors test/e2e/network/dns.go: the cluster's names, a Service's A, SRV and PTR records, a headless
// Service and a pod's A record, an ExternalName Service; plus a name outside the cluster and a missing one.
func conformance(ctx context.Context, c *cluster, r *results, prefix string) {
	webIP, err := c.kubectl(ctx, "get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}")
	if err != nil {
		r.fail(prefix+"conformance", err)
		return
	}
	podIP, err := c.kubectl(ctx, "get", "pod", "dns-client", "-o", "jsonpath={.status.podIP}")
	if err != nil {
		r.fail(prefix+"conformance", err)
		return
	}
	rev, _ := reverse(webIP)
	d := clusterDomain
	cases := []struct{ name, qtype, qname, rtype, data string }{
		{"kubernetes.default.svc A", "A", "kubernetes.default.svc." + d, "A", kubernetesIP},
		{"Service A", "A", "web.default.svc." + d, "A", webIP},
		{"Service SRV", "SRV", "_http._tcp.web.default.svc." + d, "SRV", "80 web.default.svc." + d + "."},
		{"Service PTR", "PTR", rev, "PTR", "web.default.svc." + d + "."},
		{"headless Service A", "A", "dns-client-headless.default.svc." + d, "A", podIP},
		{"pod A", "A", strings.ReplaceAll(podIP, ".", "-") + ".default.pod." + d, "A", podIP},
		{"ExternalName CNAME", "A", "ext.default.svc." + d, "CNAME", "target.ext.example."},
		{"name outside the cluster", "A", "www.example.org", "A", upstreamA},
	}
	for _, tc := range cases {
		a, err := query(ctx, c, "dns-client", kubeDNSIP, false, tc.qtype, tc.qname, 0)
		if err == nil {
			err = want(a, tc.rtype, tc.data)
		}
		r.check(prefix+"dns "+tc.name, "", err)
	}
	a, err := query(ctx, c, "dns-client", kubeDNSIP, false, "A", "no-such-service.default.svc."+d, 0)
	if err == nil && a.rcode != "NXDOMAIN" {
		err = fmt.Errorf("got %s, want NXDOMAIN", a)
	}
	r.check(prefix+"dns missing Service NXDOMAIN", "", err)
}

func reverse(ip string) (string, error) {
	v4 := net.ParseIP(strings.TrimSpace(ip)).To4()
	if v4 == nil {
		return "", fmt.Errorf("not an IPv4 address: %q", ip)
	}
	return fmt.Sprintf("%d.%d.%d.%d.in-addr.arpa", v4[3], v4[2], v4[1], v4[0]), nil
}
