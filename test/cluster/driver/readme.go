package main

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// The README case: README.md's Install section followed word for word. The blocks the case runs are marked in
// README.md with a comment line right above their fence, `<!-- readme-test: NAME -->`, and read from it at run
// time, so the README and this case cannot drift: a block changed is the block run, a marker gone fails the case.
// The blocks run in one bash (set -euo pipefail) in node-1's namespaces, the admin's terminal, with cwd at the
// clone and kubectl, helm and make on its PATH; so variables set by one block (image, kubedns) serve the next, as
// in a user's terminal. The load block runs on each node, in a bash of its own, with CONTAINERD_ADDRESS naming
// that node's containerd (the README's `ctr -n k8s.io` gives the namespace).
//
// The cluster is offline: the public images the chart's defaults name (the hooks' kubectl and pause, helm test's
// busybox) are put on the nodes under those names first, built here from the same things (the cluster's own
// kubectl, our pause, Debian's static busybox), as a registry would hand them out.

const readmeMarker = "<!-- readme-test: "

// The blocks, in the order the case runs them; "load" runs on each node.
var readmeBlockNames = []string{"build", "load (on each node)", "kube-dns", "kustomize", "kustomize-uninstall", "helm", "helm-uninstall"}

// The image reference the build block names (the case checks the pods run it).
var readmeImageRE = regexp.MustCompile(`(?m)^image=(\S+)$`)

// readmeBlocks returns the marked blocks of a README by name: the text between the fence after each marker and
// its closing fence. A marker not followed by a fence, a name used twice or one of want missing is an error.
func readmeBlocks(text string, want []string) (map[string]string, error) {
	blocks := map[string]string{}
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		name, ok := strings.CutPrefix(lines[i], readmeMarker)
		if !ok {
			continue
		}
		name, ok = strings.CutSuffix(strings.TrimSpace(name), "-->")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("README.md line %d: a marker is %sNAME -->", i+1, readmeMarker)
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
			return nil, fmt.Errorf("README.md line %d: marker %q is not right above a fenced block", i+1, name)
		}
		if _, dup := blocks[name]; dup {
			return nil, fmt.Errorf("README.md line %d: block %q marked twice", i+1, name)
		}
		var body []string
		j := i + 2
		for ; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
			body = append(body, lines[j])
		}
		if j == len(lines) {
			return nil, fmt.Errorf("README.md line %d: block %q has no closing fence", i+1, name)
		}
		blocks[name] = strings.Join(body, "\n") + "\n"
		i = j
	}
	var missing []string
	for _, w := range want {
		if _, ok := blocks[w]; !ok {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("README.md marks no block %q", missing)
	}
	return blocks, nil
}

// readmeCases runs the README's install, check and uninstall, kustomize then Helm. before is kube-proxy's state
// without any cache.
func readmeCases(ctx context.Context, c *cluster, r *results, before string) {
	whole := time.Now()
	text, err := os.ReadFile(filepath.Join(c.cfg.repo, "README.md"))
	if err != nil {
		r.fail("readme: README.md", err)
		return
	}
	blocks, err := readmeBlocks(string(text), readmeBlockNames)
	if !r.check("readme: marked blocks in README.md", strings.Join(readmeBlockNames, ", "), err) {
		return
	}
	m := readmeImageRE.FindStringSubmatch(blocks["build"])
	if m == nil {
		r.fail("readme: the build block's image", errors.New("the build block sets no image=REF"))
		return
	}
	image := m[1]
	h, err := newHelmTool(ctx, c)
	if !r.check("readme: helm", "", err) {
		return
	}
	note, err := nodesClean(ctx, c)
	r.check("readme: nodes clean before install", note, err)
	r.check("readme: the chart's default public images stood in on both nodes", "", standInImages(ctx, c, h))

	sh, err := startReadmeShell(ctx, c, h)
	if !r.check("readme: a shell in node-1's namespaces", "", err) {
		return
	}
	defer sh.close()
	start := time.Now()
	if !r.check("readme: build (make image)", "", sh.run(blocks["build"], 20*time.Minute)) {
		return
	}
	r.figure("readme: build block (make image)", "%.1f s", time.Since(start).Seconds())
	for _, n := range c.nodes() {
		r.check("readme: load on "+n.name+" (ctr images import)", "", readmeLoad(ctx, c, n, blocks["load (on each node)"]))
	}
	if !r.check("readme: kube-dns ClusterIP", "", sh.run(blocks["kube-dns"], time.Minute)) {
		return
	}

	start = time.Now()
	err = sh.run(blocks["kustomize"], 5*time.Minute)
	if r.check("readme: kustomize install, DaemonSet rolled out", fmt.Sprintf("%.1f s", time.Since(start).Seconds()), err) {
		r.figure("readme: kustomize block to rolled out", "%.1f s", time.Since(start).Seconds())
		r.check("readme: kustomize: the pods run "+image, "", runsOnly(ctx, c, image))
		dnsCases(ctx, c, r, "readme kustomize: ")
	}
	err = sh.run(blocks["kustomize-uninstall"], 3*time.Minute)
	if err == nil {
		err = checkNothingLeft(ctx, c, before)
	}
	r.check("readme: kustomize uninstall leaves nothing of ours"+leftNote(c), "", err)

	start = time.Now()
	err = sh.run(blocks["helm"], 6*time.Minute)
	if r.check("readme: helm install --wait and helm test", fmt.Sprintf("%.1f s", time.Since(start).Seconds()), err) {
		r.figure("readme: helm block (install --wait, test)", "%.1f s", time.Since(start).Seconds())
		r.check("readme: helm: the pods run "+image, "", runsOnly(ctx, c, image))
		dnsCases(ctx, c, r, "readme helm: ")
	}
	start = time.Now()
	err = sh.run(blocks["helm-uninstall"], 6*time.Minute)
	if err == nil {
		err = releaseGone(ctx, c, before)
	}
	r.check("readme: helm uninstall leaves nothing of ours on either node", fmt.Sprintf("%.1f s", time.Since(start).Seconds()), err)
	r.figure("readme: whole case (README read to helm uninstalled)", "%.0f s", time.Since(whole).Seconds())
}

