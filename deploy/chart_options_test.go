package deploy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// TestChartOwnOptions: each of nodelocaldns's own keys does what values.yaml says.
func TestChartOwnOptions(t *testing.T) {
	cases := []struct {
		name   string
		values string
		check  func(t *testing.T, v *releaseView)
	}{
		{"surgeRollout on by default", ``, func(t *testing.T, v *releaseView) {
			ru := v.daemonSets["kube-system/node-local-dns"].Spec.UpdateStrategy.RollingUpdate
			if ru == nil || ru.MaxSurge.String() != "1" || ru.MaxUnavailable.String() != "0" {
				t.Errorf("rollingUpdate %+v, want maxSurge 1, maxUnavailable 0", ru)
			}
		}},
		{"surgeRollout off", `surgeRollout: false`, func(t *testing.T, v *releaseView) {
			ru := v.daemonSets["kube-system/node-local-dns"].Spec.UpdateStrategy.RollingUpdate
			if ru == nil || ru.MaxSurge != nil || ru.MaxUnavailable.String() != "10%" {
				t.Errorf("rollingUpdate %+v, want the standard maxUnavailable 10%%", ru)
			}
		}},
		{"readinessProbe off", `readinessProbe: {enabled: false}`, func(t *testing.T, v *releaseView) {
			if v.ctr.ReadinessProbe != nil || v.ctr.LivenessProbe == nil {
				t.Errorf("readiness %+v liveness %+v: want liveness only", v.ctr.ReadinessProbe, v.ctr.LivenessProbe)
			}
		}},
		{"extraLocalIps", `extraLocalIps: [169.254.20.11]`, func(t *testing.T, v *releaseView) {
			want := []string{"169.254.20.25", "169.254.20.11", "172.20.0.10"}
			if got := ipStrings(v.opts); !slices.Equal(got, want) {
				t.Errorf("-localip %q, want %q", got, want)
			}
			v.eachBlock(t, "bind", func(s string) bool { return s == "bind "+strings.Join(want, " ") }, "every listen address")
		}},
		{"resilientCache", `resilientCache: true`, func(t *testing.T, v *releaseView) {
			v.eachBlock(t, "cache", func(s string) bool {
				return strings.Contains(s, "serve_stale 1h verify 100ms") && strings.Contains(s, "serve_stale_policy prefer_positive")
			}, "serve_stale 1h verify 100ms and serve_stale_policy prefer_positive")
			if d := v.directive(t, "cluster.local:53", "cache"); !strings.HasPrefix(d, "cache { success 9984 30 denial 9984 5 ") {
				t.Errorf("cluster.local cache = %q: the standard success and denial settings must stay", d)
			}
		}},
		{"resilientCache with prefetch", `{resilientCache: true, config: {prefetch: {enabled: true}}}`, func(t *testing.T, v *releaseView) {
			v.eachBlock(t, "cache", contains("prefetch 3 30s 20% serve_stale 1h verify 100ms serve_stale_policy prefer_positive"), "both")
		}},
		{"podMonitor", `podMonitor: {enabled: true, interval: 20s}`, func(t *testing.T, v *releaseView) {
			pm := v.other["PodMonitor kube-system/node-local-dns"]
			if pm == nil {
				t.Fatalf("no PodMonitor: %v", mapKeys(v.other))
			}
			spec := pm["spec"].(map[string]any)
			var ports []float64
			for _, e := range spec["podMetricsEndpoints"].([]any) {
				ports = append(ports, e.(map[string]any)["portNumber"].(float64))
			}
			// CoreDNS's prometheus port (the Corefile's) and the agent's -metrics-listen-address port.
			if !slices.Equal(ports, []float64{9253, 9353}) || spec["selector"].(map[string]any)["matchLabels"].(map[string]any)["k8s-app"] != "node-local-dns" {
				t.Errorf("PodMonitor spec %v: want ports 9253 and 9353 of the cache pods", spec)
			}
		}},
		{"prometheusRule", `prometheusRule: {enabled: true, labels: {release: prom}}`, func(t *testing.T, v *releaseView) {
			pr := v.other["PrometheusRule kube-system/node-local-dns"]
			if pr == nil {
				t.Fatalf("no PrometheusRule: %v", mapKeys(v.other))
			}
			if n := len(ruleExprs(t, pr)); n < 5 {
				t.Errorf("%d alerts, want the chart's set", n)
			}
		}},
		{"ciliumLocalRedirectPolicy", `{ciliumLocalRedirectPolicy: {enabled: true}, config: {setupIptables: false, bindIp: false}}`, func(t *testing.T, v *releaseView) {
			lrp := v.other["CiliumLocalRedirectPolicy kube-system/node-local-dns"]
			if lrp == nil {
				t.Fatalf("no CiliumLocalRedirectPolicy: %v", mapKeys(v.other))
			}
			spec := lrp["spec"].(map[string]any)
			fe := spec["redirectFrontend"].(map[string]any)["serviceMatcher"].(map[string]any)
			be := spec["redirectBackend"].(map[string]any)
			if fe["serviceName"] != "kube-dns" || be["localEndpointSelector"].(map[string]any)["matchLabels"].(map[string]any)["k8s-app"] != "node-local-dns" {
				t.Errorf("LRP spec %v: want kube-dns redirected to the cache pods", spec)
			}
			var names []string
			for _, p := range be["toPorts"].([]any) {
				names = append(names, p.(map[string]any)["name"].(string))
			}
			// Cilium matches the Service's port names: kube-dns's are dns and dns-tcp.
			if !slices.Equal(names, []string{"dns", "dns-tcp"}) {
				t.Errorf("LRP port names %q, want kube-dns's dns and dns-tcp", names)
			}
			if v.ds.HostNetwork || v.opts.SetupNftables || v.directive(t, ".:53", "bind") != "bind 0.0.0.0" {
				t.Errorf("hostNetwork %v table %v bind %q: want the pod network, no table, the wildcard bind", v.ds.HostNetwork, v.opts.SetupNftables, v.directive(t, ".:53", "bind"))
			}
		}},
		{"hooks off", `hooks: {preDelete: {enabled: false}}`, func(t *testing.T, v *releaseView) {
			if len(v.hookJobs)+len(v.hookDaemonSets)+len(v.hookOther) != 0 {
				t.Errorf("hook objects rendered: %v %v %v", mapKeys(v.hookJobs), mapKeys(v.hookDaemonSets), mapKeys(v.hookOther))
			}
		}},
		{"helm test default", ``, func(t *testing.T, v *releaseView) {
			p := v.hookPods["Pod kube-system/node-local-dns-test-resolve"]
			if p == nil || p.Annotations["helm.sh/hook"] != "test" {
				t.Fatalf("no helm test pod: %v", mapKeys(v.hookPods))
			}
			if c := p.Spec.Containers[0].Command; !slices.Equal(c, []string{"nslookup", "kubernetes.default.svc.cluster.local", "169.254.20.25"}) {
				t.Errorf("helm test command %q: want a lookup through localDns", c)
			}
		}},
		{"helm test command", `tests: {image: {repository: localhost/client, tag: "1"}, command: [/dnsq, q, x]}`, func(t *testing.T, v *releaseView) {
			p := v.hookPods["Pod kube-system/node-local-dns-test-resolve"]
			if p.Spec.Containers[0].Image != "localhost/client:1" || !slices.Equal(p.Spec.Containers[0].Command, []string{"/dnsq", "q", "x"}) {
				t.Errorf("helm test container %+v", p.Spec.Containers[0])
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, view(t, []string{valuesFile(t, tc.values)}))
		})
	}
}

