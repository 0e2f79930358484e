package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// Who is asking (docs/clients.md) on the real cluster: the chart installed without pod identity, then upgraded
// with it. Two pods of their own on node-1 look names up through their resolv.conf as applications do: a noisy
// one asks an outside name with fewer dots than ndots:5, so each lookup is three NXDOMAIN search expansions and
// the name itself, and a quiet one asks kubernetes.default once a second. `nodelocaldns -top -json`, run in the
// agent's pod on node-1 as docs/clients.md says, names the noisy pod first within topWithin of its first query:
// by address without pod identity, by namespace/pod with it.

const (
	clientsNS = "clients-case"
	// noisyName is an outside name (node-1's upstream stub answers it) with fewer dots than ndots:5: each lookup
	// asks it under the pod's three search domains first (NXDOMAIN from kube-dns), then as it is.
	noisyName = "api.example.com"
	// noisyLookups a second, four queries each: 200 NXDOMAIN a second and 67 answers.
	noisyLookups = 67
	quietName    = "kubernetes.default" // its first expansion is NXDOMAIN, its second the Service
	// topWithin is issue 41's bound: from the noisy pod's first answer to the top of -top.
	topWithin = 5 * time.Second
)

var clientsPods = fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: Pod
metadata: {name: noisy, namespace: %[1]s}
spec:
  terminationGracePeriodSeconds: 1
  nodeSelector: {kubernetes.io/hostname: node-1}
  containers:
  - {name: client, image: localhost/cluster/client:1, imagePullPolicy: Never, args: [sleep]}
---
apiVersion: v1
kind: Pod
metadata: {name: quiet, namespace: %[1]s}
spec:
  terminationGracePeriodSeconds: 1
  nodeSelector: {kubernetes.io/hostname: node-1}
  containers:
  - {name: client, image: localhost/cluster/client:1, imagePullPolicy: Never, args: [sleep]}
