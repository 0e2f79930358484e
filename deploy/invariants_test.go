package deploy

import (
	"io"
	"net"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/coredns/caddy/caddyfile"
	coredns "github.com/coredns/coredns/core/dnsserver"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodelocaldns/nodelocaldns/internal/image"
	"github.com/nodelocaldns/nodelocaldns/internal/memcheck"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// The invariants every rendered variant must hold, one function per concern; TestVariants runs them.

// checkObjects: the standard nodelocaldns.yaml's objects, no more, no fewer, plus the agent's metrics Service.
func checkObjects(t *testing.T, m *manifest) {
	t.Helper()
	var got []string
	for k := range m.serviceAccounts {
		got = append(got, "ServiceAccount "+k)
	}
	for k := range m.services {
		got = append(got, "Service "+k)
	}
	for k := range m.configMaps {
		got = append(got, "ConfigMap "+k)
	}
	for k := range m.daemonSets {
		got = append(got, "DaemonSet "+k)
	}
	sort.Strings(got)
	want := []string{"ConfigMap kube-system/node-local-dns", "DaemonSet kube-system/node-local-dns",
		"Service kube-system/kube-dns-upstream", "Service kube-system/node-local-dns", "Service kube-system/node-local-dns-agent",
		"ServiceAccount kube-system/node-local-dns"}
	if !slices.Equal(got, want) {
		t.Fatalf("objects = %q, want %q", got, want)
	}
	up := m.services["kube-system/kube-dns-upstream"]
	if up.Spec.Selector["k8s-app"] != "kube-dns" || len(up.Spec.Ports) != 2 {
		t.Errorf("kube-dns-upstream selects %v with %d ports, want k8s-app=kube-dns and dns, dns-tcp", up.Spec.Selector, len(up.Spec.Ports))
	}
	if up.Spec.ClusterIP == corev1.ClusterIPNone {
		t.Errorf("kube-dns-upstream is headless: the agent needs its ClusterIP")
	}
}

// checkDaemonSet: least privilege, no hostPath, and a rollout that keeps DNS up.
func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	ps := &ds.Spec.Template.Spec
	if len(ps.Containers) != 1 || len(ps.InitContainers) != 0 {
		t.Fatalf("pod has %d containers and %d init containers, want one container", len(ps.Containers), len(ps.InitContainers))
	}
	if !ps.HostNetwork || ps.HostPID || ps.HostIPC || ps.DNSPolicy != corev1.DNSDefault {
		t.Errorf("hostNetwork %v hostPID %v hostIPC %v dnsPolicy %s, want host network only and dnsPolicy Default",
			ps.HostNetwork, ps.HostPID, ps.HostIPC, ps.DNSPolicy)
	}
	if ps.TerminationGracePeriodSeconds == nil || *ps.TerminationGracePeriodSeconds != 30 {
		t.Errorf("terminationGracePeriodSeconds = %v, want 30", ps.TerminationGracePeriodSeconds)
	}
	if ps.EnableServiceLinks != nil && !*ps.EnableServiceLinks {
		t.Errorf("enableServiceLinks is false: the agent reads KUBE_DNS_UPSTREAM_SERVICE_HOST")
	}
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil ||
		ru.MaxSurge == nil || ru.MaxSurge.String() != "1" || ru.MaxUnavailable == nil || ru.MaxUnavailable.String() != "0" {
		t.Errorf("updateStrategy = %+v, want RollingUpdate with maxSurge 1, maxUnavailable 0", ds.Spec.UpdateStrategy)
	}
	checkMemoryLimit(t, ps.Containers[0].Resources.Limits.Memory().Value())
	for _, v := range ps.Volumes {
		if v.HostPath != nil {
			t.Errorf("volume %q is a hostPath (%s): nothing on the host is needed", v.Name, v.HostPath.Path)
		}
	}
	if ds.Spec.Selector == nil || ds.Spec.Selector.MatchLabels["k8s-app"] != ds.Spec.Template.Labels["k8s-app"] {
		t.Errorf("selector %v does not select the pod labels %v", ds.Spec.Selector, ds.Spec.Template.Labels)
	}
	c := &ps.Containers[0]
	if len(c.Command) != 0 {
		t.Errorf("command = %q: the image's entrypoint must run", c.Command)
	}
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatalf("container has no securityContext.capabilities")
	}
	if got := caps(sc.Capabilities.Drop); !slices.Equal(got, []string{"ALL"}) {
		t.Errorf("capabilities.drop = %q, want [ALL]", got)
	}
	if got := caps(sc.Capabilities.Add); !slices.Equal(got, []string{"NET_ADMIN", "NET_BIND_SERVICE"}) {
		t.Errorf("capabilities.add = %q, want exactly NET_ADMIN and NET_BIND_SERVICE", got)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("container is privileged")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("allowPrivilegeEscalation = %v, want false", sc.AllowPrivilegeEscalation)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("readOnlyRootFilesystem = %v, want true", sc.ReadOnlyRootFilesystem)
	}
}

