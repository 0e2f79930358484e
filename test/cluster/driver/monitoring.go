package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// prometheus-operator's CRDs come from its Go module, at this version (example/prometheus-operator-crd); no
// operator runs: the API server validates the chart's objects against the CRDs' schemas, which is what is tested.
const promOperatorModule = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

func installMonitoringCRDs(ctx context.Context, c *cluster) error {
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", promOperatorModule).Output()
	if err != nil {
		return fmt.Errorf("go mod download %s: %w", promOperatorModule, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return fmt.Errorf("go mod download %s: no directory in %s", promOperatorModule, out)
	}
	for _, kind := range []string{"servicemonitors", "podmonitors", "prometheusrules"} {
		f := filepath.Join(mod.Dir, "example/prometheus-operator-crd/monitoring.coreos.com_"+kind+".yaml")
		// Server-side: the CRDs are too large for the last-applied annotation.
		if _, err := c.kubectl(ctx, "apply", "--server-side", "-f", f); err != nil {
			return err
		}
		// Not `kubectl wait --for=condition=Established`: it fails at once, instead of waiting, when it reads the
		// CRD before the API server has written any condition (".status.conditions accessor error: <nil>").
		crd := "crd/" + kind + ".monitoring.coreos.com"
		err := poll(ctx, 60*time.Second, 500*time.Millisecond, func() (bool, error) {
			out, err := c.kubectl(ctx, "get", crd, "-o", `jsonpath={.status.conditions[?(@.type=="Established")].status}`)
			if err != nil {
				return false, err
			}
			return strings.TrimSpace(out) == "True", fmt.Errorf("%s: Established is %q", crd, strings.TrimSpace(out))
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// validateMonitoring: the chart's ServiceMonitor, PodMonitor and PrometheusRule pass the API server's strict
// field validation against the CRDs' schemas, and a ServiceMonitor with a misspelt field is refused (so the
// check can fail).
func (h *helmRun) validateMonitoring(ctx context.Context) error {
	v, err := h.values(helmClusterValues, helmMonitoringValues)
	if err != nil {
		return err
	}
	text, err := h.run(ctx, append([]string{"template", helmRelease, h.chart(), "-n", helmNamespace}, v...)...)
	if err != nil {
		return err
	}
	var docs []string
	for _, d := range strings.Split(text, "\n---\n") {
		if strings.Contains(d, "apiVersion: monitoring.coreos.com/v1") {
			docs = append(docs, d)
		}
	}
	if len(docs) != 3 {
		return fmt.Errorf("%d objects of monitoring.coreos.com/v1 rendered, want a ServiceMonitor, a PodMonitor and a PrometheusRule", len(docs))
	}
	if _, err := h.c.kubectlIn(ctx, strings.Join(docs, "\n---\n"), "apply", "--dry-run=server", "--validate=strict", "-f", "-"); err != nil {
		return err
	}
	for _, d := range docs {
		if !strings.Contains(d, "kind: ServiceMonitor") {
			continue
		}
		bad := strings.Replace(d, "\n  endpoints:", "\n  endpointz: []\n  endpoints:", 1)
		if bad == d {
			return errors.New("no spec.endpoints in the ServiceMonitor to misspell")
		}
		if _, err := h.c.kubectlIn(ctx, bad, "apply", "--dry-run=server", "--validate=strict", "-f", "-"); err == nil {
			return errors.New("a ServiceMonitor with an unknown field (endpointz) passed strict validation: the CRD validates nothing")
		}
	}
	return nil
}

func checkMonitoringObjects(ctx context.Context, c *cluster) error {
	out, err := c.kubectl(ctx, "-n", helmNamespace, "get", "servicemonitors,podmonitors,prometheusrules,configmaps", "-o", "name")
	if err != nil {
		return err
	}
	for _, want := range []string{"servicemonitor.monitoring.coreos.com/node-local-dns", "podmonitor.monitoring.coreos.com/node-local-dns",
		"prometheusrule.monitoring.coreos.com/node-local-dns", "configmap/node-local-dns-dashboard"} {
		if !strings.Contains(out, want) {
			return fmt.Errorf("%s not created; have:\n%s", want, out)
		}
	}
	return nil
}

// scrapeFromPod: a pod on the pod network GETs /metrics from node-1's address on both ports, as Prometheus would
// (kubectl get --raw against the metrics server is one plain HTTP GET), and finds CoreDNS's series on 9253 and
// the agent's on 9353.
func scrapeFromPod(ctx context.Context, c *cluster) error {
	hostIP, err := c.kubectl(ctx, "-n", helmNamespace, "get", "pods", "-l", "k8s-app=node-local-dns",
		"--field-selector", "spec.nodeName="+c.local.name, "-o", "jsonpath={.items[0].status.hostIP}")
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range []struct{ port, series string }{{"9253", "coredns_dns_requests_total"}, {"9353", "nodelocaldns_instances"}} {
		errs = append(errs, scrapeOnce(ctx, c, strings.TrimSpace(hostIP), p.port, p.series))
	}
	return errors.Join(errs...)
}

func scrapeOnce(ctx context.Context, c *cluster, host, port, series string) error {
	pod := "scrape-" + port
	_, _ = c.kubectl(ctx, "delete", "pod", pod, "--ignore-not-found", "--wait=true")
	defer func() { _, _ = c.kubectl(ctx, "delete", "pod", pod, "--ignore-not-found", "--wait=false") }()
	if _, err := c.kubectl(ctx, "run", pod, "--image="+kubectlImage, "--restart=Never", "--image-pull-policy=Never", "--command", "--",
		"/kubectl", "--kubeconfig=/dev/null", "--server=http://"+host+":"+port, "get", "--raw", "/metrics"); err != nil {
		return err
	}
	err := poll(ctx, 60*time.Second, time.Second, func() (bool, error) {
		phase, err := c.kubectl(ctx, "get", "pod", pod, "-o", "jsonpath={.status.phase}")
		if phase == "Failed" {
			logs, _ := c.kubectl(ctx, "logs", pod)
			return false, fmt.Errorf("scrape of %s:%s failed: %s", host, port, logs)
		}
		return phase == "Succeeded", err
	})
	if err != nil {
		return err
	}
	logs, err := c.kubectl(ctx, "logs", pod)
	if err == nil && !strings.Contains(logs, series) {
		err = fmt.Errorf("scrape of %s:%s has no %s (%d bytes)", host, port, series, len(logs))
	}
	return err
}
