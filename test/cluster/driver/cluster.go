package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

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
	// kubeletDNS, if set, is the kubelets' clusterDNS (node.sh's default: the kube-dns ClusterIP).
	kubeletDNS string
	// nextPort is the next source port sourcePorts hands out.
	nextPort int
	// out is where the cluster's run writes its lines (its results' out).
	out io.Writer
}

// printf writes one of the run's lines where its output goes.
func (c *cluster) printf(format string, args ...any) { fprintf(c.out, format, args...) }

// firstSourcePort starts the source ports of the queries whose flows a case looks up in the conntrack table: in
// the ephemeral range, far from where Linux starts it (32768), and never handed out twice on one cluster.
const firstSourcePort = 45000

// sourcePorts reserves n consecutive source ports for one query's tries and returns the first.
func (c *cluster) sourcePorts(n int) int {
	if c.nextPort == 0 {
		c.nextPort = firstSourcePort
	}
	p := c.nextPort
	c.nextPort += n
	return p
}

func (c *cluster) nodes() []*node { return []*node{c.local, c.remote} }

func (c *cluster) script() string { return filepath.Join(c.cfg.repo, "test/cluster/node.sh") }

func (c *cluster) env() []string {
	env := append(os.Environ(), "CLUSTER_STATE="+c.state, "CLUSTER_K8S_BIN="+c.cfg.k8sBin,
		"CLUSTER_DEB_ROOT="+c.cfg.debRoot, "CLUSTER_IMAGES="+c.cfg.images, "CLUSTER_DNSQ="+c.cfg.dnsq)
	if c.kubeletDNS != "" {
		env = append(env, "CLUSTER_KUBELET_DNS="+c.kubeletDNS)
	}
	return env
}

// newCluster names the nodes node.sh makes (machine.sh holds the same names).
func newCluster(cfg config, mode, state string) *cluster {
	return &cluster{cfg: cfg, state: state, mode: mode,
		local:  &node{cfg: cfg, name: "node-1", state: state},
		remote: &node{cfg: cfg, name: "node-2", state: filepath.Join(state, "node-2")}}
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

func (c *cluster) kubectlArgs(args []string) []string {
	return append([]string{"--kubeconfig=" + filepath.Join(c.state, "pki/admin.kubeconfig"),
		"--cache-dir=" + filepath.Join(c.state, "kubectl-cache")}, args...)
}

func (c *cluster) kubectl(ctx context.Context, args ...string) (string, error) {
	return c.local.run(ctx, nil, filepath.Join(c.cfg.k8sBin, "kubectl"), c.kubectlArgs(args)...)
}

// kubectlAs runs kubectl with another kubeconfig than the administrator's (a service account's token).
func (c *cluster) kubectlAs(ctx context.Context, kubeconfig string, args ...string) (string, error) {
	return c.local.run(ctx, nil, filepath.Join(c.cfg.k8sBin, "kubectl"),
		append([]string{"--kubeconfig=" + kubeconfig, "--cache-dir=" + filepath.Join(c.state, "kubectl-cache")}, args...)...)
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
