package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// helm for the cluster: the chart (deploy/chart) installed, upgraded and uninstalled as an operator does, with
// helm built from its Go module (deploy/build-helm.sh, cached under .cache/helm) and run in node-1's namespaces
// against the cluster's admin kubeconfig. The cases are in helmcases.go.

const (
	helmRelease   = "node-local-dns"
	helmNamespace = "kube-system"
	// The second build of ours the upgrade moves to: make image with another version and tag.
	ourImageRepo = "ghcr.io/nodelocaldns/nodelocaldns"
	upgradeTag   = "helm-upgrade"
	// kubectl for the chart's pre-delete hook Jobs and the scrape pods: the cluster's own binary in an image.
	kubectlImage = "localhost/cluster/kubectl:1"
)

// helmClusterValues points the chart at this cluster's addresses and at the images built here (the hooks'
// kubectl and pause, the helm test's client).
var helmClusterValues = fmt.Sprintf(`
config: {localDns: %[1]s, dnsServer: %[2]s}
hooks:
  preDelete:
    kubectlImage: {repository: localhost/cluster/kubectl, tag: "1", command: [/kubectl]}
    pauseImage: {repository: localhost/cluster/pause, tag: "1"}
tests:
  image: {repository: localhost/cluster/client, tag: "1"}
  # dnsq lookup fails unless the name resolves (dnsq q succeeds on any answer); it asks the pod's nameserver, the
  # kube-dns ClusterIP, which the cache serves.
  command: [/dnsq, lookup, kubernetes.default.svc.%[3]s.]
`, localDNSIP, kubeDNSIP, clusterDomain)

type helmRun struct {
	c   *cluster
	bin string
	dir string // values files and helm's own state
}

// newHelm finds (or builds) helm and puts the images the chart's hooks need on both nodes.
func newHelm(ctx context.Context, c *cluster) (*helmRun, error) {
	h, err := newHelmTool(ctx, c)
	if err != nil {
		return nil, err
	}
	// The same images for every mode: built once, beside the modes' state directories.
	if err := importHelmImages(ctx, c, filepath.Join(filepath.Dir(c.state), "helm-images")); err != nil {
		return nil, err
	}
	return h, nil
}

// newHelmTool finds (or builds) helm, without the hooks' images (enough to install and upgrade).
func newHelmTool(ctx context.Context, c *cluster) (*helmRun, error) {
	shared.Lock()
	out, err := exec.CommandContext(ctx, filepath.Join(c.cfg.repo, "deploy/build-helm.sh")).Output()
	shared.Unlock()
	if err != nil {
		return nil, fmt.Errorf("deploy/build-helm.sh: %w", err)
	}
	h := &helmRun{c: c, bin: strings.TrimSpace(string(out)), dir: filepath.Join(c.state, "helm")}
	return h, os.MkdirAll(h.dir, 0o755)
}

// run runs helm in node-1's namespaces with the cluster's kubeconfig and state of its own.
func (h *helmRun) run(ctx context.Context, args ...string) (string, error) {
	env := []string{"HELM_CACHE_HOME=" + h.dir + "/cache", "HELM_CONFIG_HOME=" + h.dir + "/config", "HELM_DATA_HOME=" + h.dir + "/data",
		"KUBECONFIG=" + filepath.Join(h.c.state, "pki/admin.kubeconfig")}
	return h.c.local.sh(ctx, "env", append(append(env, h.bin), args...)...)
}

func (h *helmRun) chart() string { return filepath.Join(h.c.cfg.repo, "deploy/chart") }

// values writes each values text to a file (an "@path" is used as it is) and returns the --values flags.
func (h *helmRun) values(texts ...string) ([]string, error) {
	var args []string
	for i, t := range texts {
		if p, ok := strings.CutPrefix(t, "@"); ok {
			args = append(args, "--values", p)
			continue
		}
		p := filepath.Join(h.dir, fmt.Sprintf("values-%d-%d.yaml", time.Now().UnixNano(), i))
		if err := os.WriteFile(p, []byte(t), 0o644); err != nil {
			return nil, err
		}
		args = append(args, "--values", p)
	}
	return args, nil
}

// install is helm install --wait: the DaemonSet ready on both nodes.
func (h *helmRun) install(ctx context.Context, values ...string) error {
	v, err := h.values(values...)
	if err != nil {
		return err
	}
	if _, err := h.run(ctx, append([]string{"install", helmRelease, h.chart(), "-n", helmNamespace, "--wait", "--timeout", "3m"}, v...)...); err != nil {
		logs, _ := h.c.kubectl(ctx, "-n", helmNamespace, "logs", "ds/node-local-dns", "--tail=30")
		return fmt.Errorf("%w\nagent log:\n%s", err, logs)
	}
	return nil
}

