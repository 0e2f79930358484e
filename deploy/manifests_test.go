package deploy

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// Conventions: the IP plan the deploy-time sed fills in. 169.254.20.10 is the conventional link-local listen IP,
// 10.96.0.10 kubeadm's default kube-dns ClusterIP; the IPv6 ones are a ULA (fd00::/8, as the Kubernetes docs
// recommend for the listen IP) and an address in a typical IPv6 service CIDR.
const (
	localDNS  = "169.254.20.10"
	kubeDNS   = "10.96.0.10"
	localDNS6 = "fd00::a"
	kubeDNS6  = "fd00:10:96::a"
	domain    = "cluster.local"
)

// The substitutions the instructions in each overlay's kustomization.yaml (and docs/migration.md) give.
var (
	// The standard manifest's documented sed for kube-proxy in iptables mode.
	sedIptables = [][2]string{{"__PILLAR__LOCAL__DNS__", localDNS}, {"__PILLAR__DNS__DOMAIN__", domain}, {"__PILLAR__DNS__SERVER__", kubeDNS}}
	// The documented sed for IPVS mode: drop the ClusterIP from -localip, fill the cluster DNS at deploy time.
	sedIPVS = [][2]string{{"__PILLAR__LOCAL__DNS__", localDNS}, {"__PILLAR__DNS__DOMAIN__", domain}, {",__PILLAR__DNS__SERVER__", ""}, {"__PILLAR__CLUSTER__DNS__", kubeDNS}}
	sedIPv6 = [][2]string{{"__PILLAR__LOCAL__DNS__", localDNS6}, {"__PILLAR__DNS__DOMAIN__", domain}, {"__PILLAR__DNS__SERVER__", kubeDNS6}}
	sedDual = [][2]string{{"__PILLAR__LOCAL__DNS__", localDNS}, {"__PILLAR__LOCAL__DNS6__", localDNS6}, {"__PILLAR__DNS__DOMAIN__", domain},
		{"__PILLAR__DNS__SERVER__", kubeDNS}, {"__PILLAR__DNS6__SERVER__", kubeDNS6}}
)

// variant is a deployable kustomization and what it must come to after its sed.
type variant struct {
	dir        string
	sed        [][2]string
	localIPs   []string // -localip, in order; also every Corefile bind
	healthHost string   // the Corefile's health address and the probes' host
	runtime    []string // placeholders left for the agent to fill at run time
}

var variants = []variant{
	{"base", sedIptables, []string{localDNS, kubeDNS}, localDNS, []string{"__PILLAR__CLUSTER__DNS__", "__PILLAR__UPSTREAM__SERVERS__"}},
	{"overlays/iptables-or-nftables", sedIptables, []string{localDNS, kubeDNS}, localDNS, []string{"__PILLAR__CLUSTER__DNS__", "__PILLAR__UPSTREAM__SERVERS__"}},
	{"overlays/ipvs", sedIPVS, []string{localDNS}, localDNS, []string{"__PILLAR__UPSTREAM__SERVERS__"}},
	{"overlays/ipv6", sedIPv6, []string{localDNS6, kubeDNS6}, localDNS6, []string{"__PILLAR__CLUSTER__DNS__", "__PILLAR__UPSTREAM__SERVERS__"}},
	{"overlays/dual-stack", sedDual, []string{localDNS, localDNS6, kubeDNS, kubeDNS6}, localDNS, []string{"__PILLAR__CLUSTER__DNS__", "__PILLAR__UPSTREAM__SERVERS__"}},
}

// TestEveryOverlayHasAVariant keeps a new overlay from escaping the invariants below.
func TestEveryOverlayHasAVariant(t *testing.T) {
	dirs, err := os.ReadDir("overlays")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !slices.ContainsFunc(variants, func(v variant) bool { return v.dir == "overlays/"+d.Name() }) {
			t.Errorf("overlays/%s has no entry in variants", d.Name())
		}
	}
}

// TestSourcesDecodeStrictly decodes every file as written, patches included, so a misspelt field in a patch
// fails even where kustomize would carry it through.
func TestSourcesDecodeStrictly(t *testing.T) {
	for _, f := range yamlFiles(t, ".") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(f) == "kustomization.yaml" {
			if _, err := decodeKustomization(b); err != nil {
				t.Errorf("%s: %v", f, err)
			}
			continue
		}
		if _, err := decodeStrict(b); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestVariants(t *testing.T) {
	for _, v := range variants {
		t.Run(v.dir, func(t *testing.T) {
			out := sed(render(t, v.dir), v.sed)
			if got := placeholders(out); !slices.Equal(got, v.runtime) {
				t.Errorf("placeholders left after the sed = %q, want only the agent's run-time ones %q", got, v.runtime)
			}
			m, err := decodeStrict(out)
			if err != nil {
				t.Fatalf("rendered manifest: %v", err)
			}
			checkObjects(t, m)
			ds := m.daemonSets["kube-system/node-local-dns"]
			checkDaemonSet(t, ds)
			c := &ds.Spec.Template.Spec.Containers[0]
			opts, err := options.Parse(c.Args, io.Discard)
			if err != nil {
				t.Fatalf("options.Parse(%q): %v", c.Args, err)
			}
			if opts.Mode != options.ModeServe {
				t.Errorf("args %q: mode %v, want serve", c.Args, opts.Mode)
			}
			var ips []string
			for _, ip := range opts.LocalIPs {
				ips = append(ips, ip.String())
			}
			if !slices.Equal(ips, v.localIPs) {
				t.Errorf("-localip = %q, want %q", ips, v.localIPs)
			}
			checkFiles(t, m, &ds.Spec.Template.Spec, opts)
			cf := corefileOf(t, m)
			checkCorefile(t, cf, opts, v)
			checkProbes(t, &ds.Spec.Template.Spec, c, opts)
			checkPorts(t, m, c, opts, cf)
		})
	}
}

// placeholders lists the distinct __PILLAR__ names in b, sorted.
func placeholders(b []byte) []string {
	var names []string
	for _, n := range regexp.MustCompile(`__PILLAR__[A-Z0-9_]*__`).FindAll(b, -1) {
		if !slices.Contains(names, string(n)) {
			names = append(names, string(n))
		}
	}
	sort.Strings(names)
	return names
}

// TestBaseCorefileIsStandard: the base ConfigMap carries the standard template byte for byte, so a cluster's
// existing node-local-dns ConfigMap and ours are interchangeable.
func TestBaseCorefileIsStandard(t *testing.T) {
	want := []byte(StandardCorefile)
	b, err := os.ReadFile("base/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeStrict(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.configMaps["kube-system/node-local-dns"].Data["Corefile"]; !bytes.Equal([]byte(got), want) {
		t.Errorf("base Corefile differs from testdata/standard.Corefile:\n%s", got)
	}
}