// TestChartFlagsOff: each value that turns an agent default off (or an opt-in on), or sets what the agent
// otherwise derives, passes its flag, only then, and the agent's parser takes the args.
func TestChartFlagsOff(t *testing.T) {
	for _, tc := range []struct{ value, flag string }{
		{"linkLocalFallback.enabled=false", "-linklocal-fallback=false"},
		{"linkLocalFallback.lease=30m", "-fallback-lease=30m"},
		{"linkLocalFallback.kubeDnsIp=10.96.0.10", "-kube-dns-ip=10.96.0.10"},
		{"foreignDropStepAside=false", "-foreign-drop-step-aside=false"},
		{"upstreamClientSubnet=true", "-upstream-client-subnet"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			out, err := helmTemplate(t, nil, tc.value)
			if err != nil {
				t.Fatal(err)
			}
			r, err := decodeChart(out)
			if err != nil {
				t.Fatal(err)
			}
			args := r.daemonSets["kube-system/node-local-dns"].Spec.Template.Spec.Containers[0].Args
			if !slices.Contains(args, tc.flag) {
				t.Errorf("args %q lack %s", args, tc.flag)
			}
			name, _, _ := strings.Cut(tc.flag, "=")
			def := renderChart(t, nil)
			if a := def.daemonSets["kube-system/node-local-dns"].Spec.Template.Spec.Containers[0].Args; slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, name) }) {
				t.Errorf("default args %q name %s: the agent's default needs no flag", a, name)
			}
			if _, err := options.Parse(args, io.Discard); err != nil {
				t.Errorf("options.Parse(%q): %v", args, err)
			}
		})
	}
}

