package deploy

import (
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/coredns/caddy/caddyfile"
	corev1 "k8s.io/api/core/v1"

	agentcorefile "github.com/nodelocaldns/nodelocaldns/internal/corefile"
	"github.com/nodelocaldns/nodelocaldns/internal/dnsserver"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// releaseView is what a values case checks: the decoded render, the cache's parsed args, and its Corefile as
// the agent renders it at run time.
type releaseView struct {
	*chartRender
	ds       *corev1.PodSpec
	ctr      *corev1.Container
	opts     *options.Options
	template string                           // the ConfigMap's Corefile
	blocks   map[string]caddyfile.ServerBlock // the agent's render, by server block key
	keys     []string                         // the keys in order
}

// view renders the chart, parses the cache's args with the agent's own parser and renders the ConfigMap's
// Corefile with the agent's own renderer (which validates it against CoreDNS's directives), so each case sees
// what a node would run.
func view(t *testing.T, values []string, sets ...string) *releaseView {
	t.Helper()
	r := renderChart(t, values, sets...)
	var ds *corev1.PodSpec
	for _, d := range r.daemonSets {
		if ds != nil {
			t.Fatalf("more than one DaemonSet in the release")
		}
		ds = &d.Spec.Template.Spec
	}
	if ds == nil {
		t.Fatal("no DaemonSet in the release")
	}
	v := &releaseView{chartRender: r, ds: ds, ctr: &ds.Containers[0]}
	var err error
	if v.opts, err = options.Parse(v.ctr.Args, io.Discard); err != nil {
		t.Fatalf("options.Parse(%q): %v", v.ctr.Args, err)
	}
	if len(r.configMaps) == 0 {
		t.Fatal("no ConfigMap in the release")
	}
	for _, cm := range r.configMaps {
		if text, ok := cm.Data["Corefile"]; ok {
			v.template = text
		}
	}
	out, err := agentcorefile.Render([]byte(v.template), agentcorefile.KubeDNS{}, agentcorefile.Params{
		LocalIPs: v.opts.LocalIPs, DNSPort: v.opts.DNSPort, ClusterDNS: "10.96.0.11",
		ClusterDNSEnv: agentcorefile.ServiceHostEnv(v.opts.UpstreamSvc), PrometheusEndpoint: v.opts.PrometheusListenAddress,
		Directives: dnsserver.Directives(), // the compiled-in plugins', as the agent validates with
	})
	if err != nil {
		t.Fatalf("the agent refuses the chart's Corefile: %v\n%s", err, v.template)
	}
	blocks, err := caddyfile.Parse("Corefile", strings.NewReader(string(out)), nil)
	if err != nil {
		t.Fatal(err)
	}
	v.blocks = map[string]caddyfile.ServerBlock{}
	for _, b := range blocks {
		v.blocks[b.Keys[0]] = b
		v.keys = append(v.keys, b.Keys[0])
	}
	return v
}

// directive is every occurrence of a directive in a block, tokens joined by spaces, nested blocks included
// ("cache 30 { prefetch 3 30s 20% }"); "" when absent.
func (v *releaseView) directive(t *testing.T, key, name string) string {
	t.Helper()
	b, ok := v.blocks[key]
	if !ok {
		t.Fatalf("no server block %q (have %q)", key, v.keys)
	}
	var s []string
	for _, tok := range b.Tokens[name] {
		s = append(s, tok.Text)
	}
	return strings.Join(s, " ")
}

// The standard template's blocks, as the chart's defaults name them.
var standardKeys = []string{"cluster.local:53", "in-addr.arpa:53", "ip6.arpa:53", ".:53"}

func (v *releaseView) wantArgs(t *testing.T, want ...string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(v.ctr.Args, w) {
			t.Errorf("args %q lack %q", v.ctr.Args, w)
		}
	}
}

func (v *releaseView) eachBlock(t *testing.T, name string, ok func(string) bool, what string) {
	t.Helper()
	for _, k := range standardKeys {
		if d := v.directive(t, k, name); !ok(d) {
			t.Errorf("block %s: %s = %q, want %s", k, name, d, what)
		}
	}
}

func contains(sub string) func(string) bool {
	return func(s string) bool { return strings.Contains(s, sub) }
}

