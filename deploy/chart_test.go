package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// The IP plan of manifests_test.go, as values: what the chart needs to render what the base's sed gives.
var chartIPPlan = []string{"config.localDns=" + localDNS, "config.dnsServer=" + kubeDNS}

// TestChartLint: helm lint, strict (warnings fail too), with the defaults and with every values file of
// testdata/chart.
func TestChartLint(t *testing.T) {
	if out, err := helm(t, "lint", "--strict", chartDir); err != nil {
		t.Errorf("%v\n%s", err, out)
	}
	for _, f := range chartValuesFiles(t) {
		if out, err := helm(t, "lint", "--strict", chartDir, "--values", f); err != nil {
			t.Errorf("%s: %v\n%s", f, err, out)
		}
	}
}

func chartValuesFiles(t *testing.T) []string {
	t.Helper()
	files := yamlFilesIn(t, "testdata/chart")
	if len(files) == 0 {
		t.Fatal("no values files in testdata/chart")
	}
	return files
}

// TestChartDefaultIsBase: one source feeds both. With the base's IP plan, every object of `kubectl kustomize
// deploy/base` (after the standard sed) is in the chart's default render, equal field for field once Helm's
// own labels are set aside, and the chart's default render adds no object of its own but the hooks.
func TestChartDefaultIsBase(t *testing.T) {
	base := genericObjects(t, sed(render(t, "base"), sedIptables))
	out, err := helmTemplate(t, nil, chartIPPlan...)
	if err != nil {
		t.Fatal(err)
	}
	chart := genericObjects(t, out)
	var hooks []string
	for k, o := range chart {
		ann, _ := o["metadata"].(map[string]any)["annotations"].(map[string]any)
		if _, ok := ann["helm.sh/hook"]; ok {
			hooks = append(hooks, k)
			delete(chart, k)
			continue
		}
		stripHelmLabels(o)
	}
	if len(hooks) == 0 {
		t.Errorf("the default render has no hooks; want the pre-delete hook and the helm test")
	}
	for k, want := range base {
		got, ok := chart[k]
		if !ok {
			t.Errorf("%s: in deploy/base, not in the chart's default render", k)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			g, _ := yaml.Marshal(got)
			w, _ := yaml.Marshal(want)
			t.Errorf("%s differs from deploy/base:\nchart:\n%s\nbase:\n%s", k, g, w)
		}
	}
	for k := range chart {
		if _, ok := base[k]; !ok {
			t.Errorf("%s: in the chart's default render, not in deploy/base", k)
		}
	}
}

// genericObjects decodes every document into a map, by "Kind namespace/name".
func genericObjects(t *testing.T, b []byte) map[string]map[string]any {
	t.Helper()
	objs := map[string]map[string]any{}
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var o map[string]any
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		meta := o["metadata"].(map[string]any)
		k := o["kind"].(string) + " " + meta["namespace"].(string) + "/" + meta["name"].(string)
		if _, dup := objs[k]; dup {
			t.Fatalf("%s defined twice", k)
		}
		objs[k] = o
	}
}

// stripHelmLabels removes the labels the chart adds to every object's metadata (helm.sh/chart and the
// app.kubernetes.io ones); the base's own labels stay.
func stripHelmLabels(o map[string]any) {
	meta := o["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	for k := range labels {
		if strings.HasPrefix(k, "helm.sh/") || strings.HasPrefix(k, "app.kubernetes.io/") {
			delete(labels, k)
		}
	}
	if len(labels) == 0 {
		delete(meta, "labels")
	}
}

// chartVariant is a chart render that must hold the same invariants as the kustomize variants.
type chartVariant struct {
	name    string
	sets    []string
	variant variant // localIPs, healthHost and runtime placeholders, as for the overlays
}

// The chart's counterparts of the overlays: each kube-proxy mode and IP family by values alone.
var chartVariants = []chartVariant{
	{"iptables-or-nftables", chartIPPlan, variant{localIPs: []string{localDNS, kubeDNS}, healthHost: localDNS,
		runtime: []string{"__PILLAR__CLUSTER__DNS__", "__PILLAR__UPSTREAM__SERVERS__"}}},
	{"ipvs", []string{"config.localDns=" + localDNS, "config.dnsServer="}, variant{localIPs: []string{localDNS}, healthHost: localDNS,
		runtime: []string{"__PILLAR__CLUSTER__DNS__", "__PILLAR__UPSTREAM__SERVERS__"}}},
	{"ipv6", []string{"config.localDns=" + localDNS6, "config.dnsServer=" + kubeDNS6}, variant{localIPs: []string{localDNS6, kubeDNS6},
		healthHost: localDNS6, runtime: []string{"__PILLAR__CLUSTER__DNS__", "__PILLAR__UPSTREAM__SERVERS__"}}},
	{"dual-stack", append(slices.Clone(chartIPPlan), "extraLocalIps={"+localDNS6+"}"), variant{localIPs: []string{localDNS, localDNS6, kubeDNS},
		healthHost: localDNS, runtime: []string{"__PILLAR__CLUSTER__DNS__", "__PILLAR__UPSTREAM__SERVERS__"}}},
}

