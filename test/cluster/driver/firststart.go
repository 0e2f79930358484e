package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// The first start on a node (docs/failure-model.md): before the agent's first registration after a boot there is
// no interface and no fallback, so a pod's queries to the link-local address go unanswered until the image is
// pulled and the agent serves. firstStartCases measures that gap on node-1 with the chart's defaults, then
// tests the opt-in gate (startupTaint): node-1 registers anew with the taint, and no pod that does not
// tolerate it is scheduled there before the agent serves. The boot is emulated by bootNode (noderestart.go).

const (
	// firstStartPull is the stand-in for the image pull: the node's registry holds the tag's resolution this
	// long. A real pull of our 13 MB image takes from about a second (a registry in the same region) to tens
	// of seconds (a cold node, a throttled or distant registry).
	firstStartPull = 15 * time.Second
	firstStartLoad = 60 * time.Second
	startupTaint   = "nodelocaldns.io/agent-not-ready" // the chart's default key
	probePodName   = "first-start-probe"
)

// probePod asks the link-local address once (dnsq q: three tries, 2 s each) from node-1 and exits: Succeeded
// when answered. It tolerates nothing but the defaults, as an application pod.
var probePod = fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default}
spec:
  nodeSelector: {kubernetes.io/hostname: node-1}
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: q
    image: localhost/cluster/client:1
    command: [/dnsq, q, -server, %s, kubernetes.default.svc.%s.]