// uninstall runs helm uninstall, pre-delete hook included, and checks both nodes: no pod, table (the fallback's
// included: the hook's -teardown removes it) or interface of ours, kube-proxy's tables as before, and no object
// of the release, hook objects included, left behind.
func (h *helmRun) uninstall(ctx context.Context, before string) error {
	if _, err := h.run(ctx, "uninstall", helmRelease, "-n", helmNamespace, "--wait", "--timeout", "4m"); err != nil {
		objs, _ := h.c.kubectl(ctx, "-n", helmNamespace, "get", "jobs,ds,pods", "-l", "app.kubernetes.io/instance="+helmRelease, "-o", "wide")
		return fmt.Errorf("%w\nhook objects:\n%s", err, objs)
	}
	return releaseGone(ctx, h.c, before)
}

// releaseGone: after helm uninstall, nothing of ours on either node (the fallback's table included: the hook's
// -teardown removes it), kube-proxy's tables as before, and no object of the release, hook objects included.
func releaseGone(ctx context.Context, c *cluster, before string) error {
	if err := checkNothingLeft(ctx, c, before); err != nil {
		return err
	}
	var problems []string
	for _, n := range c.nodes() {
		if t, err := ourTables(ctx, n); err != nil || len(t) > 0 {
			problems = append(problems, fmt.Sprintf("%s: tables left: %v %v", n.name, t, err))
		}
	}
	// Helm deletes the hook DaemonSet without waiting for its pods (pause, grace period 1 s): they go shortly after.
	var left string
	if err := poll(ctx, 60*time.Second, time.Second, func() (bool, error) {
		out, err := c.kubectl(ctx, "-n", helmNamespace, "get", "jobs,ds,pods,sa,roles,rolebindings,cm,svc",
			"-l", "app.kubernetes.io/instance="+helmRelease, "-o", "name")
		left = strings.TrimSpace(out)
		return err == nil && left == "", err
	}); err != nil {
		problems = append(problems, fmt.Sprintf("objects of the release left: %v\n%s", err, left))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// nodesClean: nothing of ours on either node, the premise of the uninstall check; what an earlier case left is
// removed with -teardown and named.
func nodesClean(ctx context.Context, c *cluster) (string, error) {
	var found []string
	for _, n := range c.nodes() {
		t, err := ourTables(ctx, n)
		if err != nil {
			return "", err
		}
		l, err := ourLinks(ctx, n)
		if err != nil {
			return "", err
		}
		if len(t)+len(l) == 0 {
			continue
		}
		found = append(found, fmt.Sprintf("%s: %v %v", n.name, t, l))
		if out, err := n.sh(ctx, c.cfg.agent, "-teardown", "-localip", localDNSIP+","+kubeDNSIP); err != nil {
			return "", fmt.Errorf("%s: -teardown: %v\n%s", n.name, err, out)
		}
	}
	if len(found) > 0 {
		return "removed what earlier cases left: " + strings.Join(found, "; "), nil
	}
	return "", nil
}

// importHelmImages builds (once) and imports on both nodes what the chart's hooks and the upgrade run that the
// cluster does not have: kubectl (the cluster's own binary) and the second build of ours.
func importHelmImages(ctx context.Context, c *cluster, dir string) error {
	if err := buildHelmImages(ctx, c, dir); err != nil {
		return err
	}
	for _, n := range c.nodes() {
		for _, t := range helmImageTars(dir) {
			if _, err := n.ctr(ctx, "images", "import", t); err != nil {
				return err
			}
		}
	}
	return nil
}

func helmImageTars(dir string) []string {
	return []string{filepath.Join(dir, "kubectl.tar"), filepath.Join(dir, "nodelocaldns-"+upgradeTag+".tar")}
}

// buildHelmImages builds the images into dir, once for every unit (lanes.go).
func buildHelmImages(ctx context.Context, c *cluster, dir string) error {
	shared.Lock()
	defer shared.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tars := helmImageTars(dir)
	kubectlTar, ourTar := tars[0], tars[1]
	if _, err := os.Stat(kubectlTar); err != nil {
		ociimage := filepath.Join(filepath.Dir(c.cfg.dnsq), "ociimage")
		if out, err := exec.CommandContext(ctx, ociimage, "-binary", filepath.Join(c.cfg.k8sBin, "kubectl"), "-ref", kubectlImage,
			"-o", kubectlTar, "--", "/kubectl").CombinedOutput(); err != nil {
			return fmt.Errorf("kubectl image: %v\n%s", err, out)
		}
	}
	if _, err := os.Stat(ourTar); err != nil {
		mk := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", c.cfg.repo, "image", "IMAGE_OUT="+dir, "IMAGE_TAR="+ourTar,
			"IMAGE_REF="+ourImageRepo+":"+upgradeTag, "IMAGE_VERSION="+upgradeTag)
		if out, err := mk.CombinedOutput(); err != nil {
			return fmt.Errorf("make image %s: %v\n%s", upgradeTag, err, out)
		}
	}
	return nil
}

// agentImages lists the images the cache pods run, once each.
func agentImages(ctx context.Context, c *cluster) ([]string, error) {
	out, err := c.kubectl(ctx, "-n", helmNamespace, "get", "pods", "-l", "k8s-app=node-local-dns", "-o", "jsonpath={.items[*].spec.containers[0].image}")
	if err != nil {
		return nil, err
	}
	imgs := strings.Fields(out)
	slices.Sort(imgs)
	return slices.Compact(imgs), nil
}