// TestChartRefusals: a key the chart cannot honour fails `helm template` (and so the install) with a message
// that names it.
func TestChartRefusals(t *testing.T) {
	for _, tc := range []struct{ values, key string }{
		// node-cache's image, as the community chart's values name it: our flags and probes would crash-loop it.
		{"image: {repository: registry.k8s.io/dns/k8s-dns-node-cache, tag: 1.25.0}", "image.repository"},
		{"image: {repository: example.com/mirror/k8s-dns-node-cache}", "image.repository"},
		{`config: {commProtocol: tcp}`, "config/commProtocol"},
		{`config: {serveStale: {mode: lazy}}`, "config/serveStale/mode"},
		{`securityContext: {privileged: true}`, "securityContext.privileged"},
		{`securityContext: {capabilities: {add: [SYS_ADMIN]}}`, "securityContext.capabilities.add"},
		{`securityContext: {capabilities: {drop: [NET_RAW]}}`, "securityContext.capabilities.drop"},
		{`ciliumLocalRedirectPolicy: {enabled: true}`, "ciliumLocalRedirectPolicy.enabled"},
		{`{ciliumLocalRedirectPolicy: {enabled: true, serviceNamespace: dns}, config: {setupIptables: false}}`, "ciliumLocalRedirectPolicy.serviceNamespace"},
		{`{resilientCache: true, config: {serveStale: {enabled: true}}}`, "resilientCache"},
		{"resilientCache: true\nconfig:\n  customConfig: \".:53 {}\"\n", "resilientCache"},
		// Keys of the other community chart (lablabs) or of no chart: refused by the schema, named.
		{`config: {zones: {".:53": {}}}`, "zones"},
		{`config: {localDnsIp: 169.254.20.11}`, "localDnsIp"},
		{`image: {args: {skipTeardown: true}}`, "args"},
		{`useHostNetwork: false`, "useHostNetwork"},
		{`config: {setupEbtables: true}`, "setupEbtables"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			_, err := helmTemplate(t, []string{valuesFile(t, tc.values)})
			if err == nil {
				t.Fatalf("values %s rendered; want a failure naming %s", tc.values, tc.key)
			}
			if !strings.Contains(err.Error(), tc.key) {
				t.Errorf("values %s: error does not name %s:\n%v", tc.values, tc.key, err)
			}
		})
	}
}

// TestChartCommunityFile: the community-vocabulary values file installs this chart and gives the Corefile that
// chart documents for those values (testdata/chart/community.Corefile, written from the documented meaning of
// each key), less nothing: every key in the file is honoured.
func TestChartCommunityFile(t *testing.T) {
	v := view(t, []string{"testdata/chart/community.yaml"})
	want, err := os.ReadFile("testdata/chart/community.Corefile")
	if err != nil {
		t.Fatal(err)
	}
	if v.template != string(want) {
		t.Errorf("Corefile differs from testdata/chart/community.Corefile:\n%s", v.template)
	}
	wantArgs := []string{"-localip", "169.254.20.10,10.96.0.10", "-conf", "/run/nodelocaldns/Corefile", "-upstreamsvc", "kube-dns-upstream", "-health-socket", "/run/nodelocaldns/health.sock", "-health-port", "8081"}
	if !slices.Equal(v.ctr.Args, wantArgs) {
		t.Errorf("args %q, want %q", v.ctr.Args, wantArgs)
	}
	// The invariants that hold whatever the values: its own updateStrategy, the dashboard and the extra block
	// are this file's choices.
	checkFiles(t, v.manifest, v.ds, v.opts)
	cf := corefileOf(t, v.manifest)
	if p := v.directive(t, "cluster.local:53", "prometheus"); p != "prometheus :9253" {
		t.Errorf("prometheus = %q", p)
	}
	cf.prometheusPort = 9253
	checkProbes(t, v.ds, v.ctr, v.opts)
	checkPorts(t, v.manifest, v.ctr, v.opts, cf)
	checkTeardownHook(t, v.chartRender, v.opts)
}

