package controllers

import (
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// The demand target: spec.replicas raised to ceil(claims/s × replenish s ×
// (1 + headroom)), within minReady and maxReady (maxReady defaulting to
// replicas).
func TestPoolTarget(t *testing.T) {
	policy := func(minReady, maxReady, headroom *int32) *sandboxv1.PoolPolicy {
		return &sandboxv1.PoolPolicy{MinReady: minReady, MaxReady: maxReady, HeadroomPercent: headroom}
	}
	tests := []struct {
		name     string
		replicas *int32
		policy   *sandboxv1.PoolPolicy
		perMin   float64
		replen   int32
		want     int32
	}{
		{"no replicas: the API default of 1", nil, nil, 0, 0, 1},
		{"no policy: replicas, whatever the demand", ptr.To[int32](3), nil, 600, 60, 3},
		{"policy, no demand: replicas", ptr.To[int32](2), policy(nil, ptr.To[int32](10), nil), 0, 30, 2},
		{"demand below replicas: replicas", ptr.To[int32](4), policy(nil, ptr.To[int32](10), nil), 2, 30, 4},
		// 6/min = 0.1/s × 30 s × 1.5 = 4.5 → 5.
		{"demand above replicas, default headroom 50%, rounded up", ptr.To[int32](2), policy(nil, ptr.To[int32](10), nil), 6, 30, 5},
		{"demand with headroom 0: exactly the claims during a replenish", ptr.To[int32](1), policy(nil, ptr.To[int32](10), ptr.To[int32](0)), 6, 30, 3},
		{"demand with headroom 100%", ptr.To[int32](1), policy(nil, ptr.To[int32](10), ptr.To[int32](100)), 6, 30, 6},
		{"maxReady unset: no growth beyond replicas", ptr.To[int32](2), policy(nil, nil, nil), 60, 60, 2},
		{"demand above maxReady: maxReady", ptr.To[int32](2), policy(nil, ptr.To[int32](7), nil), 60, 60, 7},
		{"minReady above replicas: minReady", ptr.To[int32](1), policy(ptr.To[int32](3), ptr.To[int32](5), nil), 0, 30, 3},
		{"minReady above replicas and maxReady unset: minReady wins over the default max", ptr.To[int32](1), policy(ptr.To[int32](3), nil, nil), 0, 30, 3},
		{"minReady above maxReady (CEL refuses it; minReady wins)", ptr.To[int32](1), policy(ptr.To[int32](4), ptr.To[int32](2), nil), 60, 60, 4},
		{"replicas 0 with no demand: empty pool", ptr.To[int32](0), policy(nil, ptr.To[int32](5), nil), 0, 30, 0},
		{"replicas 0 with demand: grows to the demand", ptr.To[int32](0), policy(nil, ptr.To[int32](5), nil), 2, 30, 2},
		{"no replenish time observed yet: no demand", ptr.To[int32](1), policy(nil, ptr.To[int32](5), nil), 60, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &sandboxv1.SandboxPoolSpec{Replicas: tt.replicas, Policy: tt.policy}
			if got := poolTarget(spec, tt.perMin, tt.replen); got != tt.want {
				t.Errorf("poolTarget = %d, want %d", got, tt.want)
			}
		})
	}
}

// memberShape is a pool member as classifyMember reads it.
type memberShape struct {
	deleting     bool
	claimedBy    string
	phase        sandboxv1.SandboxPhase
	specState    sandboxv1.SandboxState
	ready        bool
	bootedFrom   *sandboxv1.BootedFrom
	session      string
	setup        []sandboxv1.SetupCommand
	setupState   sandboxv1.SetupState
	notResumable bool
}

