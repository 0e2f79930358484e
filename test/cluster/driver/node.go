package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

type config struct {
	repo, state, k8sBin, debRoot, images, dnsq string
	agent                                      string // the agent binary of the image under test (-teardown runs it)
}

// cluster is the running test cluster that node.sh brought up: two nodes, the control plane on the first. Every
// kubectl runs in node-1's namespaces.
type cluster struct {
	cfg   config
	state string
	mode  string
	// local runs the client pods and the agent under test; remote runs kube-dns, so what falls through to
	// kube-dns crosses nodes.
	local, remote *node
	// fallback: the image has the link-local fallback (fallback.go); the cases that need it are skipped otherwise.
	fallback bool
}

// node is one node of the cluster: its commands run inside its network and mount namespaces through nsenter on
// its anchor process.
type node struct {
	cfg      config
	name, ip string
	state    string // its state directory (node.sh: node-1's is the cluster's, node-2's below it)
	anchor   string
}

func (c *cluster) nodes() []*node { return []*node{c.local, c.remote} }

func (c *cluster) script() string { return filepath.Join(c.cfg.repo, "test/cluster/node.sh") }

func (c *cluster) env() []string {
	return append(os.Environ(), "CLUSTER_STATE="+c.state, "CLUSTER_K8S_BIN="+c.cfg.k8sBin,
		"CLUSTER_DEB_ROOT="+c.cfg.debRoot, "CLUSTER_IMAGES="+c.cfg.images, "CLUSTER_DNSQ="+c.cfg.dnsq)
}

// newCluster names the nodes node.sh makes (machine.sh holds the same names and addresses).
func newCluster(cfg config, mode, state string) *cluster {
	return &cluster{cfg: cfg, state: state, mode: mode,
		local:  &node{cfg: cfg, name: "node-1", ip: "10.250.0.10", state: state},
		remote: &node{cfg: cfg, name: "node-2", ip: "10.250.0.11", state: filepath.Join(state, "node-2")}}
}

func (c *cluster) up(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, c.script(), "up", c.mode)
	cmd.Env = c.env()
	// Not the context's cancel: a signal must not leave half a cluster; down cleans up whatever up started.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("node.sh up %s: %v\n%s", c.mode, err, out)
	}
	for _, n := range c.nodes() {
		b, err := os.ReadFile(filepath.Join(n.state, "logs/anchor.pid"))
		if err != nil {
			return err
		}
		n.anchor = strings.TrimSpace(string(b))
	}
	return nil
}

func (c *cluster) down() error {
	cmd := exec.Command(c.script(), "down")
	cmd.Env = c.env()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("node.sh down: %v\n%s", err, out)
	}
	return nil
}

// run runs a command inside the node's namespaces and returns its standard output; an error carries stderr.
func (n *node) run(ctx context.Context, stdin io.Reader, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", n.nsenterArgs(name, args)...)
	cmd.Env = append(os.Environ(), "PATH="+n.cfg.debRoot+"/usr/bin:"+n.cfg.debRoot+"/usr/sbin:/usr/sbin:/usr/bin:/sbin:/bin")
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %s %s: %v: %s", n.name, filepath.Base(name), strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func (n *node) nsenterArgs(name string, args []string) []string {
	return append([]string{"-t", n.anchor, "-m", "-n", "--", name}, args...)
}

func (n *node) sh(ctx context.Context, name string, args ...string) (string, error) {
	return n.run(ctx, nil, name, args...)
}

// ctr talks to the node's own containerd.
func (n *node) ctr(ctx context.Context, args ...string) (string, error) {
	base := []string{"--address", filepath.Join(n.state, "containerd/containerd.sock"), "-n", "k8s.io"}
	return n.sh(ctx, filepath.Join(n.cfg.debRoot, "usr/bin/ctr"), append(base, args...)...)
}

func (c *cluster) kubectlArgs(args []string) []string {
	return append([]string{"--kubeconfig=" + filepath.Join(c.state, "pki/admin.kubeconfig"),
		"--cache-dir=" + filepath.Join(c.state, "kubectl-cache")}, args...)
}

func (c *cluster) kubectl(ctx context.Context, args ...string) (string, error) {
	return c.local.run(ctx, nil, filepath.Join(c.cfg.k8sBin, "kubectl"), c.kubectlArgs(args)...)
}

// kubectlIn runs kubectl with the given standard input (apply -f -).
func (c *cluster) kubectlIn(ctx context.Context, stdin string, args ...string) (string, error) {
	return c.local.run(ctx, strings.NewReader(stdin), filepath.Join(c.cfg.k8sBin, "kubectl"), c.kubectlArgs(args)...)
}

// kubectlCmd prepares a long-running kubectl (the load under a rollout) without starting it.
func (c *cluster) kubectlCmd(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", c.local.nsenterArgs(filepath.Join(c.cfg.k8sBin, "kubectl"), c.kubectlArgs(args))...)
}

// exec runs a command in a pod's container.
func (c *cluster) exec(ctx context.Context, ns, pod string, args ...string) (string, error) {
	return c.kubectl(ctx, append([]string{"-n", ns, "exec", pod, "--"}, args...)...)
}

// poll calls f every interval until it returns true or the timeout passes; the last error says why not.
func poll(ctx context.Context, timeout, interval time.Duration, f func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := f()
		if ok {
			return nil
		}
		last = err
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("timed out after %v: %w", timeout, last)
			}
			return fmt.Errorf("timed out after %v", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
