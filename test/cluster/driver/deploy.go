package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
)

// The documented substitution for each overlay (its kustomization.yaml and docs/migration.md), in order: the IPVS
// overlay first drops ",__PILLAR__DNS__SERVER__" from -localip and fills __PILLAR__CLUSTER__DNS__ instead.
var overlaySubst = map[string][][2]string{
	"base":                 stdSubst,
	"iptables-or-nftables": stdSubst,
	"ipvs": {{",__PILLAR__DNS__SERVER__", ""}, {"__PILLAR__LOCAL__DNS__", localDNSIP},
		{"__PILLAR__DNS__DOMAIN__", clusterDomain}, {"__PILLAR__CLUSTER__DNS__", kubeDNSIP}},
	"ipv6": {{"__PILLAR__LOCAL__DNS__", localDNS6IP}, {"__PILLAR__DNS__DOMAIN__", clusterDomain},
		{"__PILLAR__DNS__SERVER__", kubeDNS6IP}},
	"dual-stack": {{"__PILLAR__LOCAL__DNS6__", localDNS6IP}, {"__PILLAR__LOCAL__DNS__", localDNSIP},
		{"__PILLAR__DNS__DOMAIN__", clusterDomain}, {"__PILLAR__DNS6__SERVER__", kubeDNS6IP},
		{"__PILLAR__DNS__SERVER__", kubeDNSIP}},
}

var stdSubst = [][2]string{{"__PILLAR__LOCAL__DNS__", localDNSIP}, {"__PILLAR__DNS__DOMAIN__", clusterDomain},
	{"__PILLAR__DNS__SERVER__", kubeDNSIP}}

// The overlay a user with kube-proxy in iptables or nftables mode applies.
const userOverlay = "iptables-or-nftables"

func substitute(s string, pairs [][2]string) string {
	for _, p := range pairs {
		s = strings.ReplaceAll(s, p[0], p[1])
	}
	return s
}

func kustomizeDir(repo, name string) string {
	if name == "base" {
		return filepath.Join(repo, "deploy/base")
	}
	return filepath.Join(repo, "deploy/overlays", name)
}

// render is `kubectl kustomize DIR | sed …` as the overlay's comment says.
func render(ctx context.Context, c *cluster, name string) (string, error) {
	out, err := c.kubectl(ctx, "kustomize", kustomizeDir(c.cfg.repo, name))
	if err != nil {
		return "", err
	}
	s := substitute(out, overlaySubst[name])
	if strings.Contains(s, "__PILLAR__LOCAL__") || strings.Contains(s, "__PILLAR__DNS__") {
		return "", fmt.Errorf("placeholders left after the documented substitution of %s", name)
	}
	return s, nil
}

// withStandardDaemonSet replaces the rendered DaemonSet with the upstream-shaped one (manifests/standard-daemonset.yaml).
func withStandardDaemonSet(rendered, standard string) (string, error) {
	docs := strings.Split(rendered, "\n---\n")
	var keep []string
	found := false
	for _, d := range docs {
		if strings.Contains(d, "kind: DaemonSet") {
			found = true
			continue
		}
		keep = append(keep, d)
	}
	if !found {
		return "", fmt.Errorf("no DaemonSet in the rendered base")
	}
	return strings.Join(append(keep, standard), "\n---\n"), nil
}
