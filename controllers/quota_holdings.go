package controllers

// What a namespace's objects hold of its quotas, read from the manager's
// cache: a Sandbox's running session (its vCPUs as started, until it stops),
// a recipe build's builder sandbox, and their sum.

import (
	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// holdingOf is what a Sandbox holds according to its status: a Vercel
// sandbox once a session was recorded, and a running session until the
// session is known to have stopped, with the vCPUs it was started with.
func holdingOf(s *sandboxv1.Sandbox) (holding, bool) {
	st := &s.Status
	if st.SessionID == "" {
		return holding{}, false
	}
	vcpus := int64(st.SessionVCPUs)
	if vcpus == 0 {
		// A session the controller did not start (an adoption), or one
		// started before status recorded its vCPUs.
		vcpus = vcpusOf(s)
	}
	return holding{uid: s.UID, remote: true, running: sessionMayRun(st.Phase) && st.Phase != sandboxv1.SandboxPending, vcpus: vcpus}, true
}

// builderHeld is the builder sandbox a SandboxSnapshot's status says it
// drives, "" when none: the build failed (its builder is deleted), another
// user of the hash drives it, or the name is held by a foreign sandbox.
func builderHeld(s *sandboxv1.SandboxSnapshot) string {
	b := s.Status.Build
	if b == nil || b.BuilderName == "" || b.Failed || b.SharedWith != "" ||
		hasCondition(s.Status.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonNameConflict) {
		return ""
	}
	return b.BuilderName
}

// recipeVCPUs is what a recipe's builder runs with.
func recipeVCPUs(s *sandboxv1.SandboxSnapshot) int64 {
	if rcp := s.Spec.Source.Recipe; rcp != nil && rcp.Resources != nil && rcp.Resources.VCPUs != nil {
		return int64(*rcp.Resources.VCPUs)
	}
	return defaultVCPUs
}

func vcpusOf(s *sandboxv1.Sandbox) int64 {
	if r := s.Spec.Resources; r != nil && r.VCPUs != nil {
		return int64(*r.VCPUs)
	}
	return defaultVCPUs
}

// used sums the holdings. Called with n.mu held.
func (n *nsLedger) used() usage {
	var u usage
	for _, h := range n.holders {
		if h.remote {
			u.sandboxes++
		}
		if h.running {
			u.running++
			u.vcpus += h.vcpus
		}
	}
	return u
}

// sessionMayRun reports whether a Sandbox in phase may have a session that
// has not stopped.
func sessionMayRun(phase sandboxv1.SandboxPhase) bool {
	switch phase {
	case sandboxv1.SandboxStopped, sandboxv1.SandboxIdle, sandboxv1.SandboxFailed:
		return false
	}
	return true
}