func caps(cs []corev1.Capability) []string {
	var s []string
	for _, c := range cs {
		s = append(s, string(c))
	}
	sort.Strings(s)
	return s
}

// checkFiles: every path the parsed flags read or write is backed by the right volume, and the Corefile the
// agent writes lands on a writable one (the root filesystem is read-only).
func checkFiles(t *testing.T, m *manifest, ps *corev1.PodSpec, opts *options.Options) {
	t.Helper()
	c := &ps.Containers[0]
	volumeAt := func(dir string) (*corev1.Volume, *corev1.VolumeMount) {
		for i := range c.VolumeMounts {
			vm := &c.VolumeMounts[i]
			if vm.MountPath != dir {
				continue
			}
			for j := range ps.Volumes {
				if ps.Volumes[j].Name == vm.Name {
					return &ps.Volumes[j], vm
				}
			}
			t.Fatalf("mount %s names volume %q, which does not exist", dir, vm.Name)
		}
		return nil, nil
	}
	if v, vm := volumeAt(filepath.Dir(opts.Corefile)); v == nil || v.EmptyDir == nil || vm.ReadOnly || vm.SubPath != "" {
		t.Errorf("-conf %s: its directory is not a writable emptyDir mount", opts.Corefile)
	}
	v, _ := volumeAt(filepath.Dir(opts.BaseCorefile))
	if v == nil || v.ConfigMap == nil || v.ConfigMap.Name != "node-local-dns" ||
		!slices.Equal(v.ConfigMap.Items, []corev1.KeyToPath{{Key: "Corefile", Path: filepath.Base(opts.BaseCorefile)}}) {
		t.Errorf("-basecorefile %s: not the node-local-dns ConfigMap's Corefile (volume %+v)", opts.BaseCorefile, v)
	}
	if _, ok := m.configMaps["kube-system/node-local-dns"].Data["Corefile"]; !ok {
		t.Errorf("ConfigMap node-local-dns has no Corefile key")
	}
	kubeDNSDir := opts.KubeDNSConfigDir
	if kubeDNSDir == "" {
		kubeDNSDir = "/etc/kube-dns" // the agent's default when the directory exists, as node-cache's
	}
	if v, _ := volumeAt(kubeDNSDir); v == nil || v.ConfigMap == nil || v.ConfigMap.Name != "kube-dns" ||
		v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional {
		t.Errorf("kube-dns ConfigMap directory %s: not the optional kube-dns ConfigMap (volume %+v)", kubeDNSDir, v)
	}
	if _, ok := m.services["kube-system/"+opts.UpstreamSvc]; !ok {
		t.Errorf("-upstreamsvc %s: no such Service in the manifest", opts.UpstreamSvc)
	}
}

// corefile is what the invariants need from the rendered ConfigMap's Corefile.
type corefile struct {
	blocks         []caddyfile.ServerBlock
	healthHost     string
	healthPort     int
	prometheusPort int
}

// corefileOf parses the ConfigMap's Corefile with CoreDNS's own parser.
func corefileOf(t *testing.T, m *manifest) *corefile {
	t.Helper()
	text := m.configMaps["kube-system/node-local-dns"].Data["Corefile"]
	blocks, err := caddyfile.Parse("Corefile", strings.NewReader(text), nil)
	if err != nil {
		t.Fatalf("parse Corefile: %v\n%s", err, text)
	}
	cf := &corefile{blocks: blocks}
	var healths []string
	for _, b := range blocks {
		if h := b.Tokens["health"]; len(h) > 0 {
			if len(h) != 2 {
				t.Fatalf("health in %v: %d tokens, want health ADDRESS", b.Keys, len(h))
			}
			healths = append(healths, h[1].Text)
		}
	}
	if len(healths) != 1 {
		t.Fatalf("Corefile has %d health directives (%q), want one", len(healths), healths)
	}
	host, port, err := net.SplitHostPort(healths[0])
	if err != nil {
		t.Fatalf("health address %q: %v", healths[0], err)
	}
	cf.healthHost = host
	if cf.healthPort, err = strconv.Atoi(port); err != nil {
		t.Fatalf("health address %q: %v", healths[0], err)
	}
	return cf
}