// runsOnly: every cache pod runs image.
func runsOnly(ctx context.Context, c *cluster, image string) error {
	imgs, err := agentImages(ctx, c)
	if err == nil && !slices.Equal(imgs, []string{image}) {
		err = fmt.Errorf("cache pods run %q, want only %s", imgs, image)
	}
	return err
}

// readmeShell is bash in node-1's namespaces, fed one block at a time: each block is written to a file and
// sourced with stdin from /dev/null (so no command in it can read the next block), then a sentinel is echoed.
type readmeShell struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	stderr *lockedBuffer
	exited chan struct{}
	err    error // the shell's exit, once exited is closed
	dir    string
	n      int
}

// readmeEnv is the admin's environment: kubectl, helm and ctr first on PATH, then go (make image builds with it),
// the cluster's kubeconfig, and helm's and kubectl's state of their own.
func readmeEnv(c *cluster, h *helmRun) ([]string, error) {
	bin := filepath.Join(c.state, "readme/bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	for name, target := range map[string]string{"kubectl": filepath.Join(c.cfg.k8sBin, "kubectl"), "helm": h.bin,
		"ctr": filepath.Join(c.cfg.debRoot, "usr/bin/ctr")} {
		_ = os.Remove(filepath.Join(bin, name))
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			return nil, err
		}
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("make image needs go: %w", err)
	}
	path := bin + ":" + filepath.Dir(gobin) + ":" + c.cfg.debRoot + "/usr/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	return append(os.Environ(), "PATH="+path, "KUBECONFIG="+filepath.Join(c.state, "pki/admin.kubeconfig"),
		"KUBECACHEDIR="+filepath.Join(c.state, "readme/kubectl-cache"),
		"HELM_CACHE_HOME="+h.dir+"/cache", "HELM_CONFIG_HOME="+h.dir+"/config", "HELM_DATA_HOME="+h.dir+"/data"), nil
}

func startReadmeShell(ctx context.Context, c *cluster, h *helmRun) (*readmeShell, error) {
	env, err := readmeEnv(c, h)
	if err != nil {
		return nil, err
	}
	s := &readmeShell{lines: make(chan string, 64), stderr: &lockedBuffer{}, exited: make(chan struct{}),
		dir: filepath.Join(c.state, "readme")}
	s.cmd = exec.CommandContext(ctx, "nsenter", c.local.nsenterArgs("bash", []string{"--noprofile", "--norc", "-euo", "pipefail", "-s"})...)
	s.cmd.Env = env
	s.cmd.Stderr = s.stderr
	if s.in, err = s.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	go func() {
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	if _, err := fmt.Fprintf(s.in, "cd %q\n", c.cfg.repo); err != nil {
		return nil, err
	}
	return s, nil
}

// run sources one block and waits, up to timeout, for its sentinel; the shell's exit (set -e) is the block's
// failure, reported with its standard error's tail.
func (s *readmeShell) run(block string, timeout time.Duration) error {
	s.n++
	file := filepath.Join(s.dir, fmt.Sprintf("block-%d.sh", s.n))
	if err := os.WriteFile(file, []byte(block), 0o644); err != nil {
		return err
	}
	sentinel := fmt.Sprintf("@@readme block %d done@@", s.n)
	if _, err := fmt.Fprintf(s.in, "source %q </dev/null\necho %q\n", file, sentinel); err != nil {
		return s.failed(fmt.Errorf("write to the shell: %w", err))
	}
	deadline := time.After(timeout)
	var out []string
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				<-s.exited
				return s.failed(fmt.Errorf("the shell exited: %v", s.err))
			}
			if l == sentinel {
				return nil
			}
			out = append(out, l)
		case <-deadline:
			return s.failed(fmt.Errorf("not done after %v; its last output:\n%s", timeout, lastLines(out, 10)))
		}
	}
}