`, probePodName, localDNSIP, clusterDomain)

// firstStartCases: the chart installed with its defaults, the gap measured, then the gate (upgrade with
// startupTaint on) tested. Run after the Helm cases, on nodes where nothing of ours is left; CLUSTER_ONLY=first-start
// runs them alone.
func firstStartCases(ctx context.Context, c *cluster, r *results) {
	h, err := newHelmTool(ctx, c)
	if !r.check("first start: helm", "", err) {
		return
	}
	note, err := nodesClean(ctx, c)
	r.check("first start: nodes clean before install", note, err)
	if !r.check("first start: helm install (defaults: no gate)", "", h.install(ctx, helmClusterValues)) {
		return
	}
	if !gapCase(ctx, c, r) {
		return
	}
	gateCase(ctx, c, r, h)
}

// gapCase: node-1 boots (emulated) while dns-client asks both addresses from its own network namespace, and a
// pod created at the boot asks the link-local address once.
func gapCase(ctx context.Context, c *cluster, r *results) bool {
	n := c.local
	pid, err := podPID(ctx, c, n, "dns-client")
	if !r.check("first start: dns-client's network namespace", "", err) {
		return false
	}
	load := startNetLoad(ctx, c, pid, firstStartLoad)
	time.Sleep(loadLead)
	times, stopRegistry, err := bootNode(ctx, c, n, firstBoot{pullDelay: firstStartPull})
	defer stopRegistry()
	if err == nil {
		_, err = c.kubectlIn(ctx, probePod, "apply", "-f", "-")
	}
	var ready time.Time
	if err == nil {
		ready, _, err = agentServes(ctx, c, n, times.t0)
	}
	res, loadErr := load.wait()
	if !r.check(fmt.Sprintf("first start (no gate): the agent serves after the emulated boot (a %v pull)", firstStartPull), "", errors.Join(err, loadErr)) {
		return false
	}
	held, err := registryHeld(n)
	if err == nil {
		r.figure("first start: boot (containerd starts) to the pull's start", "%.1f s", held.Sub(times.t0).Seconds())
		r.figure("first start: the pull's end to the agent serving (its ready line)", "%.1f s", ready.Sub(held.Add(firstStartPull)).Seconds())
	}
	r.figure("first start: boot to the agent serving", "%.1f s (of which the pull %v)", ready.Sub(times.t0).Seconds(), firstStartPull)
	bootAt, readyAt := times.t0.Sub(load.start), ready.Sub(load.start)
	ll, cl := res[localDNSIP], res[kubeDNSIP]
	r.figure("first start: dns-client → "+localDNSIP, "%s; boot at %.1f s, agent serving at %.1f s", ll, bootAt.Seconds(), readyAt.Seconds())
	r.figure("first start: dns-client → "+kubeDNSIP, "%s", cl)
	if ll.Failed > 0 {
		r.figure("first start: "+localDNSIP+" unanswered from the boot for", "%.1f s (from the kill: %.1f s)",
			(time.Duration(ll.LastMs)*time.Millisecond - bootAt).Seconds(), float64(ll.LastMs-ll.FirstMs)/1000)
	}
	// Nothing lost once the agent serves (a query sent just before may still wait out its timeout).
	var after error
	if ll.Sent == 0 || time.Duration(ll.LastMs)*time.Millisecond > readyAt+500*time.Millisecond {
		after = fmt.Errorf("%s: losses after the agent served at %.1f s: %s", localDNSIP, readyAt.Seconds(), ll)
	}
	r.check("first start (no gate): "+localDNSIP+" answered again once the agent serves", "", after)
	// Without the gate a pod is scheduled at once and asks before the agent serves.
	p, err := waitProbe(ctx, c)
	if err == nil {
		r.figure("first start (no gate): a pod created at the boot", "scheduled %.1f s before the agent served; its query to %s: %s",
			ready.Sub(p.scheduled).Seconds(), localDNSIP, p.verdict())
	}
	r.check("first start (no gate): the probe pod ran", "", err)
	return true
}

// gateCase: the chart upgraded with startupTaint on; node-1 boots and registers anew with the taint. While the
// agent does not serve, the node carries the taint and the probe pod stays unscheduled; the agent then removes
// the taint, once, and the pod is scheduled after the agent serves, and its query is answered.
func gateCase(ctx context.Context, c *cluster, r *results, h *helmRun) {
	n := c.local
	v, err := h.values(helmClusterValues, "startupTaint: {enabled: true}\n")
	// The case before restarted node-1's agent: the upgrade waits for its rollout first (upgradeRolledOut).
	if err == nil {
		err = h.upgradeRolledOut(ctx, v)
	}
	if err == nil {
		_, err = c.kubectl(ctx, "delete", "pod", probePodName, "--wait=true", "--timeout=60s")
	}
	if !r.check("gate: helm upgrade with startupTaint.enabled", "", err) {
		return
	}
	// Both agents started on nodes without the taint: each found nothing to remove and wrote nothing.
	var errs []error
	for _, nd := range c.nodes() {
		var lines []agentLine
		err := poll(ctx, 20*time.Second, 500*time.Millisecond, func() (bool, error) {
			var err error
			lines, err = agentLog(ctx, c, nd, "start-up taint not on the node")
			return err == nil && len(lines) > 0, err
		})
		if err != nil || len(lines) != 1 {
			errs = append(errs, fmt.Errorf("%s: %d 'start-up taint not on the node' lines, want 1 (%v)", nd.name, len(lines), err))
		}
	}
	r.check("gate: agents on untainted nodes leave the nodes alone", "", errors.Join(errs...))

	times, stopRegistry, err := bootNode(ctx, c, n, firstBoot{pullDelay: firstStartPull, registerTaint: startupTaint})
	defer stopRegistry()
	if !r.check("gate: node-1 boots and registers anew (kubelet registerWithTaints)", "", err) {
		return
	}
	// Wait for the node to come back, tainted, then create the pod.
	if err := poll(ctx, 60*time.Second, 200*time.Millisecond, func() (bool, error) {
		s, err := nodeState(ctx, c, n)
		return err == nil && s.tainted, err
	}); err != nil {
		r.fail("gate: node-1 registered with "+startupTaint, err)
		return
	}
	created := time.Now()
	if _, err := c.kubectlIn(ctx, probePod, "apply", "-f", "-"); err != nil {
		r.fail("gate: probe pod", err)
		return
	}
	// Watch until the pod is scheduled: every look at a Ready node still tainted must find it unscheduled. The pod
	// is read before the node: the taint, once gone, never comes back, so a node read tainted after the pod was
	// read scheduled means it was scheduled on a tainted node (read the other way round, the taint's removal and
	// the scheduling can fall between the two reads).
	var held, early int
	var seenScheduled time.Time
	err = poll(ctx, 2*time.Minute, 250*time.Millisecond, func() (bool, error) {
		out, err := c.kubectl(ctx, "get", "pod", probePodName, "-o", "jsonpath={.spec.nodeName}")
		if err != nil {
			return false, err
		}
		scheduled := strings.TrimSpace(out) != ""
		s, err := nodeState(ctx, c, n)
		if err != nil {
			return false, err
		}
		if s.tainted && scheduled {
			early++
		}
		if s.tainted && s.ready && !scheduled {
			held++
		}
		if scheduled {
			seenScheduled = time.Now()
		}
		return scheduled, nil
	})
	if !r.check("gate: the probe pod is scheduled in the end", "", err) {
		return
	}
	ready, a, err := agentServes(ctx, c, n, times.t0)
	var removed []agentLine
	if err == nil {
		removed, err = agentLog(ctx, c, n, "start-up taint removed")
	}
	p, perr := waitProbe(ctx, c)
	if !r.check("gate: the agent serves and removed the taint", "", errors.Join(err, perr)) {
		return
	}
	r.figure("gate: boot to the agent serving", "%.1f s (the probe pod created %.1f s after the boot)",
		ready.Sub(times.t0).Seconds(), created.Sub(times.t0).Seconds())
	var gateErr error
	switch {
	case early > 0:
		gateErr = fmt.Errorf("the pod was scheduled while the node carried %s (%d looks)", startupTaint, early)
	case held == 0:
		gateErr = errors.New("never saw the node Ready and tainted with the pod unscheduled: nothing shows the taint held it")
	case p.scheduled.Before(ready.Truncate(time.Second)) || seenScheduled.Before(ready): // the condition's time has a second's resolution
		gateErr = fmt.Errorf("the pod was scheduled at %s (first seen %s), before the agent served at %s",
			p.scheduled.Format(time.RFC3339), seenScheduled.Format(time.RFC3339Nano), ready.Format(time.RFC3339Nano))
	}
	r.check("gate: no pod scheduled onto node-1 before the agent serves", fmt.Sprintf("held %d looks while Ready and tainted; first seen scheduled %.2f s after the agent served (PodScheduled %s, ready line %s)",
		held, seenScheduled.Sub(ready).Seconds(), p.scheduled.Format("15:04:05"), ready.Format("15:04:05.000")), gateErr)
	if p.phase != "Succeeded" {
		err = fmt.Errorf("probe pod %s: its query to %s was not answered", p.phase, localDNSIP)
	} else {
		err = nil
	}
	r.check("gate: the first pod scheduled there is answered by "+localDNSIP, "", err)
	if len(removed) != 1 || removed[0].ts.Before(ready) {
		err = fmt.Errorf("agent %s: %d 'start-up taint removed' lines (want 1, after its ready line at %s): %v", a.pod, len(removed), ready, removed)
	} else {
		r.figure("gate: the agent serving to the taint removed", "%.0f ms", float64(removed[0].ts.Sub(ready).Microseconds())/1000)
		s, serr := nodeState(ctx, c, n)
		err = serr
		if serr == nil && s.tainted {
			err = fmt.Errorf("node-1 still carries %s", startupTaint)
		}
	}
	r.check("gate: the taint removed once, after the agent served", "", err)
	gateTokenCase(ctx, c, r, a)
}

// nodeLook is one look at a node.
type nodeLook struct{ tainted, ready bool }

func nodeState(ctx context.Context, c *cluster, n *node) (nodeLook, error) {
	out, err := c.kubectl(ctx, "get", "node", n.name, "-o",
		`jsonpath={range .spec.taints[*]}{.key}{" "}{end}|{.status.conditions[?(@.type=="Ready")].status}`)
	if err != nil {
		return nodeLook{}, err
	}
	taints, ready, _ := strings.Cut(out, "|")
	return nodeLook{tainted: strings.Contains(" "+taints, " "+startupTaint+" "), ready: strings.TrimSpace(ready) == "True"}, nil
}

// agentServes waits for the node's agent to be ready in a container started after since, and returns the time of
// its "ready" log line.
func agentServes(ctx context.Context, c *cluster, n *node, since time.Time) (time.Time, agent, error) {
	var a agent
	var at time.Time
	err := poll(ctx, 2*time.Minute, 250*time.Millisecond, func() (bool, error) {
		var err error
		if a, err = currentAgent(ctx, c, n); err != nil {
			return false, err
		}
		lines, err := agentLog(ctx, c, n, "ready")
		if err != nil || len(lines) == 0 {
			return false, err
		}
		at = lines[len(lines)-1].ts
		return at.After(since), fmt.Errorf("the agent's last ready line (%s) is from before the boot", at)
	})
	return at, a, err
}

// agentLine is one line of the agent's JSON log.
type agentLine struct {
	ts  time.Time
	msg string
}

// agentLog returns the current agent container's log lines with this message.
func agentLog(ctx context.Context, c *cluster, n *node, msg string) ([]agentLine, error) {
	a, err := currentAgent(ctx, c, n)
	if err != nil {
		return nil, err
	}
	out, err := c.kubectl(ctx, "-n", helmNamespace, "logs", a.pod, "-c", "node-cache")
	if err != nil {
		return nil, err
	}
	var lines []agentLine
	for _, l := range strings.Split(out, "\n") {
		var e struct{ TS, Msg string }
		if json.Unmarshal([]byte(l), &e) != nil || e.Msg != msg {
			continue
		}
		ts, err := time.Parse("2006-01-02T15:04:05.000Z0700", e.TS)
		if err != nil {
			return nil, fmt.Errorf("agent log time %q: %w", e.TS, err)
		}
		lines = append(lines, agentLine{ts: ts, msg: e.Msg})
	}
	return lines, nil
}

// probeResult is the probe pod's end.
type probeResult struct {
	phase     string
	scheduled time.Time
}

func (p probeResult) verdict() string {
	if p.phase == "Succeeded" {
		return "answered"
	}
	return "unanswered (pod " + p.phase + ")"
}

// waitProbe waits for the probe pod to finish and returns its phase and when it was scheduled.
func waitProbe(ctx context.Context, c *cluster) (probeResult, error) {
	var p probeResult
	err := poll(ctx, 2*time.Minute, 500*time.Millisecond, func() (bool, error) {
		out, err := c.kubectl(ctx, "get", "pod", probePodName, "-o",
			`jsonpath={.status.phase} {.status.conditions[?(@.type=="PodScheduled")].lastTransitionTime}`)
		if err != nil {
			return false, err
		}
		f := strings.Fields(out)
		if len(f) != 2 {
			return false, fmt.Errorf("probe pod: %q", out)
		}
		p.phase = f[0]
		if p.scheduled, err = time.Parse(time.RFC3339, f[1]); err != nil {
			return false, err
		}
		return p.phase == "Succeeded" || p.phase == "Failed", fmt.Errorf("probe pod %s", p.phase)
	})
	return p, err
}

// podPID is the host PID of a pod's container on node n: its network namespace is the pod's.
func podPID(ctx context.Context, c *cluster, n *node, pod string) (string, error) {
	out, err := c.kubectl(ctx, "get", "pod", pod, "-o", "jsonpath={.status.containerStatuses[0].containerID}")
	if err != nil {
		return "", err
	}
	id := strings.TrimPrefix(strings.TrimSpace(out), "containerd://")
	tasks, err := n.ctr(ctx, "tasks", "ls")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(tasks, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == id {
			if _, err := strconv.Atoi(f[1]); err == nil {
				return f[1], nil
			}
		}
	}
	return "", fmt.Errorf("no task %s for pod %s on %s", id, pod, n.name)
}

// netLoad is `dnsq load` run by the driver inside a pod's network namespace (nsenter), not through kubectl exec:
// the kubelet and containerd, which an exec goes through, are restarted under it.
type netLoad struct {
	start time.Time
	cmd   *exec.Cmd
	out   strings.Builder
	err   error
}

func startNetLoad(ctx context.Context, c *cluster, pid string, d time.Duration) *netLoad {
	l := &netLoad{}
	l.cmd = exec.CommandContext(ctx, "nsenter", "-t", pid, "-n", "--", c.cfg.dnsq, "load", "-server", kubeDNSIP+","+localDNSIP,
		"-name", "kubernetes.default.svc."+clusterDomain, "-proto", "udp", "-rate", strconv.Itoa(loadRate),
		"-timeout", loadTimeout.String(), "-duration", d.String())
	l.cmd.Stdout = &l.out
	l.start = time.Now()
	l.err = l.cmd.Start()
	return l
}

// wait returns the results by server address.
func (l *netLoad) wait() (map[string]loadResult, error) {
	if l.err != nil {
		return nil, l.err
	}
	if err := l.cmd.Wait(); err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	res := map[string]loadResult{}
	for _, line := range strings.Split(strings.TrimSpace(l.out.String()), "\n") {
		var lr loadResult
		if err := json.Unmarshal([]byte(line), &lr); err != nil {
			return nil, fmt.Errorf("load output %q: %w", line, err)
		}
		res[strings.TrimSuffix(lr.Server, ":53")] = lr
	}
	return res, nil
}