// TestChartCommunityValues: each community key, alone, does to the render what that chart documents for it.
func TestChartCommunityValues(t *testing.T) {
	cases := []struct {
		name   string
		values string
		check  func(t *testing.T, v *releaseView)
	}{
		{"defaults", ``, func(t *testing.T, v *releaseView) {
			if got := ipStrings(v.opts); !slices.Equal(got, []string{"169.254.20.25", "172.20.0.10"}) {
				t.Errorf("-localip %q, want the community defaults localDns, dnsServer", got)
			}
			if !slices.Equal(v.keys, standardKeys) {
				t.Errorf("server blocks %q, want %q", v.keys, standardKeys)
			}
			v.eachBlock(t, "bind", func(s string) bool { return s == "bind 169.254.20.25 172.20.0.10" }, "both listen addresses")
			if d := v.directive(t, "cluster.local:53", "health"); d != "health 169.254.20.25:8080" {
				t.Errorf("health = %q", d)
			}
		}},
		{"dnsDomain", `config: {dnsDomain: example.org}`, func(t *testing.T, v *releaseView) {
			if v.keys[0] != "example.org:53" {
				t.Errorf("first block %q, want example.org:53", v.keys[0])
			}
		}},
		{"localDns and dnsServer", `config: {localDns: 169.254.0.53, dnsServer: 10.0.0.10}`, func(t *testing.T, v *releaseView) {
			if got := ipStrings(v.opts); !slices.Equal(got, []string{"169.254.0.53", "10.0.0.10"}) {
				t.Errorf("-localip %q", got)
			}
			if h := v.directive(t, "cluster.local:53", "health"); h != "health 169.254.0.53:8080" {
				t.Errorf("health %q, want on localDns (the standard manifest's probes go there)", h)
			}
		}},
		{"commProtocol", `config: {commProtocol: prefer_udp}`, func(t *testing.T, v *releaseView) {
			for _, k := range standardKeys[:3] {
				if d := v.directive(t, k, "forward"); !strings.Contains(d, "{ prefer_udp }") {
					t.Errorf("block %s: forward = %q, want prefer_udp", k, d)
				}
			}
		}},
		{"cacheTTL", `config: {cacheTTL: 120}`, func(t *testing.T, v *releaseView) {
			if d := v.directive(t, "cluster.local:53", "cache"); d != "cache { success 9984 120 denial 9984 5 }" {
				t.Errorf("cluster.local cache = %q", d)
			}
			for _, k := range standardKeys[1:] {
				if d := v.directive(t, k, "cache"); d != "cache 120" {
					t.Errorf("block %s: cache = %q, want cache 120", k, d)
				}
			}
		}},
		{"prefetch", `config: {prefetch: {enabled: true}}`, func(t *testing.T, v *releaseView) {
			v.eachBlock(t, "cache", contains("prefetch 3 30s 20%"), "the community defaults prefetch 3 30s 20%")
		}},
		{"serveStale", `config: {serveStale: {enabled: true, duration: 2h}}`, func(t *testing.T, v *releaseView) {
			v.eachBlock(t, "cache", contains("serve_stale 2h verify"), "serve_stale 2h verify")
		}},
		{"enableLogging", `config: {enableLogging: true}`, func(t *testing.T, v *releaseView) {
			v.eachBlock(t, "log", func(s string) bool { return s == "log" }, "log")
		}},
		{"noIPv6Lookups", `config: {noIPv6Lookups: true}`, func(t *testing.T, v *releaseView) {
			for _, k := range standardKeys {
				d := v.directive(t, k, "template")
				want := strings.HasSuffix(k, "arpa:53") == false
				if (d == "template ANY AAAA { rcode NOERROR }") != want {
					t.Errorf("block %s: template = %q, want the empty AAAA answer: %v", k, d, want)
				}
			}
		}},
		{"healthPort", `config: {healthPort: 9090}`, func(t *testing.T, v *releaseView) {
			if v.opts.HealthPort != 9090 || v.directive(t, "cluster.local:53", "health") != "health 169.254.20.25:9090" {
				t.Errorf("-health-port %d, health %q: want 9090 in both", v.opts.HealthPort, v.directive(t, "cluster.local:53", "health"))
			}
			checkProbes(t, v.ds, v.ctr, v.opts) // the probes use the health socket, whatever the port
		}},
		{"port", `config: {port: {number: 5353, udp: dns-udp, tcp: dns-over-tcp}}`, func(t *testing.T, v *releaseView) {
			if v.opts.DNSPort != 5353 || v.keys[0] != "cluster.local:5353" {
				t.Errorf("-dns.port %d, first block %q: want 5353", v.opts.DNSPort, v.keys[0])
			}
			up := v.services["kube-system/kube-dns-upstream"]
			if up.Spec.Ports[0].Name != "dns-udp" || up.Spec.Ports[1].Name != "dns-over-tcp" || up.Spec.Ports[0].Port != 53 {
				t.Errorf("kube-dns-upstream ports %+v: want kube-dns's port 53 under the given names", up.Spec.Ports)
			}
		}},
		{"setupInterface", `config: {setupInterface: false}`, func(t *testing.T, v *releaseView) {
			if v.opts.SetupInterface {
				t.Errorf("args %q: the agent would set up the interface", v.ctr.Args)
			}
		}},
		{"setupIptables", `config: {setupIptables: false}`, func(t *testing.T, v *releaseView) {
			if v.opts.SetupNftables || v.ds.HostNetwork || !slices.Equal(ipStrings(v.opts), []string{"169.254.20.25"}) {
				t.Errorf("args %q hostNetwork %v: want no table, no host network, and the ClusterIP dropped from -localip", v.ctr.Args, v.ds.HostNetwork)
			}
			if h := v.directive(t, "cluster.local:53", "health"); h != "health :8080" {
				t.Errorf("health %q: off the host network it serves on the pod IP", h)
			}
			checkProbes(t, v.ds, v.ctr, v.opts) // the probes use the health socket, whatever the network
		}},
		{"skipTeardown", `config: {skipTeardown: true}`, func(t *testing.T, v *releaseView) {
			if !v.opts.SkipTeardown {
				t.Errorf("args %q: want -skipteardown", v.ctr.Args)
			}
		}},
		{"extraServerBlocks", "config:\n  extraServerBlocks: |\n    corp.example:53 {\n        errors\n        forward . 10.0.0.53\n    }\n",
			func(t *testing.T, v *releaseView) {
				if len(v.keys) != 5 || v.keys[4] != "corp.example:53" || v.directive(t, "corp.example:53", "forward") != "forward . 10.0.0.53" {
					t.Errorf("blocks %q: want the standard four and corp.example:53 last", v.keys)
				}
			}},
		{"customConfig", "config:\n  customConfig: |\n    .:53 {\n        bind __PILLAR__LOCAL__DNS__\n        forward . __PILLAR__UPSTREAM__SERVERS__\n        health __PILLAR__LOCAL__DNS__:8080\n    }\n",
			func(t *testing.T, v *releaseView) {
				if !strings.HasPrefix(v.template, ".:53 {\n    bind __PILLAR__LOCAL__DNS__\n") || len(v.keys) != 1 {
					t.Errorf("Corefile %q: want the custom one, verbatim", v.template)
				}
			}},
		{"upstreamServers", `config: {upstreamServers: [9.9.9.9, 149.112.112.112]}`, func(t *testing.T, v *releaseView) {
			if d := v.directive(t, ".:53", "forward"); d != "forward . 9.9.9.9 149.112.112.112" {
				t.Errorf(". forward = %q", d)
			}
		}},
		{"upstreamForwardConfig", `config: {upstreamForwardConfig: {max_concurrent: 1000, policy: sequential}}`, func(t *testing.T, v *releaseView) {
			if d := v.directive(t, ".:53", "forward"); d != "forward . /etc/resolv.conf { max_concurrent 1000 policy sequential }" {
				t.Errorf(". forward = %q", d)
			}
		}},
		{"customUpstreamsvc", `config: {customUpstreamsvc: kube-dns}`, func(t *testing.T, v *releaseView) {
			if v.opts.UpstreamSvc != "kube-dns" {
				t.Errorf("-upstreamsvc %q", v.opts.UpstreamSvc)
			}
			if _, ok := v.services["kube-system/kube-dns-upstream"]; ok {
				t.Errorf("kube-dns-upstream is rendered although the agent reads another Service")
			}
		}},
		// Helm merges maps with the defaults: null removes the default k8s-app key.
		{"upstreamServiceSelector", `config: {upstreamServiceSelector: {k8s-app: null, app: coredns}}`, func(t *testing.T, v *releaseView) {
			if s := v.services["kube-system/kube-dns-upstream"].Spec.Selector; len(s) != 1 || s["app"] != "coredns" {
				t.Errorf("kube-dns-upstream selector %v", s)
			}
		}},
		{"image", `image: {repository: registry.example/nld, tag: v1.2.3, pullPolicy: Always}`, func(t *testing.T, v *releaseView) {
			if v.ctr.Image != "registry.example/nld:v1.2.3" || v.ctr.ImagePullPolicy != corev1.PullAlways {
				t.Errorf("image %q pull %q", v.ctr.Image, v.ctr.ImagePullPolicy)
			}
			if td := v.hookDaemonSets["DaemonSet kube-system/node-local-dns-teardown"]; td.Spec.Template.Spec.InitContainers[0].Image != v.ctr.Image {
				t.Errorf("the teardown hook runs %q, not the cache's image", td.Spec.Template.Spec.InitContainers[0].Image)
			}
		}},
		{"resources", `resources: {requests: {cpu: 50m, memory: 64Mi}, limits: {memory: 128Mi}}`, func(t *testing.T, v *releaseView) {
			if v.ctr.Resources.Limits.Memory().String() != "128Mi" || v.ctr.Resources.Requests.Cpu().String() != "50m" {
				t.Errorf("resources %+v", v.ctr.Resources)
			}
		}},
		{"updateStrategy", `updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 10%}}`, func(t *testing.T, v *releaseView) {
			ru := v.daemonSets["kube-system/node-local-dns"].Spec.UpdateStrategy.RollingUpdate
			if ru.MaxSurge != nil || ru.MaxUnavailable.String() != "10%" {
				t.Errorf("rollingUpdate %+v: want the given strategy verbatim", ru)
			}
		}},
		{"pod metadata and scheduling", `
podAnnotations: {team: dns}
podLabels: {tier: node}
tolerations: [{operator: Exists}]
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/os, operator: In, values: [linux]}]}]}}}
nodeSelector: {kubernetes.io/os: linux}
priorityClassName: node-critical-dns
imagePullSecrets: [{name: registry}]
lifecycle: {preStop: {sleep: {seconds: 5}}}
daemonsetAnnotations: {owner: dns}
daemonsetLabels: {owner: dns}
configMapAnnotations: {owner: dns}
configMapLabels: {owner: dns}
service: {annotations: {owner: dns}}
`, func(t *testing.T, v *releaseView) {
			ds := v.daemonSets["kube-system/node-local-dns"]
			pm := ds.Spec.Template.ObjectMeta
			if pm.Annotations["team"] != "dns" || pm.Annotations["prometheus.io/port"] != "9253" || pm.Labels["tier"] != "node" || pm.Labels["k8s-app"] != "node-local-dns" {
				t.Errorf("pod metadata %+v", pm)
			}
			if len(v.ds.Tolerations) != 1 || v.ds.Affinity == nil || v.ds.NodeSelector["kubernetes.io/os"] != "linux" ||
				v.ds.PriorityClassName != "node-critical-dns" || len(v.ds.ImagePullSecrets) != 1 || v.ctr.Lifecycle == nil || v.ctr.Lifecycle.PreStop.Sleep.Seconds != 5 {
				t.Errorf("pod spec %+v", v.ds)
			}
			cm := v.configMaps["kube-system/node-local-dns"]
			if ds.Annotations["owner"] != "dns" || ds.Labels["owner"] != "dns" || cm.Annotations["owner"] != "dns" || cm.Labels["owner"] != "dns" ||
				v.services["kube-system/node-local-dns"].Annotations["owner"] != "dns" {
				t.Errorf("object metadata: DaemonSet %v %v, ConfigMap %v %v", ds.Annotations, ds.Labels, cm.Annotations, cm.Labels)
			}
		}},
		{"serviceAccount", `serviceAccount: {create: false, name: dns-cache}`, func(t *testing.T, v *releaseView) {
			if v.ds.ServiceAccountName != "dns-cache" || len(v.serviceAccounts) != 0 {
				t.Errorf("serviceAccountName %q, %d ServiceAccounts: want dns-cache and none created", v.ds.ServiceAccountName, len(v.serviceAccounts))
			}
		}},
		{"fullnameOverride", `fullnameOverride: dns-cache`, func(t *testing.T, v *releaseView) {
			ds, ok := v.daemonSets["kube-system/dns-cache"]
			_, cm := v.configMaps["kube-system/dns-cache"]
			if !ok || !cm || ds.Spec.Template.Spec.Volumes[1].ConfigMap.Name != "dns-cache" {
				t.Errorf("DaemonSet %v ConfigMap %v: want both named dns-cache, the config volume following", ok, cm)
			}
		}},
		{"nameOverride", `nameOverride: dns-cache`, func(t *testing.T, v *releaseView) {
			ds, ok := v.daemonSets["kube-system/node-local-dns-dns-cache"]
			if !ok || ds.Spec.Selector.MatchLabels["k8s-app"] != "dns-cache" || v.services["kube-system/node-local-dns-dns-cache"].Spec.Selector["k8s-app"] != "dns-cache" {
				t.Errorf("DaemonSets %v: want node-local-dns-dns-cache selecting k8s-app=dns-cache, with the metrics Service", mapKeys(v.daemonSets))
			}
		}},
		{"prometheusScraping off", `prometheusScraping: {enabled: false}`, func(t *testing.T, v *releaseView) {
			for _, a := range []map[string]string{v.daemonSets["kube-system/node-local-dns"].Spec.Template.Annotations,
				v.services["kube-system/node-local-dns"].Annotations, v.services["kube-system/node-local-dns-agent"].Annotations} {
				if _, ok := a["prometheus.io/scrape"]; ok {
					t.Errorf("annotations %v: want no scrape annotations", a)
				}
			}
		}},
		{"serviceMonitor", `serviceMonitor: {enabled: true, labels: {release: prom}, interval: 15s, namePrefix: x-, prometheusNamespace: monitoring, honorLabels: true}`,
			func(t *testing.T, v *releaseView) {
				sm := v.other["ServiceMonitor monitoring/x-node-local-dns"]
				if sm == nil {
					t.Fatalf("no ServiceMonitor monitoring/x-node-local-dns: %v", mapKeys(v.other))
				}
				var ports []string
				for _, e := range sm["spec"].(map[string]any)["endpoints"].([]any) {
					e := e.(map[string]any)
					ports = append(ports, e["port"].(string))
					if e["interval"] != "15s" || e["honorLabels"] != true {
						t.Errorf("endpoint %v: want interval 15s and honorLabels", e)
					}
				}
				// Both metrics Services' port names.
				want := []string{v.services["kube-system/node-local-dns"].Spec.Ports[0].Name, v.services["kube-system/node-local-dns-agent"].Spec.Ports[0].Name}
				if !slices.Equal(ports, want) {
					t.Errorf("ServiceMonitor ports %q, want both metrics Services' %q", ports, want)
				}
				if sm["metadata"].(map[string]any)["labels"].(map[string]any)["release"] != "prom" {
					t.Errorf("ServiceMonitor labels %v", sm["metadata"])
				}
			}},
		{"dashboard", `dashboard: {enabled: true, namespace: grafana, annotations: {grafana_folder: DNS}}`, func(t *testing.T, v *releaseView) {
			cm := v.configMaps["grafana/node-local-dns-dashboard"]
			if cm == nil || cm.Labels["grafana_dashboard"] != "1" || cm.Annotations["grafana_folder"] != "DNS" {
				t.Fatalf("dashboard ConfigMap %+v", cm)
			}
			var d map[string]any
			if err := json.Unmarshal([]byte(cm.Data["dashboard.json"]), &d); err != nil || d["uid"] != "nodelocaldns" {
				t.Errorf("dashboard.json: %v (uid %v)", err, d["uid"])
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, view(t, []string{valuesFile(t, tc.values)}))
		})
	}
}

func mapKeys[V any](m map[string]V) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	slices.Sort(k)
	return k
}