func (s memberShape) build() *sandboxv1.Sandbox {
	m := &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "warm-abcde", Labels: map[string]string{sandboxv1.LabelPool: "warm"}}}
	if s.deleting {
		m.DeletionTimestamp = &metav1.Time{Time: time.Unix(1700000000, 0)}
	}
	if s.claimedBy != "" {
		m.Labels[sandboxv1.LabelClaimedBy] = s.claimedBy
	}
	m.Spec.State = s.specState
	m.Spec.Setup = s.setup
	m.Status.Phase = s.phase
	m.Status.SessionID = s.session
	m.Status.BootedFrom = s.bootedFrom
	if s.setupState != "" {
		m.Status.Setup = &sandboxv1.SetupStatus{State: s.setupState}
	}
	ready := metav1.ConditionFalse
	if s.ready {
		ready = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: sandboxv1.ConditionReady, Status: ready, Reason: "X"})
	if s.notResumable {
		meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: sandboxv1.ConditionResumable, Status: metav1.ConditionFalse, Reason: "X"})
	}
	return m
}

// What a member is for the pool: one row per branch of classifyMember.
func TestClassifyMember(t *testing.T) {
	const snap = "snap_current"
	current := &sandboxv1.BootedFrom{SnapshotID: snap}
	running := memberShape{phase: sandboxv1.SandboxRunning, ready: true, session: "sbx_s1", bootedFrom: current}
	resting := memberShape{phase: sandboxv1.SandboxStopped, specState: sandboxv1.SandboxStateStopped, session: "sbx_s1", bootedFrom: current}
	idle := memberShape{phase: sandboxv1.SandboxIdle, session: "sbx_s1", bootedFrom: current}
	with := func(s memberShape, f func(*memberShape)) memberShape { f(&s); return s }
	setup := []sandboxv1.SetupCommand{{Command: "npm", Args: []string{"ci"}}}

	tests := []struct {
		name       string
		m          memberShape
		snapshotID string
		state      sandboxv1.SandboxState
		want       memberKind
	}{
		{"being deleted, even if ready", with(running, func(s *memberShape) { s.deleting = true }), snap, sandboxv1.SandboxStateRunning, memberDeleting},
		{"marked by a claimant", with(running, func(s *memberShape) { s.claimedBy = "uid-1" }), snap, sandboxv1.SandboxStateRunning, memberClaimed},
		{"deleted and marked: deleting comes first", with(running, func(s *memberShape) { s.deleting, s.claimedBy = true, "uid-1" }), snap, sandboxv1.SandboxStateRunning, memberDeleting},
		{"failed", with(running, func(s *memberShape) { s.phase, s.ready = sandboxv1.SandboxFailed, false }), snap, sandboxv1.SandboxStateRunning, memberStale},
		{"failed without a template snapshot", with(running, func(s *memberShape) { s.phase, s.bootedFrom = sandboxv1.SandboxFailed, nil }), "", sandboxv1.SandboxStateRunning, memberStale},
		{"booted from an older snapshot", with(running, func(s *memberShape) { s.bootedFrom = &sandboxv1.BootedFrom{SnapshotID: "snap_old"} }), snap, sandboxv1.SandboxStateRunning, memberStale},
		{"boot not recorded yet", with(running, func(s *memberShape) { s.bootedFrom = nil }), snap, sandboxv1.SandboxStateRunning, memberPending},
		{"boot recorded without an id", with(running, func(s *memberShape) { s.bootedFrom = &sandboxv1.BootedFrom{} }), snap, sandboxv1.SandboxStateRunning, memberPending},
		{"running and ready from the current snapshot", running, snap, sandboxv1.SandboxStateRunning, memberClaimable},
		{"running and ready, template without a snapshot", with(running, func(s *memberShape) { s.bootedFrom = nil }), "", sandboxv1.SandboxStateRunning, memberClaimable},
		{"running, not ready yet (setting up)", with(running, func(s *memberShape) { s.ready = false }), snap, sandboxv1.SandboxStateRunning, memberPending},
		{"creating", memberShape{phase: sandboxv1.SandboxCreating}, "", sandboxv1.SandboxStateRunning, memberPending},
		{"ready but being paused by the pool", with(running, func(s *memberShape) { s.specState = sandboxv1.SandboxStateStopped }), snap, sandboxv1.SandboxStateStopped, memberPending},
		{"Stopped pool: paused after setup", resting, snap, sandboxv1.SandboxStateStopped, memberClaimable},
		{"Stopped pool: paused after its setup succeeded", with(resting, func(s *memberShape) { s.setup, s.setupState = setup, sandboxv1.SetupSucceeded }), snap, sandboxv1.SandboxStateStopped, memberClaimable},
		{"Stopped pool: paused before its setup finished", with(resting, func(s *memberShape) { s.setup, s.setupState = setup, sandboxv1.SetupRunning }), snap, sandboxv1.SandboxStateStopped, memberPending},
		{"Stopped pool: paused with no setup status", with(resting, func(s *memberShape) { s.setup = setup }), snap, sandboxv1.SandboxStateStopped, memberPending},
		{"Stopped pool: paused without ever having a session", with(resting, func(s *memberShape) { s.session = "" }), snap, sandboxv1.SandboxStateStopped, memberPending},
		{"Stopped pool: paused but not resumable", with(resting, func(s *memberShape) { s.notResumable = true }), snap, sandboxv1.SandboxStateStopped, memberPending},
		{"Stopped pool: asked to pause, still running", with(resting, func(s *memberShape) { s.phase = sandboxv1.SandboxStopping }), snap, sandboxv1.SandboxStateStopped, memberPending},
		{"Running pool: a paused member is not handed out", resting, snap, sandboxv1.SandboxStateRunning, memberPending},
		{"idle window (action Stop) ended its session", idle, snap, sandboxv1.SandboxStateRunning, memberClaimable},
		{"idle in a Stopped pool", idle, snap, sandboxv1.SandboxStateStopped, memberClaimable},
		{"idle but not resumable", with(idle, func(s *memberShape) { s.notResumable = true }), snap, sandboxv1.SandboxStateRunning, memberPending},
		{"idle before its setup finished", with(idle, func(s *memberShape) { s.setup, s.setupState = setup, sandboxv1.SetupFailed }), snap, sandboxv1.SandboxStateRunning, memberPending},
		{"idle from an older snapshot", with(idle, func(s *memberShape) { s.bootedFrom = &sandboxv1.BootedFrom{SnapshotID: "snap_old"} }), snap, sandboxv1.SandboxStateRunning, memberStale},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := classifyMember(tt.m.build(), tt.snapshotID, tt.state); got != tt.want {
				t.Errorf("classifyMember = %d, want %d", got, tt.want)
			}
		})
	}
}