// TestChartRefusesNodeCacheImage: a values file that names node-cache's image, as one written for the community
// chart does, fails the install with one line that names the key and the value and says what to set instead
// (docs/helm.md, image.repository); the same file with our image installs.
func TestChartRefusesNodeCacheImage(t *testing.T) {
	const image = "registry.k8s.io/dns/k8s-dns-node-cache"
	_, err := helmTemplate(t, []string{"testdata/chart/community.yaml", valuesFile(t, "image: {repository: "+image+", tag: 1.25.0}")})
	if err == nil {
		t.Fatal("node-cache's image rendered; want a refusal")
	}
	// helm's one error line: everything the user needs is in it.
	var line string
	for _, l := range strings.Split(err.Error(), "\n") {
		if strings.HasPrefix(l, "Error: ") {
			line = l
		}
	}
	for _, want := range []string{`image.repository: "` + image + `" is node-cache's image`, "set image.repository (and image.tag) to the nodelocaldns image"} {
		if !strings.Contains(line, want) {
			t.Errorf("helm's error line lacks %q:\n%v", want, err)
		}
	}
	if _, err := helmTemplate(t, []string{"testdata/chart/community.yaml"}); err != nil {
		t.Errorf("the same file with our image: %v", err)
	}
}

// TestChartBindIPFalseOnTheHostNetwork: config.bindIp false, the community chart's default written out, installs:
// on the host network it renders the standard bind of the listen addresses (a wildcard listener is not
// intercepted), exactly as without the key, and the release notes say it was not honoured.
func TestChartBindIPFalseOnTheHostNetwork(t *testing.T) {
	file := valuesFile(t, "config: {bindIp: false}")
	if got, want := view(t, []string{file}).template, view(t, nil).template; got != want {
		t.Errorf("config.bindIp=false renders another Corefile than the default:\n%s\nwant\n%s", got, want)
	}
	kubeconfig := discoveryOnlyAPIServer(t)
	notes := func(values ...string) string {
		args := []string{"install", chartRelease, chartDir, "--namespace", chartNamespace, "--dry-run=client", "--disable-openapi-validation", "--kubeconfig", kubeconfig}
		for _, v := range values {
			args = append(args, "--values", v)
		}
		out, err := helm(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	const note = "config.bindIp=false (bind 0.0.0.0) is not honoured on the host network"
	n := notes(file)
	_, listen, _ := strings.Cut(n, "Listen addresses: ")
	listen, _, _ = strings.Cut(listen, ".\n")
	if !strings.Contains(n, note) || listen == "" || !strings.Contains(n, "the Corefile binds "+listen+",") {
		t.Errorf("notes with config.bindIp=false lack %q naming the addresses bound (%q):\n%s", note, listen, n)
	}
	if n := notes(); strings.Contains(n, note) {
		t.Errorf("notes of the default install say %q", note)
	}
}

// discoveryOnlyAPIServer is what `helm install --dry-run=client` asks of a cluster before it renders the release
// and its notes (the version and the discovery of the kinds the default release holds), served from a test
// server; it returns a kubeconfig naming it.
func discoveryOnlyAPIServer(t *testing.T) string {
	t.Helper()
	resources := func(gv string, namespaced map[string]string) string {
		var rs []string
		for name, kind := range namespaced {
			rs = append(rs, fmt.Sprintf(`{"name":%q,"singularName":"","namespaced":true,"kind":%q,"verbs":["create","get","list"]}`, name, kind))
		}
		return fmt.Sprintf(`{"kind":"APIResourceList","apiVersion":"v1","groupVersion":%q,"resources":[%s]}`, gv, strings.Join(rs, ","))
	}
	group := func(name string) string {
		return fmt.Sprintf(`{"name":%q,"versions":[{"groupVersion":"%s/v1","version":"v1"}],"preferredVersion":{"groupVersion":"%s/v1","version":"v1"}}`, name, name, name)
	}
	paths := map[string]string{
		"/version": `{"major":"1","minor":"36","gitVersion":"v1.36.0"}`,
		"/api":     `{"kind":"APIVersions","versions":["v1"]}`,
		"/apis": `{"kind":"APIGroupList","apiVersion":"v1","groups":[` + group("apps") + "," + group("batch") + "," +
			group("rbac.authorization.k8s.io") + `]}`,
		"/api/v1": resources("v1", map[string]string{"pods": "Pod", "services": "Service", "configmaps": "ConfigMap",
			"serviceaccounts": "ServiceAccount"}),
		"/apis/apps/v1":                      resources("apps/v1", map[string]string{"daemonsets": "DaemonSet"}),
		"/apis/batch/v1":                     resources("batch/v1", map[string]string{"jobs": "Job"}),
		"/apis/rbac.authorization.k8s.io/v1": resources("rbac.authorization.k8s.io/v1", map[string]string{"roles": "Role", "rolebindings": "RoleBinding"}),
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := paths[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	p := filepath.Join(t.TempDir(), "kubeconfig")
	kc := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: " + srv.URL + "}\n" +
		"contexts:\n- name: c\n  context: {cluster: c}\ncurrent-context: c\n"
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
