package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The chart and how its tests render it: as `helm install node-local-dns deploy/chart -n kube-system` would, so
// objects carry the standard manifest's names and the invariants of invariants_test.go apply unchanged.
const (
	chartDir       = "chart"
	chartRelease   = "node-local-dns"
	chartNamespace = "kube-system"
)

var helmOnce struct {
	sync.Once
	path, skip string
}

// helmBinary is helm built from deploy/helmtool by deploy/build-helm.sh (`make test` builds it first; the script
// returns at once when it is cached). Without it the chart tests skip, except under CI=true, where they fail.
func helmBinary(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		if p := os.Getenv("NODELOCALDNS_HELM"); p != "" {
			helmOnce.path = p
			return
		}
		cmd := exec.Command("./build-helm.sh")
		if testing.Short() {
			cmd.Env = append(os.Environ(), "HELM_NO_BUILD=1")
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			helmOnce.skip = fmt.Sprintf("helm is not available (deploy/build-helm.sh: %v: %s); `make helm` builds it from its Go module",
				err, strings.TrimSpace(stderr.String()))
			return
		}
		helmOnce.path = strings.TrimSpace(string(out))
	})
	if helmOnce.skip != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(helmOnce.skip)
		}
		t.Skip(helmOnce.skip)
	}
	return helmOnce.path
}

// helm runs helm with args from the deploy directory and returns its stdout; on failure the error carries stderr.
func helm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helmBinary(t), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// helm's own state (repositories, cache) stays out of the machine's home.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	// helm warns on every use of a chart that holds a symbolic link: the chart's own files are real ones.
	if strings.Contains(stderr.String(), "symbolic link") {
		t.Errorf("helm %s warns: %s", strings.Join(args, " "), stderr.String())
	}
	return stdout.Bytes(), nil
}

// valuesFile writes a values file for one test and returns its path.
func valuesFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// helmTemplate renders the chart with the values files and --set pairs given, hooks and tests included.
func helmTemplate(t *testing.T, values []string, sets ...string) ([]byte, error) {
	t.Helper()
	args := []string{"template", chartRelease, chartDir, "--namespace", chartNamespace}
	for _, v := range values {
		args = append(args, "--values", v)
	}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return helm(t, args...)
}

// chartRender is one `helm template` output, decoded strictly.
type chartRender struct {
	*manifest // the release's objects of the standard manifest's kinds
	// hooks: the pre-delete hook's and helm test's objects, by "Kind namespace/name".
	hookJobs       map[string]*batchv1.Job
	hookDaemonSets map[string]*appsv1.DaemonSet
	hookPods       map[string]*corev1.Pod
	hookOther      map[string]map[string]any // the hook's ServiceAccount, Role, RoleBinding
	// other: the kinds of other APIs (ServiceMonitor, PodMonitor, PrometheusRule, CiliumLocalRedirectPolicy),
	// generic, by "Kind namespace/name".
	other map[string]map[string]any
	raw   []byte
}

// decodeChart decodes a render: objects of the standard kinds and the hooks into their API types (unknown
// fields fail), the other APIs' objects as generic maps.
func decodeChart(b []byte) (*chartRender, error) {
	r := &chartRender{hookJobs: map[string]*batchv1.Job{}, hookDaemonSets: map[string]*appsv1.DaemonSet{}, hookPods: map[string]*corev1.Pod{},
		hookOther: map[string]map[string]any{}, other: map[string]map[string]any{}, raw: b}
	var main bytes.Buffer
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("split documents: %w", err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("decode: %w\n%s", err, doc)
		}
		kind, _ := obj["kind"].(string)
		meta, _ := obj["metadata"].(map[string]any)
		ns, _ := meta["namespace"].(string)
		name, _ := meta["name"].(string)
		key := kind + " " + ns + "/" + name
		ann, _ := meta["annotations"].(map[string]any)
		if _, hook := ann["helm.sh/hook"]; hook {
			if err := r.addHook(kind, key, doc, obj); err != nil {
				return nil, err
			}
			continue
		}
		switch obj["apiVersion"].(string) + "/" + kind {
		case "v1/ServiceAccount", "v1/Service", "v1/ConfigMap", "apps/v1/DaemonSet":
			main.WriteString("\n---\n")
			main.Write(doc)
		default:
			if _, dup := r.other[key]; dup {
				return nil, fmt.Errorf("%s defined twice", key)
			}
			r.other[key] = obj
		}
	}
	m, err := decodeStrict(main.Bytes())
	if err != nil {
		return nil, err
	}
	r.manifest = m
	return r, nil
}

func (r *chartRender) addHook(kind, key string, doc []byte, obj map[string]any) error {
	var err error
	switch kind {
	case "Job":
		_, err = decodeInto(doc, r.hookJobs, func(o *batchv1.Job) string { return "Job " + o.Namespace + "/" + o.Name })
	case "DaemonSet":
		_, err = decodeInto(doc, r.hookDaemonSets, func(o *appsv1.DaemonSet) string { return "DaemonSet " + o.Namespace + "/" + o.Name })
	case "Pod":
		_, err = decodeInto(doc, r.hookPods, func(o *corev1.Pod) string { return "Pod " + o.Namespace + "/" + o.Name })
	case "ServiceAccount":
		err = yaml.UnmarshalStrict(doc, &corev1.ServiceAccount{})
		r.hookOther[key] = obj
	case "Role":
		err = yaml.UnmarshalStrict(doc, &rbacv1.Role{})
		r.hookOther[key] = obj
	case "RoleBinding":
		err = yaml.UnmarshalStrict(doc, &rbacv1.RoleBinding{})
		r.hookOther[key] = obj
	default:
		err = fmt.Errorf("unexpected hook kind")
	}
	if err != nil {
		return fmt.Errorf("hook %s: %w", key, err)
	}
	return nil
}

// renderChart renders and decodes, failing the test on any error.
func renderChart(t *testing.T, values []string, sets ...string) *chartRender {
	t.Helper()
	b, err := helmTemplate(t, values, sets...)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeChart(b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return r
}

// equalJSON compares two values by their JSON form (nil and empty alike).
func equalJSON(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	norm := func(s []byte) string {
		if string(s) == "null" || string(s) == "{}" {
			return ""
		}
		return string(s)
	}
	return norm(ja) == norm(jb)
}