func (s *readmeShell) failed(err error) error {
	return fmt.Errorf("%w\nstderr:\n%s", err, lastLines(strings.Split(s.stderr.String(), "\n"), 20))
}

func (s *readmeShell) close() {
	_ = s.in.Close()
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

func lastLines(lines []string, n int) string {
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// lockedBuffer is the shell's stderr, written by exec's copier while run reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// readmeLoad runs the load block on one node, at the clone, against that node's containerd.
func readmeLoad(ctx context.Context, c *cluster, n *node, block string) error {
	path := filepath.Join(c.cfg.debRoot, "usr/bin") + ":/usr/sbin:/usr/bin:/sbin:/bin"
	_, err := n.sh(ctx, "env", "PATH="+path, "CONTAINERD_ADDRESS="+filepath.Join(n.state, "containerd/containerd.sock"),
		"bash", "--noprofile", "--norc", "-euo", "pipefail", "-c", fmt.Sprintf("cd %q\n%s", c.cfg.repo, block))
	return err
}

// The chart's default images that are not ours, as `helm template` renders them with the README's values.
var chartImageRE = regexp.MustCompile(`(?m)^\s*image:\s*"?([^"\s]+)"?\s*$`)

// standInImages puts on both nodes, under the names the chart's defaults give, an image for each public one:
// kubectl (the cluster's own binary; the chart's default tag is the cluster's version), pause (dnsq pause) and
// busybox (Debian's static busybox, with nslookup, the applet helm test runs). A default image the case cannot
// stand in for fails it, naming the image.
func standInImages(ctx context.Context, c *cluster, h *helmRun) error {
	out, err := h.run(ctx, "template", helmRelease, h.chart(), "-n", helmNamespace,
		"--set", "config.localDns="+localDNSIP, "--set", "config.dnsServer="+kubeDNSIP)
	if err != nil {
		return err
	}
	dir := filepath.Join(filepath.Dir(c.state), "readme-images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ociimage := filepath.Join(filepath.Dir(c.cfg.dnsq), "ociimage")
	var tars []string
	seen := map[string]bool{}
	for _, m := range chartImageRE.FindAllStringSubmatch(out, -1) {
		ref := m[1]
		repo := ref
		if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
			repo = ref[:i]
		}
		if seen[ref] || repo == ourImageRepo {
			continue
		}
		seen[ref] = true
		tar := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
		var args []string
		switch repo {
		case "registry.k8s.io/kubectl":
			args = []string{"-binary", filepath.Join(c.cfg.k8sBin, "kubectl"), "--", "/kubectl"}
		case "registry.k8s.io/pause":
			args = []string{"-binary", c.cfg.dnsq, "--", "/dnsq", "pause"}
		case "busybox", "docker.io/library/busybox":
			root, err := busyboxRoot(dir)
			if err != nil {
				return err
			}
			args = []string{"-rootfs", root, "--", "/bin/busybox", "sh"}
		default:
			return fmt.Errorf("the chart's defaults name image %s, for which this case has no stand-in", ref)
		}
		args = append([]string{"-ref", ref, "-o", tar}, args...)
		if b, err := exec.CommandContext(ctx, ociimage, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("image %s: %v\n%s", ref, err, b)
		}
		tars = append(tars, tar)
	}
	if len(tars) == 0 {
		return errors.New("helm template rendered no image of the chart's defaults but ours")
	}
	for _, n := range c.nodes() {
		for _, t := range tars {
			if _, err := n.ctr(ctx, "images", "import", t); err != nil {
				return err
			}
		}
	}
	return nil
}

// busyboxRoot is a root with Debian's static busybox (package busybox-static, run.sh installs it) at /bin/busybox
// and /bin/nslookup (busybox runs the applet its name says).
func busyboxRoot(dir string) (string, error) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return "", fmt.Errorf("busybox (Debian's busybox-static): %w", err)
	}
	f, err := elf.Open(bb)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%s is dynamically linked: install busybox-static", bb)
		}
	}
	b, err := os.ReadFile(bb)
	if err != nil {
		return "", err
	}
	root := filepath.Join(dir, "busybox-root")
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		return "", err
	}
	for _, name := range []string{"busybox", "nslookup"} {
		if err := os.WriteFile(filepath.Join(root, "bin", name), b, 0o755); err != nil {
			return "", err
		}
	}
	return root, nil
}
