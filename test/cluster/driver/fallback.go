package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// The link-local fallback: while nothing takes it, a query to the link-local address is rewritten in the kernel
// to the kube-dns ClusterIP and answered by kube-dns, for pods and host-network clients. It lives in a table no
// process owns, so it outlives the agent: a pod delete, a SIGKILL, a drain and `kubectl delete -k` keep it, for
// its lease (uninstall.go); `nodelocaldns -teardown` removes it.
const fallbackTable = "inet nodelocaldns-fallback"

// fallbackEvidence is what hasFallback looks for in the agent binary: the fallback table's name. An agent that
// creates the table carries its name as a string constant; one without the fallback has no reason to.
const fallbackEvidence = `the agent binary names table "nodelocaldns-fallback"`

const noFallback = "no link-local fallback in this build"

// hasFallback reports whether the image under test has the link-local fallback, so that its cases run only
// against a build that has it and a build from before it stays green.
func hasFallback(agentBinary string) (bool, error) {
	b, err := os.ReadFile(agentBinary)
	if err != nil {
		return false, fmt.Errorf("read the agent binary: %w", err)
	}
	_, name, _ := strings.Cut(fallbackTable, " ")
	return bytes.Contains(b, []byte(name)), nil
}

// leftTables is what may stay of ours on a node once every agent pod is gone: the fallback table, when the
// build has it (it must stay: it is what answers the link-local address while no agent runs).
func (c *cluster) leftTables() []string {
	if c.fallback {
		return []string{fallbackTable}
	}
	return nil
}

// checkFallbackStays: with every agent pod gone, each node still has the fallback table.
func checkFallbackStays(ctx context.Context, c *cluster) error {
	var problems []string
	for _, n := range c.nodes() {
		t, err := ourTables(ctx, n)
		if err != nil {
			return err
		}
		if !slices.Contains(t, fallbackTable) {
			problems = append(problems, fmt.Sprintf("%s: no table %s (tables of ours: %v)", n.name, fallbackTable, t))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// teardownRemovesFallback runs on each node the command docs/failure-model.md gives for removing the fallback
// after `kubectl delete -k` (`nodelocaldns -teardown -localip <the same -localip>`), and checks that it removed
// the table and left kube-proxy's tables as they were.
func teardownRemovesFallback(ctx context.Context, c *cluster, before string) error {
	var problems []string
	for _, n := range c.nodes() {
		if out, err := n.sh(ctx, c.cfg.agent, "-teardown", "-localip", localDNSIP+","+kubeDNSIP); err != nil {
			problems = append(problems, fmt.Sprintf("%s: -teardown: %v\n%s", n.name, err, out))
			continue
		}
		if t, err := ourTables(ctx, n); err != nil || len(t) > 0 {
			problems = append(problems, fmt.Sprintf("%s: tables left after -teardown: %v %v", n.name, t, err))
		}
		if l, err := ourLinks(ctx, n); err != nil || len(l) > 0 {
			problems = append(problems, fmt.Sprintf("%s: interfaces left after -teardown: %v %v", n.name, l, err))
		}
	}
	var now string
	if err := poll(ctx, 30*time.Second, time.Second, func() (bool, error) {
		var err error
		now, err = snapshotKubeProxy(ctx, c)
		return err == nil && now == before, err
	}); err != nil {
		problems = append(problems, fmt.Sprintf("kube-proxy's tables differ from before the manifests:\n%s", diff(before, now)))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}
