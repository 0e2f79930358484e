package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// gateTokenCase: what the start-up gate's token may do on a real API server. RBAC grants get and patch on every
// node; the chart's ValidatingAdmissionPolicy narrows the patch to taking the start-up taint off the node the
// token's pod runs on. The token is one the API server issues for the agent's pod on node-1 (as the kubelet
// mounts it: bound to the pod, so it carries the pod's node), and it is used as the agent uses its own. A
// token bound to nothing (no node claim) may do nothing at all.
func gateTokenCase(ctx context.Context, c *cluster, r *results, a agent) {
	own, other := c.local.name, c.remote.name
	sa, err := c.kubectl(ctx, "-n", helmNamespace, "get", "pod", a.pod, "-o", "jsonpath={.spec.serviceAccountName}")
	var bound, unbound string
	if err == nil {
		bound, err = tokenKubeconfig(ctx, c, "gate-bound", strings.TrimSpace(sa),
			"--bound-object-kind=Pod", "--bound-object-name="+a.pod, "--bound-object-uid="+a.uid)
	}
	if err == nil {
		unbound, err = tokenKubeconfig(ctx, c, "gate-unbound", strings.TrimSpace(sa))
	}
	if !r.check("gate token: a token of the agent's pod on "+own, "", err) {
		return
	}

	taint := fmt.Sprintf(`{"key":%q,"effect":"NoSchedule"}`, startupTaint)
	// A merge patch: valid whether the node has taints or none (a JSON patch's add needs the list to exist).
	addTaint := `{"spec":{"taints":[` + taint + `]}}`
	// The other node, tainted by the administrator, so that a removal there is the gate's own patch, wrongly aimed.
	cleanup := func(n string) { _, _ = c.kubectl(ctx, "taint", "node", n, startupTaint+":NoSchedule-") }
	_, err = c.kubectl(ctx, "taint", "node", other, startupTaint+":NoSchedule")
	defer cleanup(other)
	if !r.check("gate token: "+other+" tainted by the administrator", "", err) {
		return
	}
	// why is the policy's message for the case, where one validation alone refuses it ("" for any of them).
	denied := []struct{ name, kc, node, patch, why string }{
		{"remove the taint from another node", bound, other, removeTaintPatch(ctx, c, other), "may not patch node " + other},
		{"label another node", bound, other, `[{"op":"add","path":"/metadata/labels/nodelocaldns-gate-test","value":"x"}]`, "may not patch node " + other},
		{"label its own node", bound, own, `[{"op":"add","path":"/metadata/labels/nodelocaldns-gate-test","value":"x"}]`, ""},
		{"taint its own node", bound, own, addTaint, "may only remove the taint " + startupTaint},
		{"label its own node with a merge patch", bound, own, `{"metadata":{"labels":{"nodelocaldns-gate-test":"x"}}}`, ""},
		{"cordon its own node", bound, own, `[{"op":"add","path":"/spec/unschedulable","value":true}]`, ""},
		{"remove the taint with a token bound to no pod", unbound, other, removeTaintPatch(ctx, c, other), "the token names no node"},
	}
	for _, d := range denied {
		before, _ := nodeJSON(ctx, c, d.node)
		kind := "json"
		if strings.HasPrefix(d.patch, "{") {
			kind = "merge"
		}
		out, err := c.kubectlAs(ctx, d.kc, "patch", "node", d.node, "--type="+kind, "-p", d.patch)
		after, _ := nodeJSON(ctx, c, d.node)
		switch {
		case err == nil:
			err = fmt.Errorf("the API server took the patch: %s", strings.TrimSpace(out))
		case !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") || !strings.Contains(err.Error(), d.why):
			err = fmt.Errorf("refused, but not by the gate's policy for the reason %q: %w", d.why, err)
		case before != after:
			err = fmt.Errorf("refused, yet node %s changed", d.node)
		default:
			err = nil
		}
		r.check("gate token: may not "+d.name, "", err)
	}

	// The one thing it may do: take the taint off its own node, as the agent's patch does.
	_, err = c.kubectl(ctx, "taint", "node", own, startupTaint+":NoSchedule")
	defer cleanup(own)
	if err == nil {
		_, err = c.kubectlAs(ctx, bound, "patch", "node", own, "--type=json", "-p", removeTaintPatch(ctx, c, own))
	}
	if err == nil {
		var s nodeLook
		if s, err = nodeState(ctx, c, c.local); err == nil && s.tainted {
			err = errors.New("the patch was taken, but the node still carries the taint")
		}
	}
	r.check("gate token: may remove the taint from its own node", "", err)
}

// removeTaintPatch is the gate's own patch (nodetaint.Client.PatchTaints) for the node as it is now: test the
// taints, replace them by the same without the start-up taint.
func removeTaintPatch(ctx context.Context, c *cluster, node string) string {
	from, err := c.kubectl(ctx, "get", "node", node, "-o", "jsonpath={.spec.taints}")
	if err != nil || strings.TrimSpace(from) == "" {
		from = "[]"
	}
	to, err := c.kubectl(ctx, "get", "node", node, "-o",
		fmt.Sprintf(`jsonpath={.spec.taints[?(@.key!=%q)]}`, startupTaint))
	if err != nil || strings.TrimSpace(to) == "" {
		to = "[]"
	}
	if !strings.HasPrefix(strings.TrimSpace(to), "[") { // one match prints as an object
		to = "[" + to + "]"
	}
	return fmt.Sprintf(`[{"op":"test","path":"/spec/taints","value":%s},{"op":"replace","path":"/spec/taints","value":%s}]`, from, to)
}

// nodeJSON is the node's metadata labels and spec, to tell whether a refused patch changed anything.
func nodeJSON(ctx context.Context, c *cluster, node string) (string, error) {
	return c.kubectl(ctx, "get", "node", node, "-o", "jsonpath={.metadata.labels} {.spec}")
}

// tokenKubeconfig writes a kubeconfig that authenticates with a token the API server issues for the service
// account (kubectl create token, with extra flags such as the bound pod), and returns its path.
func tokenKubeconfig(ctx context.Context, c *cluster, name, sa string, flags ...string) (string, error) {
	token, err := c.kubectl(ctx, append([]string{"-n", helmNamespace, "create", "token", sa, "--duration=10m"}, flags...)...)
	if err != nil {
		return "", fmt.Errorf("create token for %s: %w", sa, err)
	}
	admin, err := os.ReadFile(filepath.Join(c.state, "pki/admin.kubeconfig"))
	if err != nil {
		return "", err
	}
	var server, ca string
	for _, l := range strings.Split(string(admin), "\n") {
		l = strings.TrimSpace(l)
		if v, ok := strings.CutPrefix(l, "server: "); ok {
			server = v
		}
		if v, ok := strings.CutPrefix(l, "certificate-authority: "); ok {
			ca = v
		}
	}
	if server == "" || ca == "" {
		return "", errors.New("admin.kubeconfig: no server or certificate-authority")
	}
	path := filepath.Join(c.state, name+".kubeconfig")
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: node\n  cluster:\n    certificate-authority: %s\n    server: %s\n"+
		"users:\n- name: %s\n  user:\n    token: %s\ncontexts:\n- name: node\n  context: {cluster: node, user: %s}\ncurrent-context: node\n",
		ca, server, name, strings.TrimSpace(token), name)
	return path, os.WriteFile(path, []byte(kc), 0o600)
}
