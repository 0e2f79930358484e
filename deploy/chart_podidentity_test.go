package deploy

import (
	"io"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

const (
	podsRole    = "ClusterRole /node-local-dns-pod-identity"
	podsBinding = "ClusterRoleBinding /node-local-dns-pod-identity"
)

// TestChartPodIdentity: podIdentity.enabled turns on -pod-identity (which the agent's parser takes), $NODE_NAME
// once (with the start-up gate too), the token, and a ClusterRole that gets, lists and watches pods, nothing
// else, bound to the DaemonSet's service account. Off (TestChartStartupTaintOffByDefault), no ClusterRole at all.
func TestChartPodIdentity(t *testing.T) {
	for _, tc := range []struct{ name, values string }{
		{"alone", `podIdentity: {enabled: true}`},
		{"with the start-up gate", "podIdentity: {enabled: true}\nstartupTaint: {enabled: true}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := renderChart(t, []string{valuesFile(t, tc.values)})
			ps := r.daemonSets["kube-system/node-local-dns"].Spec.Template.Spec
			c := ps.Containers[0]
			o, err := options.Parse(c.Args, io.Discard)
			if err != nil || !o.PodIdentity {
				t.Errorf("options.Parse(%q) = %v, %v: want -pod-identity", c.Args, o, err)
			}
			nodeName := 0
			for _, e := range c.Env {
				if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
					nodeName++
				}
			}
			if nodeName != 1 || slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "NODE_NAME" && e.ValueFrom == nil }) {
				t.Errorf("env %v: want NODE_NAME from spec.nodeName, once", c.Env)
			}
			if ps.AutomountServiceAccountToken == nil || !*ps.AutomountServiceAccountToken {
				t.Errorf("automountServiceAccountToken %v, want true", ps.AutomountServiceAccountToken)
			}
			var role rbacv1.ClusterRole
			var binding rbacv1.ClusterRoleBinding
			for k, into := range map[string]any{podsRole: &role, podsBinding: &binding} {
				obj, ok := r.other[k]
				if !ok {
					t.Fatalf("no %s: %v", k, mapKeys(r.other))
				}
				b, _ := yaml.Marshal(obj)
				if err := yaml.UnmarshalStrict(b, into); err != nil {
					t.Fatalf("%s: %v", k, err)
				}
			}
			want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}}
			if !equalJSON(role.Rules, want) {
				t.Errorf("ClusterRole rules %+v, want only get, list and watch on pods", role.Rules)
			}
			if binding.RoleRef.Kind != "ClusterRole" || binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 ||
				binding.Subjects[0].Kind != "ServiceAccount" || binding.Subjects[0].Name != ps.ServiceAccountName || binding.Subjects[0].Namespace != chartNamespace {
				t.Errorf("ClusterRoleBinding %+v, want %s bound to the DaemonSet's ServiceAccount", binding, role.Name)
			}
		})
	}
}
