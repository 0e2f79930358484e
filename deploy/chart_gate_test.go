package deploy

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

const defaultStartupTaint = "nodelocaldns.io/agent-not-ready"

// The start-up gate's objects, as the chart names them.
const (
	gateRole    = "ClusterRole /node-local-dns-startup-taint"
	gateBinding = "ClusterRoleBinding /node-local-dns-startup-taint"
	gatePolicy  = "ValidatingAdmissionPolicy /node-local-dns-startup-taint"
	gatePolicyB = "ValidatingAdmissionPolicyBinding /node-local-dns-startup-taint"
)

// TestChartStartupTaintOffByDefault: the default install has no right on nodes, no token, no node name and no
// -startup-taint: its agent never talks to the API server.
func TestChartStartupTaintOffByDefault(t *testing.T) {
	r := renderChart(t, nil)
	for _, k := range []string{gateRole, gateBinding, gatePolicy, gatePolicyB} {
		if _, ok := r.other[k]; ok {
			t.Errorf("default render has %s", k)
		}
	}
	for k := range r.other {
		if strings.HasPrefix(k, "ClusterRole") {
			t.Errorf("default render has %s", k)
		}
	}
	ps := r.daemonSets["kube-system/node-local-dns"].Spec.Template.Spec
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		t.Errorf("automountServiceAccountToken %v, want false", ps.AutomountServiceAccountToken)
	}
	c := ps.Containers[0]
	if len(c.Env) != 0 || slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "-startup-taint") }) {
		t.Errorf("default container env %v args %q: want no gate", c.Env, c.Args)
	}
}

// TestChartStartupTaint: startupTaint.enabled turns on the flag (which the agent's parser takes), $NODE_NAME
// from the downward API, the token, a toleration of the key whatever tolerations says, and a ClusterRole
// that gets and patches nodes, bound to the DaemonSet's service account.
func TestChartStartupTaint(t *testing.T) {
	for _, tc := range []struct{ name, values, key, sa string }{
		{"default key", `startupTaint: {enabled: true}`, defaultStartupTaint, "node-local-dns"},
		{"own key and service account without tolerations",
			"startupTaint: {enabled: true, key: example.com/dns-not-ready}\ntolerations: []\nserviceAccount: {create: false, name: dns}\n",
			"example.com/dns-not-ready", "dns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := renderChart(t, []string{valuesFile(t, tc.values)})
			ps := r.daemonSets["kube-system/node-local-dns"].Spec.Template.Spec
			c := ps.Containers[0]
			if !slices.Contains(c.Args, "-startup-taint="+tc.key) {
				t.Errorf("args %q lack -startup-taint=%s", c.Args, tc.key)
			}
			o, err := options.Parse(c.Args, io.Discard)
			if err != nil || o.StartupTaint != tc.key {
				t.Errorf("options.Parse(%q) = %v, %v", c.Args, o, err)
			}
			if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
				return e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
			}) {
				t.Errorf("env %v lacks NODE_NAME from spec.nodeName", c.Env)
			}
			if ps.AutomountServiceAccountToken == nil || !*ps.AutomountServiceAccountToken {
				t.Errorf("automountServiceAccountToken %v, want true: the agent needs its token", ps.AutomountServiceAccountToken)
			}
			for _, effect := range []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute} {
				if !tolerated(ps.Tolerations, corev1.Taint{Key: tc.key, Effect: effect}) {
					t.Errorf("tolerations %v do not tolerate %s:%s: the agent could not start where it must remove it", ps.Tolerations, tc.key, effect)
				}
			}
			if ps.ServiceAccountName != tc.sa {
				t.Errorf("serviceAccountName %q, want %q", ps.ServiceAccountName, tc.sa)
			}

			var role rbacv1.ClusterRole
			var binding rbacv1.ClusterRoleBinding
			for k, into := range map[string]any{gateRole: &role, gateBinding: &binding} {
				o, ok := r.other[k]
				if !ok {
					t.Fatalf("no %s: %v", k, mapKeys(r.other))
				}
				b, _ := yaml.Marshal(o)
				if err := yaml.UnmarshalStrict(b, into); err != nil {
					t.Fatalf("%s: %v", k, err)
				}
			}
			want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch"}}}
			if !equalJSON(role.Rules, want) {
				t.Errorf("ClusterRole rules %+v, want only get and patch on nodes", role.Rules)
			}
			if binding.RoleRef.Kind != "ClusterRole" || binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 ||
				binding.Subjects[0].Kind != "ServiceAccount" || binding.Subjects[0].Name != tc.sa || binding.Subjects[0].Namespace != chartNamespace {
				t.Errorf("ClusterRoleBinding %+v, want %s bound to ServiceAccount %s/%s", binding, role.Name, chartNamespace, tc.sa)
			}
			checkGatePolicy(t, r, tc.key, tc.sa)
		})
	}
}

