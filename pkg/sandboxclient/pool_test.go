package sandboxclient_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/pkg/sandboxclient"
)

// newPool creates a SandboxPool of replicas node24 members.
func newPool(ctx context.Context, t *testing.T, c *sandboxclient.Client, ns, name string, replicas int32) *sandboxv1.SandboxPool {
	t.Helper()
	rt := sandboxv1.Runtime("node24")
	p, err := c.Clientset().SandboxV1alpha1().SandboxPools(ns).Create(ctx, &sandboxv1.SandboxPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: sandboxv1.SandboxPoolSpec{
			Replicas: &replicas,
			Template: sandboxv1.SandboxPoolTemplate{Spec: sandboxv1.SandboxSpec{
				Source: sandboxv1.SandboxSource{Runtime: &rt},
				Env:    []sandboxv1.EnvVar{{Name: "WORKSPACE", Value: ptr.To("acme")}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestClaimTakesAReadyMember(t *testing.T) {
	c, log, ns := newClient(t)
	ctx := testContext(t, 3*time.Minute)
	newPool(ctx, t, c, ns, "warm", 1)
	if _, err := c.WaitPoolReady(ctx, ns, "warm"); err != nil {
		t.Fatal(err)
	}
	members, err := c.Clientset().SandboxV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{LabelSelector: sandboxv1.LabelPool + "=warm"})
	if err != nil || len(members.Items) != 1 {
		t.Fatalf("pool members: %v %v", members, err)
	}
	member := members.Items[0]

	sbx, res, err := c.Claim(ctx, ns, "conversation", "warm", sandboxclient.ClaimOptions{
		Labels: map[string]string{"conversation": "1"},
		// The claimant's own fields: a member takes them on.
		Customize: func(s *sandboxv1.Sandbox) error {
			s.Spec.Ports = []int32{3000}
			s.Spec.TimeoutSeconds = ptr.To[int64](900)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := sandboxclient.ClaimResult{Claimed: true, Pool: "warm", Member: member.Name, Reason: sandboxv1.ReasonClaimed}
	if res.Message == "" || res.Claimed != want.Claimed || res.Pool != want.Pool || res.Member != want.Member || res.Reason != want.Reason {
		t.Errorf("Claim result %+v, want %+v with a message", res, want)
	}
	if !strings.Contains(res.String(), "claimed member "+member.Name) {
		t.Errorf("ClaimResult.String() = %q", res.String())
	}
	// Built from the template, with the pool named and the customisation.
	switch s := sbx.Spec; {
	case s.PoolRef == nil || s.PoolRef.Name != "warm":
		t.Errorf("spec.poolRef %+v", s.PoolRef)
	case s.Source.Runtime == nil || *s.Source.Runtime != "node24" || len(s.Env) != 1 || *s.Env[0].Value != "acme":
		t.Errorf("spec not from the template: source %+v env %+v", s.Source, s.Env)
	case len(s.Ports) != 1 || *s.TimeoutSeconds != 900 || sbx.Labels["conversation"] != "1":
		t.Errorf("customisation lost: ports %v timeout %v labels %v", s.Ports, *s.TimeoutSeconds, sbx.Labels)
	}
	if !meta.IsStatusConditionTrue(sbx.Status.Conditions, sandboxv1.ConditionReady) || sbx.Status.Claim == nil || sbx.Status.Claim.MemberUID != string(member.UID) {
		t.Errorf("claimed Sandbox: ready %v claim %+v", readyStatus(sbx), sbx.Status.Claim)
	}
	if sbx.Annotations[sandboxv1.AnnotationLastActivity] == "" {
		t.Errorf("created without the %s annotation", sandboxv1.AnnotationLastActivity)
	}

	// Again: idempotent, the same Sandbox and outcome, one heartbeat, no create.
	creates := log.count("POST", "/sandboxes")
	again, res2, err := c.Claim(ctx, ns, "conversation", "warm", sandboxclient.ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.UID != sbx.UID || res2 != res {
		t.Errorf("second Claim: uid %s result %+v, want %s %+v", again.UID, res2, sbx.UID, res)
	}
	if n := log.count("POST", "/sandboxes") - creates; n != 0 {
		t.Errorf("second Claim sent %d creates", n)
	}
	// A Sandbox of that name from elsewhere is not claimed over.
	if _, err := c.EnsureReady(ctx, node24(ns, "plain")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Claim(ctx, ns, "plain", "warm", sandboxclient.ClaimOptions{}); err == nil || !strings.Contains(err.Error(), "no spec.poolRef") {
		t.Errorf("Claim of an existing Sandbox without poolRef: %v", err)
	}
}

func TestClaimFromAnEmptyPoolIsCold(t *testing.T) {
	c, _, ns := newClient(t)
	ctx := testContext(t, 3*time.Minute)
	newPool(ctx, t, c, ns, "empty", 0)
	sbx, res, err := c.Claim(ctx, ns, "conversation", "empty", sandboxclient.ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed || res.Reason != sandboxv1.ReasonPoolEmpty || res.Member != "" {
		t.Errorf("claim from an empty pool: %+v, want cold with %s", res, sandboxv1.ReasonPoolEmpty)
	}
	if readyStatus(sbx) != metav1.ConditionTrue || sbx.Status.Claim != nil {
		t.Errorf("cold Sandbox: ready %v claim %+v", readyStatus(sbx), sbx.Status.Claim)
	}
	if !strings.HasPrefix(res.String(), "created cold (PoolEmpty)") {
		t.Errorf("ClaimResult.String() = %q", res.String())
	}
}

func TestClaimRefusesWhatThePoolCannotServe(t *testing.T) {
	c, _, ns := newClient(t)
	ctx := testContext(t, 3*time.Minute)
	newPool(ctx, t, c, ns, "small", 0)
	bigger := func(s *sandboxv1.Sandbox) error {
		s.Spec.Resources = &sandboxv1.SandboxResources{VCPUs: ptr.To[int32](4)}
		return nil
	}
	_, _, err := c.Claim(ctx, ns, "big", "small", sandboxclient.ClaimOptions{Customize: bigger})
	var cold *sandboxclient.ColdSpecError
	if !errors.As(err, &cold) || cold.Pool != "small" || strings.Join(cold.Fields, ",") != "spec.resources" {
		t.Fatalf("Claim with other resources: %v, want a ColdSpecError naming spec.resources", err)
	}
	if _, err := c.Clientset().SandboxV1alpha1().Sandboxes(ns).Get(ctx, "big", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a refused claim created the Sandbox: %v", err)
	}
	// Allowed: created cold, the operator says why.
	sbx, res, err := c.Claim(ctx, ns, "big", "small", sandboxclient.ClaimOptions{Customize: bigger, AllowCold: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed || res.Reason != sandboxv1.ReasonSpecMismatch || !strings.Contains(res.Message, "spec.resources") {
		t.Errorf("cold claim: %+v, want %s naming spec.resources", res, sandboxv1.ReasonSpecMismatch)
	}
	if *sbx.Spec.Resources.VCPUs != 4 {
		t.Errorf("cold Sandbox resources %+v", sbx.Spec.Resources)
	}

	// A pool that does not exist has no template: an error, nothing created.
	if _, _, err := c.Claim(ctx, ns, "orphan", "nothing", sandboxclient.ClaimOptions{}); !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "SandboxPool") {
		t.Errorf("Claim from a missing pool: %v", err)
	}
}

func TestScalePoolUsesTheScaleSubresource(t *testing.T) {
	c, log, ns := newClient(t)
	ctx := testContext(t, 3*time.Minute)
	newPool(ctx, t, c, ns, "grow", 0)
	if _, err := c.WaitPoolReady(ctx, ns, "grow"); err != nil {
		t.Fatal(err)
	}
	scale, err := c.ScalePool(ctx, ns, "grow", 2)
	if err != nil {
		t.Fatal(err)
	}
	if scale.Spec.Replicas != 2 || log.count("PUT", "/sandboxpools/grow/scale") != 1 {
		t.Errorf("ScalePool: scale %+v, %d PUTs of /scale; requests:\n%s", scale.Spec, log.count("PUT", "/sandboxpools/grow/scale"), log)
	}
	p, err := c.WaitPoolReady(ctx, ns, "grow")
	if err != nil {
		t.Fatal(err)
	}
	st := sandboxclient.PoolStatusOf(p)
	if st.Replicas != 2 || st.Target != 2 || st.Ready != 2 || st.Members != 2 || st.Reason != sandboxv1.ReasonPoolFilled {
		t.Errorf("pool status after scaling to 2: %+v", st)
	}
	if got, err := c.PoolStatus(ctx, ns, "grow"); err != nil || got.Ready != 2 {
		t.Errorf("PoolStatus: %+v %v", got, err)
	}
	if _, err := c.ScalePool(ctx, ns, "grow", -1); err == nil {
		t.Errorf("ScalePool to -1 succeeded")
	}
	// DeletePool waits until the members are gone too.
	if err := c.DeletePool(ctx, ns, "grow"); err != nil {
		t.Fatal(err)
	}
	left, err := c.Clientset().SandboxV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{LabelSelector: sandboxv1.LabelPool + "=grow"})
	if err != nil || len(left.Items) != 0 {
		t.Errorf("after DeletePool: %d members left (%v)", len(left.Items), err)
	}
}

func TestClaimMismatch(t *testing.T) {
	rt := sandboxv1.Runtime("node24")
	tmpl := sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Runtime: &rt}, Persistent: ptr.To(true)}
	for _, tc := range []struct {
		name   string
		change func(*sandboxv1.SandboxSpec)
		want   string
	}{
		{"the claimant's own fields", func(s *sandboxv1.SandboxSpec) {
			s.Ports, s.TimeoutSeconds = []int32{80}, ptr.To[int64](60)
			s.NetworkPolicy = &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkDenyAll}
		}, ""},
		{"source", func(s *sandboxv1.SandboxSpec) { s.Source.Runtime = ptr.To(sandboxv1.Runtime("python3.13")) }, "spec.source"},
		{"resources", func(s *sandboxv1.SandboxSpec) { s.Resources = &sandboxv1.SandboxResources{VCPUs: ptr.To[int32](2)} }, "spec.resources"},
		{"an env var added", func(s *sandboxv1.SandboxSpec) { s.Env = []sandboxv1.EnvVar{{Name: "A", Value: ptr.To("1")}} }, "spec.env"},
		{"persistent unset counts", func(s *sandboxv1.SandboxSpec) { s.Persistent = nil }, "spec.persistent"},
		{"class and setup", func(s *sandboxv1.SandboxSpec) {
			s.ClassName = ptr.To("gpu")
			s.Setup = []sandboxv1.SetupCommand{{Command: "true"}}
		}, "spec.className,spec.setup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := *tmpl.DeepCopy()
			tc.change(&spec)
			if got := strings.Join(sandboxv1.ClaimMismatch(&tmpl, &spec), ","); got != tc.want {
				t.Errorf("ClaimMismatch = %q, want %q", got, tc.want)
			}
		})
	}
}

func readyStatus(s *sandboxv1.Sandbox) metav1.ConditionStatus {
	if c := meta.FindStatusCondition(s.Status.Conditions, sandboxv1.ConditionReady); c != nil {
		return c.Status
	}
	return ""
}
