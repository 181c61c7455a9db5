package controllers

// What a SandboxPool decides from what it observes, as pure functions: which
// members a claim may take, how many members to keep (the demand policy),
// and the pool's claim statistics.

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// Defaults of a SandboxPool's spec where the API server left a field unset
// (an object stored before a default existed, or a test's typed client).
const (
	defaultPoolIdleSeconds = 3600
	defaultHeadroomPercent = 50
	// claimRateWindow is the window claimsPerMinute averages over.
	claimRateWindow = 10 * time.Minute
)

// memberKind is what a pool member is, seen from the pool.
type memberKind int

const (
	// memberPending: not claimable yet (creating, setting up, pausing).
	memberPending memberKind = iota
	// memberClaimable: a claim may take it now.
	memberClaimable
	// memberStale: booted from another snapshot than the template's current
	// one, or failed: never handed out, replaced.
	memberStale
	// memberClaimed: a claimant marked it; it is the claimant's to finish.
	memberClaimed
	// memberDeleting: being deleted.
	memberDeleting
)

// classifyMember says what member is for a pool whose template boots from
// snapshotID ("" when the template's source is not a snapshotRef) and whose
// members wait in state.
func classifyMember(m *sandboxv1.Sandbox, snapshotID string, state sandboxv1.SandboxState) memberKind {
	switch {
	case !m.DeletionTimestamp.IsZero():
		return memberDeleting
	case m.Labels[sandboxv1.LabelClaimedBy] != "":
		return memberClaimed
	case m.Status.Phase == sandboxv1.SandboxFailed:
		return memberStale
	case snapshotID != "" && m.Status.BootedFrom != nil && m.Status.BootedFrom.SnapshotID != "" && m.Status.BootedFrom.SnapshotID != snapshotID:
		return memberStale
	case snapshotID != "" && (m.Status.BootedFrom == nil || m.Status.BootedFrom.SnapshotID == ""):
		// Not created yet, or its boot not recorded: cannot tell whether it
		// is current, so it is not handed out.
		return memberPending
	}
	if memberRunningReady(m) || (state == sandboxv1.SandboxStateStopped && memberResting(m)) || idleResting(m) {
		return memberClaimable
	}
	return memberPending
}

// memberRunningReady: its session runs and setup (and any readiness probe)
// succeeded.
func memberRunningReady(m *sandboxv1.Sandbox) bool {
	return m.Status.Phase == sandboxv1.SandboxRunning && meta.IsStatusConditionTrue(m.Status.Conditions, sandboxv1.ConditionReady) &&
		m.Spec.State != sandboxv1.SandboxStateStopped
}

// memberResting: paused by the pool after its setup succeeded, resumable.
func memberResting(m *sandboxv1.Sandbox) bool {
	return m.Spec.State == sandboxv1.SandboxStateStopped && m.Status.Phase == sandboxv1.SandboxStopped && memberSetUp(m) &&
		!meta.IsStatusConditionFalse(m.Status.Conditions, sandboxv1.ConditionResumable)
}

// idleResting: a Running member whose session the pool's idle window (action
// Stop) ended; a claim resumes it.
func idleResting(m *sandboxv1.Sandbox) bool {
	return m.Spec.State != sandboxv1.SandboxStateStopped && m.Status.Phase == sandboxv1.SandboxIdle && memberSetUp(m) &&
		!meta.IsStatusConditionFalse(m.Status.Conditions, sandboxv1.ConditionResumable)
}

// memberSetUp: the member's filesystem finished spec.setup (or it has none) and
// it had a session.
func memberSetUp(m *sandboxv1.Sandbox) bool {
	if m.Status.SessionID == "" {
		return false
	}
	return len(m.Spec.Setup) == 0 || (m.Status.Setup != nil && m.Status.Setup.State == sandboxv1.SetupSucceeded)
}

// poolTarget is how many unclaimed members the pool keeps: spec.replicas,
// raised to the demand — the claims expected while a member is replaced,
// plus headroom — within policy.minReady and policy.maxReady (which defaults
// to spec.replicas: no growth unless asked for).
func poolTarget(spec *sandboxv1.SandboxPoolSpec, claimsPerMinute float64, replenishSeconds int32) int32 {
	replicas := int32(1)
	if spec.Replicas != nil {
		replicas = *spec.Replicas
	}
	p := spec.Policy
	if p == nil {
		return replicas
	}
	headroom := int32(defaultHeadroomPercent)
	if p.HeadroomPercent != nil {
		headroom = *p.HeadroomPercent
	}
	demand := int32(math.Ceil(claimsPerMinute / 60 * float64(replenishSeconds) * (1 + float64(headroom)/100)))
	lo, hi := int32(0), replicas
	if p.MinReady != nil {
		lo = *p.MinReady
	}
	if p.MaxReady != nil {
		hi = *p.MaxReady
	}
	return min(max(max(replicas, demand), lo), max(hi, lo))
}

// claimStats are a pool's claim figures, from the Sandboxes that name it.
type claimStats struct {
	hits, misses int32
	perMinute    float64
}

// poolClaimStats counts the claimants' Claimed conditions: hits, misses
// (PoolEmpty) and the claims of the last claimRateWindow.
func poolClaimStats(claimants []sandboxv1.Sandbox, now time.Time) claimStats {
	var s claimStats
	recent := 0
	for i := range claimants {
		c := meta.FindStatusCondition(claimants[i].Status.Conditions, sandboxv1.ConditionClaimed)
		if c == nil {
			continue
		}
		switch {
		case c.Status == "True":
			s.hits++
		case c.Reason == sandboxv1.ReasonPoolEmpty:
			s.misses++
		default:
			continue // not served for its spec: no demand on this pool
		}
		if now.Sub(c.LastTransitionTime.Time) < claimRateWindow {
			recent++
		}
	}
	s.perMinute = float64(recent) / claimRateWindow.Minutes()
	return s
}

// formatRate writes a claims-per-minute figure for status.
func formatRate(perMinute float64) string {
	return strconv.FormatFloat(math.Round(perMinute*100)/100, 'f', -1, 64)
}

// replenishSeconds is the median time from creation to Ready of the members
// that are Ready, else previous.
func replenishSeconds(members []sandboxv1.Sandbox, previous int32) int32 {
	var took []float64
	for i := range members {
		c := meta.FindStatusCondition(members[i].Status.Conditions, sandboxv1.ConditionReady)
		if c == nil || c.Status != "True" {
			continue
		}
		took = append(took, c.LastTransitionTime.Sub(members[i].CreationTimestamp.Time).Seconds())
	}
	if len(took) == 0 {
		return previous
	}
	slices.Sort(took)
	return int32(math.Ceil(max(took[len(took)/2], 0)))
}

// describeMismatch is the Claimed=False message of a spec mismatch.
func describeMismatch(pool string, fields []string) string {
	return fmt.Sprintf("Created cold: SandboxPool %q cannot serve this spec (%v differ from its template; a running member cannot take them)", pool, fields)
}