// checkCorefile: every block serves the DNS port on exactly the -localip addresses, and health is on the host
// and port the variant expects.
func checkCorefile(t *testing.T, cf *corefile, opts *options.Options, v variant) {
	t.Helper()
	if len(cf.blocks) != 4 {
		t.Errorf("Corefile has %d server blocks, want the standard 4", len(cf.blocks))
	}
	for _, b := range cf.blocks {
		for _, k := range b.Keys {
			if !strings.HasSuffix(k, ":"+strconv.Itoa(int(opts.DNSPort))) {
				t.Errorf("server block %q is not on the DNS port %d", k, opts.DNSPort)
			}
		}
		var bind []string
		for _, tok := range b.Tokens["bind"][1:] {
			bind = append(bind, tok.Text)
		}
		if !slices.Equal(bind, v.localIPs) {
			t.Errorf("block %v binds %q, want the -localip addresses %q", b.Keys, bind, v.localIPs)
		}
		prom := b.Tokens["prometheus"]
		if len(prom) != 2 {
			t.Errorf("block %v: prometheus has %d tokens, want prometheus ADDRESS", b.Keys, len(prom))
			continue
		}
		_, port, err := net.SplitHostPort(prom[1].Text)
		p, perr := strconv.Atoi(port)
		if err != nil || perr != nil || (cf.prometheusPort != 0 && p != cf.prometheusPort) {
			t.Errorf("block %v: prometheus address %q is not the port of the other blocks", b.Keys, prom[1].Text)
		}
		cf.prometheusPort = p
	}
	if cf.healthHost != v.healthHost || cf.healthPort != int(opts.HealthPort) {
		t.Errorf("health serves %s:%d, want %s:%d (-health-port)", cf.healthHost, cf.healthPort, v.healthHost, opts.HealthPort)
	}
}

// checkProbes: startup and liveness on /health and readiness on /ready, each an exec of the image's binary in
// -probe mode on the agent's -health-socket, which lies in an emptyDir of the pod's: a path only this pod's
// agent serves, where a probe over the network could land on another instance on the node (a surge) and is
// reachable by every pod.
func checkProbes(t *testing.T, ps *corev1.PodSpec, c *corev1.Container, opts *options.Options) {
	t.Helper()
	if opts.HealthSocket == "" {
		t.Fatalf("args %q: no -health-socket for the probes", c.Args)
	}
	if opts.HealthSocket != options.DefaultHealthSocket {
		t.Errorf("-health-socket %s: want %s, where `kubectl exec ... -- nodelocaldns -top` looks without a flag", opts.HealthSocket, options.DefaultHealthSocket)
	}
	inPodVolume := false
	for _, vm := range c.VolumeMounts {
		for _, vol := range ps.Volumes {
			if vol.Name == vm.Name && vol.EmptyDir != nil && !vm.ReadOnly && filepath.Dir(opts.HealthSocket) == vm.MountPath {
				inPodVolume = true
			}
		}
	}
	if !inPodVolume {
		t.Errorf("-health-socket %s is not in a writable emptyDir of the pod: another pod's agent could serve it", opts.HealthSocket)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"startupProbe", c.StartupProbe, "/health"}, {"livenessProbe", c.LivenessProbe, "/health"}, {"readinessProbe", c.ReadinessProbe, "/ready"}} {
		if p.probe == nil || p.probe.Exec == nil {
			t.Errorf("%s: missing or not exec", p.name)
			continue
		}
		if p.name == "livenessProbe" {
			checkLivenessGap(t, p.probe)
		}
		cmd := p.probe.Exec.Command
		if len(cmd) == 0 || cmd[0] != image.Entrypoint {
			t.Errorf("%s: command %q, want the image's %s", p.name, cmd, image.Entrypoint)
			continue
		}
		po, err := options.Parse(cmd[1:], io.Discard)
		if err != nil || po.Mode != options.ModeProbe || po.Probe != p.path || po.HealthSocket != opts.HealthSocket {
			t.Errorf("%s: command %q (%v), want -probe %s on the agent's -health-socket %s", p.name, cmd, err, p.path, opts.HealthSocket)
		}
	}
}

// maxStoppedGap bounds how long a stopped agent blackholes DNS: from the stop to the SIGKILL that makes the
// kernel drop its table (docs/failure-model.md).
const maxStoppedGap = 15

