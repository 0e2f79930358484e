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

// node is one node of the cluster: its commands run inside its network and mount namespaces through nsenter on
// its anchor process.
type node struct {
	cfg    config
	name   string
	state  string // its state directory (node.sh: node-1's is the cluster's, node-2's below it)
	anchor string
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