`, clientsNS)

// topSnapshot is the part of `nodelocaldns -top -json` (internal/clients.Snapshot) the case reads.
type topSnapshot struct {
	At      time.Time   `json:"at"`
	Clients []topClient `json:"clients"`
}

type topClient struct {
	Addr     string    `json:"addr"`
	Name     string    `json:"name"`
	Since    time.Time `json:"since"`
	Answers  uint64    `json:"answers"`
	NXDomain uint64    `json:"nxdomain"`
	Rate     float64   `json:"rate"`
	NXRate   float64   `json:"nxdomainRate"`
	HitRate  float64   `json:"hitRate"` // hits a second, not a share
	TopNames []topName `json:"topNames"`
}

type topName struct {
	Name  string `json:"name"`
	Count uint64 `json:"count"`
}

func (s topSnapshot) find(addr string) int {
	return slices.IndexFunc(s.Clients, func(c topClient) bool { return c.Addr == addr })
}

// clientsCases: helm install without pod identity, the top and RBAC checks, helm upgrade with it, the same
// checks naming pods, helm uninstall. before is kube-proxy's state without any cache.
func clientsCases(ctx context.Context, c *cluster, r *results, before string) {
	h, err := newHelm(ctx, c)
	if !r.check("clients: helm and the hooks' images", "", err) {
		return
	}
	note, err := nodesClean(ctx, c)
	r.check("clients: nodes clean before install", note, err)
	_, err = c.kubectlIn(ctx, clientsPods, "apply", "-f", "-")
	if err == nil {
		_, err = c.kubectl(ctx, "-n", clientsNS, "wait", "--for=condition=Ready", "pod/noisy", "pod/quiet", "--timeout=120s")
	}
	defer c.kubectl(ctx, "delete", "namespace", clientsNS, "--wait=false")
	if !r.check("clients: noisy and quiet pods Ready on node-1", "", err) {
		return
	}

	start := time.Now()
	err = h.install(ctx, helmClusterValues)
	if r.check("clients: helm install (podIdentity off) and DaemonSet Ready", fmt.Sprintf("%.1f s", time.Since(start).Seconds()), err) {
		sa, err := agentServiceAccount(ctx, c)
		if r.check("clients: the agent's service account", sa, err) {
			r.check("clients: default install: no ClusterRole or binding gives the agent pods, and it may not get, list or watch them", "",
				podRights(ctx, c, sa, false))
		}
		topCase(ctx, c, r, "clients: podIdentity off: ", false)

		v, err := h.values(helmClusterValues, "podIdentity: {enabled: true}\n")
		if err == nil {
			_, err = h.run(ctx, append([]string{"upgrade", helmRelease, h.chart(), "-n", helmNamespace, "--wait", "--timeout", "3m"}, v...)...)
		}
		if err == nil {
			err = waitDaemonSet(ctx, c)
		}
		if r.check("clients: helm upgrade to podIdentity.enabled=true, DaemonSet Ready", "", err) {
			if sa != "" {
				r.check("clients: podIdentity: RBAC is pods get, list, watch and nothing else", "", podRights(ctx, c, sa, true))
			}
			topCase(ctx, c, r, "clients: podIdentity on: ", true)
		}
	}
	start = time.Now()
	err = h.uninstall(ctx, before)
	r.check("clients: helm uninstall leaves nothing of ours", fmt.Sprintf("%.1f s", time.Since(start).Seconds()), err)
}

// agentPod is the name of the agent's pod on node-1, once it is the only one there (after an upgrade, the old
// one may still be terminating).
func agentPod(ctx context.Context, c *cluster) (string, error) {
	var live []string
	err := poll(ctx, 60*time.Second, time.Second, func() (bool, error) {
		out, err := c.kubectl(ctx, "-n", helmNamespace, "get", "pods", "-l", "k8s-app=node-local-dns",
			"--field-selector", "spec.nodeName="+c.local.name,
			"-o", `jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{"\n"}{end}`)
		live = nil
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) == 1 {
				live = append(live, f[0])
			}
		}
		return err == nil && len(live) == 1 && !strings.Contains(strings.TrimSpace(out), "\n"), err
	})
	if err != nil {
		return "", fmt.Errorf("want one agent pod on %s, got %v: %w", c.local.name, live, err)
	}
	return live[0], nil
}

func agentServiceAccount(ctx context.Context, c *cluster) (string, error) {
	pod, err := agentPod(ctx, c)
	if err != nil {
		return "", err
	}
	sa, err := c.kubectl(ctx, "-n", helmNamespace, "get", "pod", pod, "-o", "jsonpath={.spec.serviceAccountName}")
	if err == nil && strings.TrimSpace(sa) == "" {
		err = fmt.Errorf("pod %s names no service account", pod)
	}
	return strings.TrimSpace(sa), err
}

// podRights checks what the agent's service account may do, as the API server decides it (kubectl auth can-i,
// impersonating the account with its groups), and which ClusterRoles are bound to it. With pod identity: get,
// list and watch pods in every namespace, one binding to a role of exactly those rules, and not more (delete
// pods, get secrets, patch nodes). Without: no binding and none of those.
func podRights(ctx context.Context, c *cluster, sa string, identity bool) error {
	as := []string{"--as=system:serviceaccount:" + helmNamespace + ":" + sa,
		"--as-group=system:serviceaccounts", "--as-group=system:serviceaccounts:" + helmNamespace}
	type ask struct {
		verb, resource string
		want           bool
	}
	asks := []ask{{"get", "pods", identity}, {"list", "pods", identity}, {"watch", "pods", identity},
		{"delete", "pods", false}, {"create", "pods", false}, {"get", "secrets", false}, {"list", "secrets", false},
		{"patch", "nodes", false}}
	var errs []error
	for _, a := range asks {
		// can-i prints yes or no, and exits 1 on no.
		out, err := c.kubectl(ctx, append([]string{"auth", "can-i", a.verb, a.resource, "--all-namespaces"}, as...)...)
		got := strings.TrimSpace(out)
		if got != "yes" && got != "no" {
			errs = append(errs, fmt.Errorf("can-i %s %s: %q: %v", a.verb, a.resource, got, err))
			continue
		}
		if (got == "yes") != a.want {
			errs = append(errs, fmt.Errorf("can-i %s %s: %s", a.verb, a.resource, got))
		}
	}

	// Every ClusterRoleBinding naming the account, and its role's rules.
	out, err := c.kubectl(ctx, "get", "clusterrolebindings", "-o",
		`jsonpath={range .items[*]}{.roleRef.kind} {.roleRef.name} {range .subjects[*]}{.kind}/{.namespace}/{.name},{end}{"\n"}{end}`)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	var roles []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 3 && strings.Contains(","+f[2], ",ServiceAccount/"+helmNamespace+"/"+sa+",") {
			roles = append(roles, f[0]+"/"+f[1])
		}
	}
	switch {
	case !identity && len(roles) > 0:
		errs = append(errs, fmt.Errorf("ClusterRoles bound to %s without pod identity: %v", sa, roles))
	case identity && len(roles) != 1:
		errs = append(errs, fmt.Errorf("want one ClusterRole bound to %s, got %v", sa, roles))
	case identity:
		kind, name, _ := strings.Cut(roles[0], "/")
		rules, err := c.kubectl(ctx, "get", "clusterrole", name, "-o", "jsonpath={.rules}")
		var got []struct {
			APIGroups     []string `json:"apiGroups"`
			Resources     []string `json:"resources"`
			Verbs         []string `json:"verbs"`
			ResourceNames []string `json:"resourceNames"`
		}
		if err == nil {
			err = json.Unmarshal([]byte(rules), &got)
		}
		switch {
		case kind != "ClusterRole" || err != nil:
			errs = append(errs, fmt.Errorf("%s: %v", roles[0], err))
		case len(got) != 1 || !slices.Equal(got[0].APIGroups, []string{""}) || !slices.Equal(got[0].Resources, []string{"pods"}) ||
			!slices.Equal(got[0].Verbs, []string{"get", "list", "watch"}) || len(got[0].ResourceNames) > 0:
			errs = append(errs, fmt.Errorf("%s's rules are %s, want pods get, list, watch only", roles[0], rules))
		}
	}
	return errors.Join(errs...)
}

// topCase: the quiet pod asks until -top shows it, then the noisy pod starts; -top -json is read in the agent's
// pod on node-1 until the noisy pod is first by its rate. The time to top is the agent's own: the snapshot's time minus when
// the noisy address entered the table (its first answer), so kubectl's latency counts only through how often
// the snapshots come (one kubectl exec each).
func topCase(ctx context.Context, c *cluster, r *results, prefix string, identity bool) {
	ips := map[string]string{}
	for _, p := range []string{"noisy", "quiet"} {
		ip, err := c.kubectl(ctx, "-n", clientsNS, "get", "pod", p, "-o", "jsonpath={.status.podIP}")
		if err != nil || strings.TrimSpace(ip) == "" {
			r.fail(prefix+"pod addresses", fmt.Errorf("%s: %q %v", p, ip, err))
			return
		}
		ips[p] = strings.TrimSpace(ip)
	}
	agent, err := agentPod(ctx, c)
	if !r.check(prefix+"agent pod on "+c.local.name, agent, err) {
		return
	}
	top := func() (topSnapshot, error) {
		var s topSnapshot
		out, err := c.exec(ctx, helmNamespace, agent, "nodelocaldns", "-top", "-json")
		if err == nil {
			err = json.Unmarshal([]byte(out), &s)
		}
		return s, err
	}

	quiet := startLookups(ctx, c, "quiet", quietName, 1, 40*time.Second)
	var s topSnapshot
	err = poll(ctx, 30*time.Second, 250*time.Millisecond, func() (bool, error) {
		s, err = top()
		return err == nil && s.find(ips["quiet"]) >= 0, err
	})
	if !r.check(prefix+"nodelocaldns -top -json in the agent's pod shows the quiet pod", "", err) {
		quiet.wait()
		return
	}
	noisy := startLookups(ctx, c, "noisy", noisyName, noisyLookups, 20*time.Second)
	err = poll(ctx, 30*time.Second, 100*time.Millisecond, func() (bool, error) {
		s, err = top()
		// First by its rate over a closed second, not only by the tie-break on answers (every rate is 0 until
		// the noisy pod's first second closes).
		return err == nil && len(s.Clients) > 0 && s.Clients[0].Addr == ips["noisy"] && s.Clients[0].Rate > 0, err
	})
	var took time.Duration
	if err == nil {
		n, q := s.Clients[0], s.find(ips["quiet"])
		took = s.At.Sub(n.Since)
		wantNoisy, wantQuiet := "", ""
		if identity {
			wantNoisy, wantQuiet = clientsNS+"/noisy", clientsNS+"/quiet"
		}
		expansion := noisyName + "." + clientsNS + ".svc." + clusterDomain + "."
		switch {
		case took > topWithin:
			err = fmt.Errorf("the noisy pod was first %v after its first answer, want within %v", took, topWithin)
		case q < 0:
			err = fmt.Errorf("the quiet pod %s left the table", ips["quiet"])
		case n.Name != wantNoisy || s.Clients[q].Name != wantQuiet:
			err = fmt.Errorf("names: noisy %q, quiet %q; want %q and %q", n.Name, s.Clients[q].Name, wantNoisy, wantQuiet)
		case n.NXDomain == 0 || !slices.ContainsFunc(n.TopNames, func(t topName) bool { return t.Name == expansion }):
			err = fmt.Errorf("the noisy pod's NXDOMAIN %d, top names %v: want its search expansion %s", n.NXDomain, n.TopNames, expansion)
		}
		for i, cl := range s.Clients {
			r.printf("     top %d: %s %q %.0f q/s, %.0f NXDOMAIN/s, %.0f hits/s, %d answers, top name %s\n",
				i+1, cl.Addr, cl.Name, cl.Rate, cl.NXRate, cl.HitRate, cl.Answers, firstName(cl))
		}
	}
	// The table as an operator sees it: -top runs until interrupted, so its first screen is read and it is stopped.
	tctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	screen, _ := c.exec(tctx, helmNamespace, agent, "nodelocaldns", "-top")
	cancel()
	if lines := strings.Split(strings.TrimSpace(screen), "\n"); len(lines) > 0 {
		r.printf("     nodelocaldns -top:\n       %s\n", strings.Join(lines[:min(len(lines), 12)], "\n       "))
	}
	who := "its address " + ips["noisy"]
	if identity {
		who = clientsNS + "/noisy"
	}
	r.check(prefix+"the noisy pod is first in -top as "+who+", the quiet pod below it", fmt.Sprintf("%.1f s", took.Seconds()), err)
	if err == nil {
		r.figure(prefix+"noisy pod's first answer to the top of -top", "%.1f s", took.Seconds())
	} else {
		logs, _ := c.kubectl(ctx, "-n", helmNamespace, "logs", agent, "--tail=20")
		r.printf("     agent log:\n%s\n", logs)
	}
	for _, l := range []*lookups{noisy, quiet} {
		res, err := l.wait()
		r.printf("     %s: %s %v\n", l.pod, strings.TrimSpace(res), err)
	}
}

func firstName(c topClient) string {
	if len(c.TopNames) == 0 {
		return "-"
	}
	return fmt.Sprintf("%s (%d)", c.TopNames[0].Name, c.TopNames[0].Count)
}

// lookups is a `dnsq load -resolver` running in one of the case's pods.
type lookups struct {
	pod       string
	cmd       *exec.Cmd
	out, errb bytes.Buffer
	err       error
}

func startLookups(ctx context.Context, c *cluster, pod, name string, rate int, d time.Duration) *lookups {
	l := &lookups{pod: pod}
	l.cmd = c.kubectlCmd(ctx, "-n", clientsNS, "exec", pod, "--", "/dnsq", "load", "-resolver", "-name", name,
		"-rate", fmt.Sprint(rate), "-duration", d.String(), "-timeout", "5s")
	l.cmd.Stdout, l.cmd.Stderr = &l.out, &l.errb
	l.err = l.cmd.Start()
	return l
}

// wait returns the load's summary once it has run its course.
func (l *lookups) wait() (string, error) {
	if l.err != nil {
		return "", l.err
	}
	if err := l.cmd.Wait(); err != nil {
		return l.out.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(l.errb.String()))
	}
	return l.out.String(), nil
}
