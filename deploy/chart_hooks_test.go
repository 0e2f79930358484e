package deploy

import (
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// checkTeardownHook: helm uninstall's pre-delete hook stops the cache pods, then runs the agent's own -teardown
// on every node the cache ran on, with the cache's -localip and -interfacename, and waits for it, in that order.
func checkTeardownHook(t *testing.T, r *chartRender, cache *options.Options) {
	t.Helper()
	ds := r.daemonSets["kube-system/node-local-dns"]
	stop := r.hookJobs["Job kube-system/node-local-dns-pre-delete-stop"]
	wait := r.hookJobs["Job kube-system/node-local-dns-pre-delete-wait"]
	td := r.hookDaemonSets["DaemonSet kube-system/node-local-dns-teardown"]
	if stop == nil || wait == nil || td == nil {
		t.Fatalf("pre-delete hook: stop Job %v, teardown DaemonSet %v, wait Job %v; want all three", stop != nil, td != nil, wait != nil)
	}
	weight := func(a map[string]string) int {
		w, err := strconv.Atoi(a["helm.sh/hook-weight"])
		if err != nil || a["helm.sh/hook"] != "pre-delete" {
			t.Errorf("hook annotations %v: want pre-delete with a numeric weight", a)
		}
		return w
	}
	if ws, wt, ww := weight(stop.Annotations), weight(td.Annotations), weight(wait.Annotations); !(ws < wt && wt < ww) {
		t.Errorf("hook weights stop %d, teardown %d, wait %d: want the pods stopped, then the teardown, then the wait", ws, wt, ww)
	}
	stopArgs := stop.Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"delete", "daemonset", ds.Name, "--cascade=foreground", "--wait"} {
		if !slices.Contains(stopArgs, want) {
			t.Errorf("stop Job args %q lack %q: it must delete the cache DaemonSet and wait for its pods", stopArgs, want)
		}
	}
	if waitArgs := wait.Spec.Template.Spec.Containers[0].Args; !slices.Equal(waitArgs[:3], []string{"rollout", "status", "daemonset/" + td.Name}) {
		t.Errorf("wait Job args %q: want kubectl rollout status daemonset/%s", waitArgs, td.Name)
	}

	ps, cps := &td.Spec.Template.Spec, &ds.Spec.Template.Spec
	if ps.HostNetwork != cps.HostNetwork || !slices.EqualFunc(ps.Tolerations, cps.Tolerations, func(a, b corev1.Toleration) bool { return a == b }) ||
		!equalJSON(ps.NodeSelector, cps.NodeSelector) || !equalJSON(ps.Affinity, cps.Affinity) {
		t.Errorf("teardown pods are not scheduled as the cache's: hostNetwork %v/%v tolerations %v/%v nodeSelector %v/%v affinity %v/%v",
			ps.HostNetwork, cps.HostNetwork, ps.Tolerations, cps.Tolerations, ps.NodeSelector, cps.NodeSelector, ps.Affinity, cps.Affinity)
	}
	if len(ps.InitContainers) != 1 {
		t.Fatalf("teardown pod has %d init containers, want the one that runs -teardown", len(ps.InitContainers))
	}
	ic := &ps.InitContainers[0]
	cc := &cps.Containers[0]
	if ic.Image != cc.Image {
		t.Errorf("teardown image %q, want the cache's %q (our own binary's -teardown)", ic.Image, cc.Image)
	}
	o, err := options.Parse(ic.Args, io.Discard)
	if err != nil {
		t.Fatalf("teardown args %q: %v", ic.Args, err)
	}
	// -teardown reads -localip for what to remove but does not validate it; compare the text with the cache's.
	localip := strings.Join(ipStrings(cache), ",")
	if i := slices.Index(ic.Args, "-localip"); o.Mode != options.ModeTeardown || i < 0 || i+1 == len(ic.Args) || ic.Args[i+1] != localip ||
		o.InterfaceName != cache.InterfaceName {
		t.Errorf("teardown args %q (interface %q): want -teardown -localip %s with the cache's interface %q",
			ic.Args, o.InterfaceName, localip, cache.InterfaceName)
	}
	if !equalJSON(ic.SecurityContext, cc.SecurityContext) {
		t.Errorf("teardown securityContext %+v, want the cache's %+v", ic.SecurityContext, cc.SecurityContext)
	}
	// The Jobs may do exactly what they do: delete and watch DaemonSets in the release namespace.
	role := r.hookOther["Role kube-system/node-local-dns-pre-delete"]
	if role == nil {
		t.Fatalf("no Role for the hook Jobs")
	}
	rules, _ := role["rules"].([]any)
	if len(rules) != 1 || !equalJSON(rules[0], map[string]any{"apiGroups": []string{"apps"}, "resources": []string{"daemonsets"},
		"verbs": []string{"get", "list", "watch", "delete"}}) {
		t.Errorf("hook Role rules %v: want get, list, watch, delete on daemonsets only", rules)
	}
}
