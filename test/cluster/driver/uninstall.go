package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// An uninstall that runs no hook (`kubectl delete -k`, an Argo CD deletion, `helm uninstall --no-hooks`) removes
// the DaemonSet and kube-dns-upstream together and leaves the link-local fallback (internal/nft/fallback.go),
// which points at the kube-dns ClusterIP, never at a Service our install creates, and holds its addresses for a
// lease only. The suite runs the agent with a short lease (fallbackLease, renewed every syncInterval) so that the
// end of it is seen within the run; the shipped default is 15 minutes.
const (
	fallbackLease = 60 * time.Second
	syncInterval  = 10 * time.Second
	rogueA        = "203.0.113.66" // what the rogue given kube-dns-upstream's freed ClusterIP answers
)

// withShortLease adds the suite's -syncinterval and -fallback-lease to the rendered DaemonSet's args, after its
// last one (kustomize renders them one per line).
func withShortLease(rendered string) (string, error) {
	const last = "        - -upstreamsvc\n        - kube-dns-upstream\n"
	if strings.Count(rendered, last) != 1 {
		return "", fmt.Errorf("the rendered DaemonSet's args do not end with -upstreamsvc kube-dns-upstream")
	}
	return strings.Replace(rendered, last, fmt.Sprintf("%s        - -syncinterval\n        - %s\n        - -fallback-lease\n        - %s\n",
		last, syncInterval, fallbackLease), 1), nil
}

// rogueManifest is a Service that asks for kube-dns-upstream's freed ClusterIP, as any namespace editor may,
// and a server behind it that answers every A question with rogueA.
func rogueManifest(clusterIP string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: rogue-dns
  namespace: default
  labels: {app: rogue-dns}
spec:
  terminationGracePeriodSeconds: 1
  nodeSelector: {kubernetes.io/hostname: node-2}
  containers:
  - name: rogue
    image: localhost/cluster/client:1
    imagePullPolicy: Never
    args: ["serve", "-addr", ":53", "-a", "%s"]
---
apiVersion: v1
kind: Service
metadata:
  name: rogue-dns
  namespace: default
spec:
  clusterIP: %s
  selector: {app: rogue-dns}
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
`, rogueA, clusterIP)
}

// uninstallCases: `kubectl delete -k`, then a rogue takes kube-dns-upstream's ClusterIP. Within the lease every
// query to both addresses, from a pod and a hostNetwork pod, UDP and TCP, is answered by kube-dns and none by the
// rogue; after it, nothing of ours is left on either node but the fallback's empty table.
func uninstallCases(ctx context.Context, c *cluster, r *results, before string) {
	upstream, err := c.kubectl(ctx, "-n", "kube-system", "get", "svc", "kube-dns-upstream", "-o", "jsonpath={.spec.clusterIP}")
	upstream = strings.TrimSpace(upstream)
	if !r.check("kube-dns-upstream's ClusterIP before the uninstall", upstream, err) {
		return
	}
	deleted := time.Now()
	r.check("delete -k "+userOverlay+" (no hook) leaves nothing of ours"+leftNote(c), "", deleteUserManifests(ctx, c, before))
	fallbackCase(c, r, "delete -k: the fallback table stays on both nodes", func() error { return checkFallbackStays(ctx, c) })
	if !c.fallback {
		return
	}
	text := rogueManifest(upstream)
	_, err = c.kubectlIn(ctx, text, "apply", "-f", "-")
	if err == nil {
		err = poll(ctx, 90*time.Second, time.Second, func() (bool, error) {
			a, err := query(ctx, c, "dns-client", upstream, false, "A", "anything.example.", 0)
			return err == nil && a.has("A", rogueA), nil
		})
	}
	if !r.check("a rogue Service takes kube-dns-upstream's freed ClusterIP "+upstream, fmt.Sprintf("+%.0f s", time.Since(deleted).Seconds()), err) {
		return
	}
	defer c.kubectlIn(ctx, text, "delete", "-f", "-", "--wait=false")
	within := time.Since(deleted)
	r.check(fmt.Sprintf("delete -k: within the lease (+%.0f s), every query to both addresses is answered by kube-dns, none by the rogue", within.Seconds()),
		"", askAfterUninstall(ctx, c, false))
	wait := time.Until(deleted.Add(fallbackLease + syncInterval))
	select {
	case <-ctx.Done():
		return
	case <-time.After(wait):
	}
	r.check(fmt.Sprintf("delete -k: after the %v lease, the ClusterIP answered by kube-dns, the link-local address by nobody, the rogue by nobody", fallbackLease),
		"", askAfterUninstall(ctx, c, true))
	r.check("delete -k: after the lease, no instance table, interface or covered address of ours on either node", "", nothingCovered(ctx, c))
}

// askAfterUninstall asks both addresses from dns-client and dns-client-hostnet over UDP and TCP. Each answer must
// be kube-dns's (the kubernetes Service's address); after the lease the link-local address answers nobody.
func askAfterUninstall(ctx context.Context, c *cluster, leaseOver bool) error {
	var bad []string
	for _, pod := range []string{"dns-client", "dns-client-hostnet"} {
		for _, ip := range []string{kubeDNSIP, localDNSIP} {
			for _, tcp := range []bool{false, true} {
				what := fmt.Sprintf("%s → %s/%s", pod, ip, map[bool]string{false: "udp", true: "tcp"}[tcp])
				a, err := query(ctx, c, pod, ip, tcp, "A", "kubernetes.default.svc."+clusterDomain, 0)
				switch {
				case err == nil && a.has("A", rogueA):
					bad = append(bad, what+": answered by the rogue: "+a.String())
				case leaseOver && ip == localDNSIP:
					if err == nil && a.rcode != "" {
						bad = append(bad, what+": answered after the lease: "+a.String())
					}
				case err != nil:
					bad = append(bad, what+": "+err.Error())
				default:
					if err := want(a, "A", kubernetesIP); err != nil {
						bad = append(bad, what+": "+err.Error())
					}
				}
			}
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "\n"))
	}
	return nil
}

// nothingCovered: no instance table and no interface of ours, and the fallback table (still there: the kernel
// deletes no table by itself) covers no address.
func nothingCovered(ctx context.Context, c *cluster) error {
	var bad []string
	for _, n := range c.nodes() {
		t, err := ourTables(ctx, n)
		if err != nil {
			return err
		}
		for _, name := range t {
			if name != fallbackTable {
				bad = append(bad, n.name+": table "+name)
			}
		}
		if l, err := ourLinks(ctx, n); err != nil || len(l) > 0 {
			bad = append(bad, fmt.Sprintf("%s: interfaces %v %v", n.name, l, err))
		}
		out, err := n.sh(ctx, "nft", "list", "set", "inet", "nodelocaldns-fallback", "covered4")
		if err == nil && strings.Contains(out, "elements") {
			bad = append(bad, n.name+": the fallback still covers addresses:\n"+out)
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "\n"))
	}
	return nil
}