// TestChartVariants: the invariants of every kustomize variant hold for the chart's renders of the same modes.
func TestChartVariants(t *testing.T) {
	for _, cv := range chartVariants {
		t.Run(cv.name, func(t *testing.T) {
			r := renderChart(t, nil, cv.sets...)
			checkRelease(t, r, cv.variant)
		})
	}
}

// checkRelease runs the kustomize variants' invariants on a chart render and returns the parsed args.
func checkRelease(t *testing.T, r *chartRender, v variant) *options.Options {
	t.Helper()
	if got := placeholders(releaseText(r)); !slices.Equal(got, v.runtime) {
		t.Errorf("placeholders left in the release = %q, want only the agent's run-time ones %q", got, v.runtime)
	}
	checkObjects(t, r.manifest)
	ds := r.daemonSets["kube-system/node-local-dns"]
	checkDaemonSet(t, ds)
	c := &ds.Spec.Template.Spec.Containers[0]
	opts, err := options.Parse(c.Args, io.Discard)
	if err != nil {
		t.Fatalf("options.Parse(%q): %v", c.Args, err)
	}
	if got := ipStrings(opts); !slices.Equal(got, v.localIPs) {
		t.Errorf("-localip = %q, want %q", got, v.localIPs)
	}
	checkFiles(t, r.manifest, &ds.Spec.Template.Spec, opts)
	cf := corefileOf(t, r.manifest)
	checkCorefile(t, cf, opts, v)
	checkProbes(t, &ds.Spec.Template.Spec, c, opts)
	checkPorts(t, r.manifest, c, opts, cf)
	checkTeardownHook(t, r, opts)
	return opts
}

// releaseText is the release's own objects as JSON (hooks and the helm test aside), for the placeholder check.
func releaseText(r *chartRender) []byte {
	var b []byte
	for _, m := range []any{r.serviceAccounts, r.services, r.configMaps, r.daemonSets} {
		j, _ := json.Marshal(m)
		b = append(b, j...)
	}
	return b
}

func ipStrings(o *options.Options) []string {
	var ips []string
	for _, ip := range o.LocalIPs {
		ips = append(ips, ip.String())
	}
	return ips
}

// yamlFilesIn lists the .yaml files directly in dir, sorted.
func yamlFilesIn(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

// TestChartSchemaMatchesValues: values.schema.json, which refuses unknown keys by name, knows exactly the keys
// values.yaml documents, at every level it closes; a key added to one and not the other fails here.
func TestChartSchemaMatchesValues(t *testing.T) {
	var values map[string]any
	var schema map[string]any
	for p, into := range map[string]any{chartDir + "/values.yaml": &values, chartDir + "/values.schema.json": &schema} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, into); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	var walk func(path string, v map[string]any, s map[string]any)
	walk = func(path string, v map[string]any, s map[string]any) {
		props, closed := s["properties"].(map[string]any)
		if !closed || s["additionalProperties"] != false {
			return
		}
		for k := range v {
			if _, ok := props[k]; !ok {
				t.Errorf("values.yaml %s%s is not in values.schema.json: the schema would refuse it", path, k)
			}
		}
		for k, ps := range props {
			vv, ok := v[k]
			if !ok {
				t.Errorf("values.schema.json %s%s is not documented in values.yaml", path, k)
				continue
			}
			if vm, ok := vv.(map[string]any); ok {
				walk(path+k+".", vm, ps.(map[string]any))
			}
		}
	}
	if schema["additionalProperties"] != false {
		t.Fatal("values.schema.json does not refuse unknown top-level keys")
	}
	walk("", values, schema)
}

// TestChartPackages: `helm package` follows the base/ link, so the packaged chart (what a repository serves)
// carries deploy/base's files and renders exactly what the directory does.
func TestChartPackages(t *testing.T) {
	dir := t.TempDir()
	if _, err := helm(t, "package", chartDir, "--destination", dir); err != nil {
		t.Fatal(err)
	}
	pkgs, err := filepath.Glob(filepath.Join(dir, "*.tgz"))
	if err != nil || len(pkgs) != 1 {
		t.Fatalf("helm package wrote %q (%v), want one .tgz", pkgs, err)
	}
	fromDir, err := helmTemplate(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	fromPkg, err := helm(t, "template", chartRelease, pkgs[0], "--namespace", chartNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fromDir, fromPkg) {
		t.Errorf("the packaged chart renders differently from deploy/chart:\n%s", fromPkg)
	}
}
