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
}

// node is one running test node: node.sh brought it up; every command for it runs inside its network and mount
// namespaces through nsenter on the anchor process.
type node struct {
	cfg    config
	state  string
	mode   string
	anchor string
}

func (n *node) script() string { return filepath.Join(n.cfg.repo, "test/cluster/node.sh") }

func (n *node) env() []string {
	return append(os.Environ(), "CLUSTER_STATE="+n.state, "CLUSTER_K8S_BIN="+n.cfg.k8sBin,
		"CLUSTER_DEB_ROOT="+n.cfg.debRoot, "CLUSTER_IMAGES="+n.cfg.images, "CLUSTER_DNSQ="+n.cfg.dnsq)
}

func (n *node) up(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, n.script(), "up", n.mode)
	cmd.Env = n.env()
	// Not the context's cancel: a signal must not leave half a node; down cleans up whatever up started.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("node.sh up %s: %v\n%s", n.mode, err, out)
	}
	b, err := os.ReadFile(filepath.Join(n.state, "logs/anchor.pid"))
	if err != nil {
		return err
	}
	n.anchor = strings.TrimSpace(string(b))
	return nil
}

func (n *node) down() error {
	cmd := exec.Command(n.script(), "down")
	cmd.Env = n.env()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("node.sh down: %v\n%s", err, out)
	}
	return nil
}

// run runs a command inside the node's namespaces and returns its standard output; an error carries stderr.
func (n *node) run(ctx context.Context, stdin io.Reader, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	full := append([]string{"-t", n.anchor, "-m", "-n", "--", name}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", full...)
	cmd.Env = append(os.Environ(), "PATH="+n.cfg.debRoot+"/usr/bin:"+n.cfg.debRoot+"/usr/sbin:/usr/sbin:/usr/bin:/sbin:/bin")
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %v: %s", filepath.Base(name), strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func (n *node) sh(ctx context.Context, name string, args ...string) (string, error) {
	return n.run(ctx, nil, name, args...)
}

func (n *node) kubectlArgs(args []string) []string {
	return append([]string{"--kubeconfig=" + filepath.Join(n.state, "pki/admin.kubeconfig"),
		"--cache-dir=" + filepath.Join(n.state, "kubectl-cache")}, args...)
}

func (n *node) kubectl(ctx context.Context, args ...string) (string, error) {
	return n.run(ctx, nil, filepath.Join(n.cfg.k8sBin, "kubectl"), n.kubectlArgs(args)...)
}

// kubectlIn runs kubectl with the given standard input (apply -f -).
func (n *node) kubectlIn(ctx context.Context, stdin string, args ...string) (string, error) {
	return n.run(ctx, strings.NewReader(stdin), filepath.Join(n.cfg.k8sBin, "kubectl"), n.kubectlArgs(args)...)
}

// kubectlCmd prepares a long-running kubectl (the load under a rollout) without starting it.
func (n *node) kubectlCmd(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"-t", n.anchor, "-m", "-n", "--", filepath.Join(n.cfg.k8sBin, "kubectl")}, n.kubectlArgs(args)...)
	return exec.CommandContext(ctx, "nsenter", full...)
}

func (n *node) ctr(ctx context.Context, args ...string) (string, error) {
	base := []string{"--address", filepath.Join(n.state, "containerd/containerd.sock"), "-n", "k8s.io"}
	return n.sh(ctx, filepath.Join(n.cfg.debRoot, "usr/bin/ctr"), append(base, args...)...)
}

// exec runs a command in a pod's container.
func (n *node) exec(ctx context.Context, ns, pod string, args ...string) (string, error) {
	return n.kubectl(ctx, append([]string{"-n", ns, "exec", pod, "--"}, args...)...)
}

// poll calls f every interval until it returns true or nil error semantics say so, or the timeout passes.
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