// The fields a running member cannot take, compared both ways: an unset
// field differs from a set one.
func TestSpecMismatch(t *testing.T) {
	rt := func(r string) sandboxv1.SandboxSource {
		x := sandboxv1.Runtime(r)
		return sandboxv1.SandboxSource{Runtime: &x}
	}
	template := func() *sandboxv1.SandboxSpec {
		return &sandboxv1.SandboxSpec{
			Source:     rt("node24"),
			ClassName:  ptr.To("standard"),
			Resources:  &sandboxv1.SandboxResources{VCPUs: ptr.To[int32](2)},
			Env:        []sandboxv1.EnvVar{{Name: "MODE", Value: ptr.To("dev")}},
			Persistent: ptr.To(true),
			Setup:      []sandboxv1.SetupCommand{{Command: "npm", Args: []string{"ci"}}},
		}
	}
	change := func(f func(*sandboxv1.SandboxSpec)) *sandboxv1.SandboxSpec { s := template(); f(s); return s }
	tests := []struct {
		name string
		want *sandboxv1.SandboxSpec
		diff []string
	}{
		{"equal", template(), nil},
		{"what a claimant brings: network policy, ports, timeout, state, idle, deletion policy, probe", change(func(s *sandboxv1.SandboxSpec) {
			s.NetworkPolicy = &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkDenyAll}
			s.Ports = []int32{3000}
			s.TimeoutSeconds = ptr.To[int64](600)
			s.State = sandboxv1.SandboxStateStopped
			s.Idle = &sandboxv1.IdlePolicy{Action: sandboxv1.IdleDelete}
			s.DeletionPolicy = sandboxv1.DeletionPolicyRetain
			s.PoolRef = &sandboxv1.PoolRef{Name: "warm"}
		}), nil},
		{"another runtime", change(func(s *sandboxv1.SandboxSpec) { s.Source = rt("python3.13") }), []string{"spec.source"}},
		{"another kind of source", change(func(s *sandboxv1.SandboxSpec) {
			s.Source = sandboxv1.SandboxSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "workspace"}}
		}), []string{"spec.source"}},
		{"another class", change(func(s *sandboxv1.SandboxSpec) { s.ClassName = ptr.To("gpu") }), []string{"spec.className"}},
		{"no class where the template has one", change(func(s *sandboxv1.SandboxSpec) { s.ClassName = nil }), []string{"spec.className"}},
		{"more vCPUs", change(func(s *sandboxv1.SandboxSpec) { s.Resources.VCPUs = ptr.To[int32](4) }), []string{"spec.resources"}},
		{"no resources where the template has some", change(func(s *sandboxv1.SandboxSpec) { s.Resources = nil }), []string{"spec.resources"}},
		{"another env value", change(func(s *sandboxv1.SandboxSpec) { s.Env[0].Value = ptr.To("prod") }), []string{"spec.env"}},
		{"an extra env variable", change(func(s *sandboxv1.SandboxSpec) {
			s.Env = append(s.Env, sandboxv1.EnvVar{Name: "TOKEN", ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "s", Key: "k"}}})
		}), []string{"spec.env"}},
		{"no env where the template has some", change(func(s *sandboxv1.SandboxSpec) { s.Env = nil }), []string{"spec.env"}},
		{"not persistent", change(func(s *sandboxv1.SandboxSpec) { s.Persistent = ptr.To(false) }), []string{"spec.persistent"}},
		{"another setup", change(func(s *sandboxv1.SandboxSpec) { s.Setup[0].Args = []string{"install"} }), []string{"spec.setup"}},
		{"no setup where the template has one", change(func(s *sandboxv1.SandboxSpec) { s.Setup = nil }), []string{"spec.setup"}},
		{"several fields, named in order", change(func(s *sandboxv1.SandboxSpec) {
			s.Setup, s.Source, s.Resources = nil, rt("node22"), &sandboxv1.SandboxResources{VCPUs: ptr.To[int32](8)}
		}), []string{"spec.source", "spec.resources", "spec.setup"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sandboxv1.ClaimMismatch(template(), tt.want); !reflect.DeepEqual(got, tt.diff) {
				t.Errorf("ClaimMismatch = %v, want %v", got, tt.diff)
			}
		})
	}
	// Both ways: a template without env does not serve a claimant with env,
	// and one with a class does not serve a claimant without.
	bare := &sandboxv1.SandboxSpec{Source: rt("node24")}
	if got := sandboxv1.ClaimMismatch(bare, template()); !reflect.DeepEqual(got, []string{"spec.className", "spec.resources", "spec.env", "spec.persistent", "spec.setup"}) {
		t.Errorf("bare template against a full claimant: %v", got)
	}
}

func TestMarkedMembersForgetAfterAMinute(t *testing.T) {
	var m markedMembers
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	if m.has("a", t0) {
		t.Fatal("an empty memory has a member")
	}
	m.add("a", t0)
	if !m.has("a", t0.Add(markedMemory)) || m.has("b", t0) {
		t.Error("a mark is remembered for markedMemory, and only the marked member")
	}
	if m.has("a", t0.Add(markedMemory+time.Second)) {
		t.Error("a mark older than markedMemory is still remembered")
	}
	m.add("b", t0.Add(2*markedMemory))
	if len(m.at) != 1 {
		t.Errorf("adding keeps %d marks, want the old one dropped: %v", len(m.at), m.at)
	}
}