// checkLivenessGap: the liveness probe's worst case from a stop to the kill (period x failures, the last
// probe's timeout, the probe's own grace) stays within maxStoppedGap seconds.
func checkLivenessGap(t *testing.T, p *corev1.Probe) {
	t.Helper()
	period, failures := int32(10), int32(3) // the kubelet's defaults when unset
	if p.PeriodSeconds > 0 {
		period = p.PeriodSeconds
	}
	if p.FailureThreshold > 0 {
		failures = p.FailureThreshold
	}
	grace := int32(30) // the pod's terminationGracePeriodSeconds when the probe sets none
	if p.TerminationGracePeriodSeconds != nil {
		grace = int32(*p.TerminationGracePeriodSeconds)
	}
	// From the start: a startup probe hands over to liveness once the agent answers, where a fixed initial
	// delay leaves a wedge in the agent's first seconds undetected for that long on top.
	if gap := p.InitialDelaySeconds + period*failures + p.TimeoutSeconds + grace; gap > maxStoppedGap {
		t.Errorf("livenessProbe: a stopped agent blackholes DNS for up to %d s (initial delay %d + period %d x %d failures + timeout %d + grace %d), want <= %d",
			gap, p.InitialDelaySeconds, period, failures, p.TimeoutSeconds, grace, maxStoppedGap)
	}
}

// checkPorts: no container port is declared (with hostNetwork they would be host ports, and the scheduler would
// refuse the surge pod of a rollout beside the running one), and the scrape annotations and the metrics Services
// agree with the Corefile and the agent's -metrics-listen-address.
func checkPorts(t *testing.T, m *manifest, c *corev1.Container, opts *options.Options, cf *corefile) {
	t.Helper()
	if len(c.Ports) != 0 {
		t.Errorf("container ports = %+v, want none: with hostNetwork they are host ports and block the surge pod", c.Ports)
	}
	ds := m.daemonSets["kube-system/node-local-dns"]
	svc := m.services["kube-system/node-local-dns"]
	prom := strconv.Itoa(cf.prometheusPort)
	if ds.Spec.Template.Annotations["prometheus.io/port"] != prom || svc.Annotations["prometheus.io/port"] != prom {
		t.Errorf("prometheus.io/port annotations: pod %q, service %q, want %s", ds.Spec.Template.Annotations["prometheus.io/port"],
			svc.Annotations["prometheus.io/port"], prom)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != int32(cf.prometheusPort) ||
		svc.Spec.Ports[0].TargetPort.IntValue() != cf.prometheusPort {
		t.Errorf("metrics Service: clusterIP %q ports %+v, want headless on %d", svc.Spec.ClusterIP, svc.Spec.Ports, cf.prometheusPort)
	}
	if svc.Spec.Selector["k8s-app"] != ds.Spec.Template.Labels["k8s-app"] {
		t.Errorf("metrics Service selects %v, pods are labelled %v", svc.Spec.Selector, ds.Spec.Template.Labels)
	}
	// The agent's own /metrics (-metrics-listen-address) has a headless Service and annotations of its own.
	_, agentPort, err := net.SplitHostPort(opts.MetricsListenAddress)
	if err != nil {
		t.Fatalf("-metrics-listen-address %q: %v", opts.MetricsListenAddress, err)
	}
	agent := m.services["kube-system/node-local-dns-agent"]
	if agent == nil || agent.Spec.ClusterIP != corev1.ClusterIPNone || len(agent.Spec.Ports) != 1 ||
		strconv.Itoa(int(agent.Spec.Ports[0].Port)) != agentPort || agent.Spec.Ports[0].TargetPort.String() != agentPort ||
		agent.Annotations["prometheus.io/port"] != agentPort || agent.Annotations["prometheus.io/scrape"] != "true" ||
		agent.Spec.Selector["k8s-app"] != ds.Spec.Template.Labels["k8s-app"] {
		t.Errorf("agent metrics Service = %+v, want headless on the -metrics-listen-address port %s, annotated for scraping, selecting the pods", agent, agentPort)
	}
}

// checkMemoryLimit: the container has a memory limit, and it holds the standard Corefile's worst case as the
// agent computes it at start (internal/memcheck), so the shipped manifest does not warn about itself.
func checkMemoryLimit(t *testing.T, limit int64) {
	t.Helper()
	caches, err := memcheck.Caches([]byte(StandardCorefile), coredns.Directives)
	if err != nil {
		t.Fatal(err)
	}
	e := memcheck.New(caches, limit)
	if limit == 0 || !e.Fits() {
		t.Errorf("memory limit %s; want one that holds the standard Corefile's worst case, %s (%d caches, %d entries)",
			memcheck.MiB(limit), memcheck.MiB(e.WorstCase), e.Caches, e.Entries)
	}
}
