package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The address the upgrade adds (extraLocalIps).
const addedLocalIP = "169.254.20.11"

// helmMonitoringValues turns on every object of another API the chart has.
const helmMonitoringValues = `
serviceMonitor: {enabled: true}
podMonitor: {enabled: true}
prometheusRule: {enabled: true}
dashboard: {enabled: true}
`

// helmCases: the chart on both nodes, after the manifests' cases (nothing else of ours runs): helm install, the
// DNS cases and helm test; the ServiceMonitor, PodMonitor and PrometheusRule validated by the API server against
// prometheus-operator's CRDs; both metrics ports scraped from a pod; helm upgrade under load to a second build of
// ours that adds an address; helm uninstall leaving nothing on either node; then a values file in the community
// chart's vocabulary, installed, answering, uninstalled. before is kube-proxy's state without any cache.
func helmCases(ctx context.Context, c *cluster, r *results, before string) {
	h, err := newHelm(ctx, c)
	if !r.check("helm: helm and the hooks' images", "", err) {
		return
	}
	note, err := nodesClean(ctx, c)
	r.check("helm: nodes clean before install", note, err)
	r.check("helm: prometheus-operator CRDs installed (no operator)", "", installMonitoringCRDs(ctx, c))
	r.check("helm: ServiceMonitor, PodMonitor, PrometheusRule pass the API server's strict validation", "", h.validateMonitoring(ctx))

	start := time.Now()
	err = h.install(ctx, helmClusterValues, helmMonitoringValues)
	if r.check("helm: install and DaemonSet Ready on both nodes", fmt.Sprintf("%.1f s", time.Since(start).Seconds()), err) {
		r.figure("helm install to DaemonSet Ready", "%.1f s", time.Since(start).Seconds())
		dnsCases(ctx, c, r, "helm: ")
		// The test pod is deleted once it succeeds (so uninstall leaves nothing): its exit status is the verdict.
		out, err := h.run(ctx, "test", helmRelease, "-n", helmNamespace, "--timeout", "2m")
		if err == nil && !strings.Contains(out, "Succeeded") {
			err = fmt.Errorf("helm test did not report the test pod Succeeded:\n%s", out)
		}
		r.check("helm: helm test resolves through the cache", "", err)
		r.check("helm: monitors, rules and dashboard created", "", checkMonitoringObjects(ctx, c))
		r.check("helm: both metrics ports scraped from a pod", "", scrapeFromPod(ctx, c))
		upgradeCase(ctx, c, r, h)
	} else {
		r.fail("helm: cases with the release", errors.New("not run: the install failed"))
	}
	start = time.Now()
	err = h.uninstall(ctx, before)
	r.check("helm: uninstall (pre-delete hook) leaves nothing of ours on either node", fmt.Sprintf("%.1f s", time.Since(start).Seconds()), err)
	r.figure("helm uninstall, hook included", "%.1f s", time.Since(start).Seconds())

	community := filepath.Join(c.cfg.repo, "deploy/testdata/chart/community.yaml")
	err = h.install(ctx, "@"+community, helmClusterValues)
	if r.check("helm: community-vocabulary values install, DaemonSet Ready", "deploy/testdata/chart/community.yaml", err) {
		r.check("helm: community values answer", "", communityAnswers(ctx, c))
	}
	r.check("helm: community values uninstall leaves nothing of ours", "", h.uninstall(ctx, before))
}

// upgradeCase: helm upgrade to the second build of ours with one more listen address, under load from a pod on
// each node (the ClusterIP and the link-local address) and from the host-network client: no query lost on any,
// only the second build runs afterwards, and the added address answers on both nodes.
func upgradeCase(ctx context.Context, c *cluster, r *results, h *helmRun) {
	upgraded := fmt.Sprintf("image: {tag: %s}\nextraLocalIps: [%s]\n", upgradeTag, addedLocalIP)
	v, err := h.values(helmClusterValues, helmMonitoringValues, upgraded)
	if !r.check("helm: upgrade values", "", err) {
		return
	}
	loads := []load{podLoad("dns-client"), podLoad("dns-client-2"), hostLoad}
	res, took, err := underLoad(ctx, c, 50*time.Second, loads, func() error {
		_, err := h.run(ctx, append([]string{"upgrade", helmRelease, h.chart(), "-n", helmNamespace, "--wait", "--timeout", "65s"}, v...)...)
		return err
	})
	if err == nil {
		for _, k := range sortedKeys(res) {
			l := res[k]
			switch {
			case strings.HasSuffix(k, "/tcp"):
				// The old instance's TCP listener leaves the SO_REUSEPORT group only by closing: the kernel
				// resets the connections still queued on it, and CoreDNS's shutdown closes those it accepted
				// but has not read. The host's TCP queries may lose those in flight at that instant. UDP is
				// handed over (internal/handover) and loses nothing.
				err = errors.Join(err, inFlight(k, l))
			case l.Sent == 0 || l.Failed+l.Bad > 0:
				err = errors.Join(err, fmt.Errorf("%s: %s", k, l))
			}
		}
	}
	reportLoad(r, "helm upgrade", res, took)
	r.check("helm: upgrade (second build, one more address) under load loses no query (over TCP, none but those in flight at the old listener's close)",
		fmt.Sprintf("%.1f s", took.Seconds()), err)

	var imgs []string
	err = poll(ctx, 60*time.Second, time.Second, func() (bool, error) {
		var err error
		imgs, err = agentImages(ctx, c)
		return err == nil && slices.Equal(imgs, []string{ourImageRepo + ":" + upgradeTag}), err
	})
	if err != nil {
		err = fmt.Errorf("cache pods run %q, want only %s:%s: %w", imgs, ourImageRepo, upgradeTag, err)
	}
	r.check("helm: only the second build runs after the upgrade", "", err)
	for _, pod := range []string{"dns-client", "dns-client-2"} {
		a, err := query(ctx, c, pod, addedLocalIP, false, "A", "kubernetes.default.svc."+clusterDomain, 0)
		if err == nil {
			err = want(a, "A", kubernetesIP)
		}
		r.check("helm: "+pod+" resolves via the added address "+addedLocalIP, "", err)
	}
}

// communityAnswers: with the community-vocabulary values the cache answers cluster names on both addresses from
// both nodes, and AAAA questions empty (config.noIPv6Lookups). Its upstreams are public resolvers this cluster
// cannot reach, so names outside the cluster are not asked.
func communityAnswers(ctx context.Context, c *cluster) error {
	var errs []error
	for _, pod := range []string{"dns-client", "dns-client-2"} {
		for _, ip := range []string{kubeDNSIP, localDNSIP} {
			a, err := query(ctx, c, pod, ip, false, "A", "kubernetes.default.svc."+clusterDomain, 0)
			if err == nil {
				err = want(a, "A", kubernetesIP)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s via %s: %w", pod, ip, err))
			}
		}
	}
	a, err := query(ctx, c, "dns-client", localDNSIP, false, "AAAA", "kubernetes.default.svc."+clusterDomain, 0)
	if err == nil && (a.rcode != "NOERROR" || len(a.records) != 0) {
		err = fmt.Errorf("AAAA: got %s, want NOERROR and no records (config.noIPv6Lookups)", a)
	}
	return errors.Join(append(errs, err)...)
}
