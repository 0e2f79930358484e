package listeners

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodelocaldns/nodelocaldns/deploy"
	"github.com/nodelocaldns/nodelocaldns/internal/image"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// runVolume is the DaemonSet's run volume, an emptyDir of each pod's; each agent here gets a directory instead.
const runVolume = "/run/nodelocaldns"

// shipped is the agent's container as deploy/base's DaemonSet has it.
func shipped(t *testing.T) *corev1.Container {
	t.Helper()
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict([]byte(deploy.DaemonSet), &ds); err != nil {
		t.Fatalf("deploy/base/daemonset.yaml: %v", err)
	}
	return &ds.Spec.Template.Spec.Containers[0]
}

// pod is one agent started as the DaemonSet's pod would be: its args with the deploy-time placeholders filled
// and its run volume in a directory of its own.
type pod struct {
	*harness.Agent
	t   testing.TB
	ctr *corev1.Container
	dir string
}

// inPod makes s what it is inside this pod: the placeholders filled and the run volume's path its directory.
func (p *pod) inPod(s string) string {
	return strings.NewReplacer("__PILLAR__LOCAL__DNS__", harness.LocalIP, "__PILLAR__DNS__SERVER__", harness.ClusterIP,
		runVolume, p.dir).Replace(s)
}

func startPod(t *testing.T, extra ...string) *pod {
	t.Helper()
	p := &pod{t: t, ctr: shipped(t), dir: t.TempDir()}
	var args []string
	for _, a := range p.ctr.Args {
		args = append(args, p.inPod(a))
	}
	p.Agent = harness.Start(t, harness.Config{
		Dir:          p.dir,
		Args:         append(args, extra...),
		BaseCorefile: harness.StandardCorefile(harness.LocalIP, harness.ClusterIP, "cluster.local"),
		Env:          []string{"KUBE_DNS_UPSTREAM_SERVICE_HOST=" + harness.UpstreamClusterIP, "KUBE_DNS_SERVICE_HOST=" + harness.ClusterIP},
	})
	return p
}

// probe runs one of the pod's probes as the kubelet does: an exec runs the command in the container (here the
// binary under test stands for the image's), an httpGet is a GET from the node's namespace without keep-alive,
// and either has timeoutSeconds. It returns nil when the kubelet would count a success.
func (p *pod) probe(pr *corev1.Probe) error {
	timeout := time.Duration(max(pr.TimeoutSeconds, 1)) * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	switch {
	case pr.Exec != nil:
		cmd := pr.Exec.Command
		if len(cmd) == 0 || cmd[0] != image.Entrypoint {
			return fmt.Errorf("exec probe %q does not run the image's %s", cmd, image.Entrypoint)
		}
		var args []string
		for _, a := range cmd[1:] {
			args = append(args, p.inPod(a))
		}
		out, err := exec.CommandContext(ctx, harness.Binary(p.t), args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("exec %q: %v: %s", args, err, strings.TrimSpace(string(out)))
		}
		return nil
	case pr.HTTPGet != nil:
		g := pr.HTTPGet
		return httpProbe(ctx, "http://"+net.JoinHostPort(p.inPod(g.Host), g.Port.String())+g.Path)
	}
	return fmt.Errorf("probe %+v: neither exec nor httpGet", pr)
}

// httpProbe is the kubelet's HTTP probe: a GET on a new connection, success on 200-399.
func httpProbe(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// standardHealth is the standard nodelocaldns.yaml's liveness probe: GET /health on the local IP's port 8080,
// which the agent keeps serving for it.
func standardHealth(ctx context.Context) error {
	return httpProbe(ctx, "http://"+net.JoinHostPort(harness.LocalIP, "8080")+"/health")
}