// checkGatePolicy: the ValidatingAdmissionPolicy that narrows the ClusterRole's patch is rendered, denies (its
// binding's only action), fails closed, applies to the gate's service account alone, and names the gate's key.
// What it allows and refuses is tested against a real API server (test/cluster, the gate case).
func checkGatePolicy(t *testing.T, r *chartRender, key, sa string) {
	t.Helper()
	var policy admissionv1.ValidatingAdmissionPolicy
	var binding admissionv1.ValidatingAdmissionPolicyBinding
	for k, into := range map[string]any{gatePolicy: &policy, gatePolicyB: &binding} {
		o, ok := r.other[k]
		if !ok {
			t.Fatalf("no %s: %v", k, mapKeys(r.other))
		}
		b, _ := yaml.Marshal(o)
		if err := yaml.UnmarshalStrict(b, into); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
	if fp := policy.Spec.FailurePolicy; fp == nil || *fp != admissionv1.Fail {
		t.Errorf("failurePolicy %v, want Fail: a policy the API server cannot evaluate must refuse", fp)
	}
	user := fmt.Sprintf("request.userInfo.username == %q", "system:serviceaccount:"+chartNamespace+":"+sa)
	if mc := policy.Spec.MatchConditions; len(mc) != 1 || mc[0].Expression != user {
		t.Errorf("matchConditions %+v, want the one condition %s", mc, user)
	}
	if !slices.ContainsFunc(policy.Spec.Variables, func(v admissionv1.Variable) bool {
		return v.Name == "key" && v.Expression == fmt.Sprintf("%q", key)
	}) {
		t.Errorf("variables %+v: want key = %q", policy.Spec.Variables, key)
	}
	if binding.Spec.PolicyName != policy.Name || !slices.Equal(binding.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
		t.Errorf("binding %+v, want policy %s with action Deny", binding.Spec, policy.Name)
	}
}

func TestChartStartupTaintRefusesAnEmptyKey(t *testing.T) {
	_, err := helmTemplate(t, []string{valuesFile(t, `startupTaint: {enabled: true, key: ""}`)})
	if err == nil || !strings.Contains(err.Error(), "startupTaint.key") {
		t.Errorf("empty key: %v, want a failure naming startupTaint.key", err)
	}
}

// tolerated is the scheduler's rule for one taint: some toleration matches its key (or, with Exists and no key,
// every key) and its effect (or every effect).
func tolerated(ts []corev1.Toleration, taint corev1.Taint) bool {
	for _, t := range ts {
		if t.Effect != "" && t.Effect != taint.Effect {
			continue
		}
		switch {
		case t.Key == "" && t.Operator == corev1.TolerationOpExists:
			return true
		case t.Key == taint.Key && t.Operator == corev1.TolerationOpExists:
			return true
		case t.Key == taint.Key && (t.Operator == "" || t.Operator == corev1.TolerationOpEqual) && t.Value == taint.Value:
			return true
		}
	}
	return false
}
