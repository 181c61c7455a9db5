package controllers

import (
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// usageAnswer is what one Vercel answer the controller received anyway (a
// poll, a create, a resume, a stop) says about a Sandbox's usage. Usage is
// never the reason for a request.
type usageAnswer struct {
	// vercelName is the Vercel sandbox the answer is about.
	vercelName string
	// sandbox is the named sandbox with its cumulative totals; nil when the
	// answer did not carry it (a stop may not).
	sandbox *vercel.Sandbox
	// session is the session the answer is about; nil when it had none.
	session *vercel.Session
	// snapshot is a snapshot the answer carried (a stop's), with its size.
	snapshot *vercel.Snapshot
	// currentSnapshotID is the snapshot the next session resumes from, as
	// status records it after the answer.
	currentSnapshotID string
	now               time.Time
}

// foldUsage is the usage after answer a, given the usage status recorded
// before it. It is a pure function of the two, so a manager that restarts
// and reads the same answer again computes the same usage: status is the
// only memory.
//
// The rule, exactly-once:
//   - accounting.counted holds every finished session of the Vercel sandbox
//     accounting.vercelName. A session is added to it once, keyed by
//     accounting.countedSessionID: when it is seen ended, or, never seen
//     ended, at its last known figures when another session replaces it.
//   - Vercel's cumulative totals of the named sandbox are a floor for
//     counted, field by field: they fill in what no answer showed (sessions
//     that began and ended while the manager was down, figures Vercel
//     reported after the stop) without counting anything twice, because
//     counted never exceeds the true sums by more than Vercel's own totals.
//   - A new Vercel name (a recreation) retires counted and the last
//     session's figures into accounting.retired once.
//   - total = retired + counted + the current session unless counted (a
//     session seen ended whose sandbox totals were not in the answer).
func foldUsage(prev *sandboxv1.SandboxUsage, a usageAnswer) *sandboxv1.SandboxUsage {
	u := &sandboxv1.SandboxUsage{}
	if prev != nil {
		u = prev.DeepCopy()
	}
	if u.Accounting == nil {
		u.Accounting = &sandboxv1.UsageAccounting{}
	}
	acct := u.Accounting
	if acct.VercelName != a.vercelName {
		retire(u, a.vercelName)
	}
	if s := a.session; s != nil {
		if cur := u.Current; cur != nil && cur.SessionID != s.ID {
			// Replaced without being seen ended: count it at what was last
			// seen; the totals' floor adds what it used after that.
			countSession(acct, cur)
		}
		u.Current = sessionUsage(s, a.now)
		if u.Current.EndedAt != nil {
			countSession(acct, u.Current)
		}
	}
	if a.sandbox != nil {
		floorTotals(acct, a.sandbox, a.session)
	}
	snapshotUsage(u, a)
	u.Total = sumUsage(acct.Retired, acct.Counted, pending(u))
	u.ObservedAt = nil
	if prev != nil {
		was := prev.DeepCopy()
		was.ObservedAt = nil
		if apiequality.Semantic.DeepEqual(was, u) {
			// Nothing changed: a poll of a running session writes no
			// status (observedAt says when the figures last changed).
			return prev
		}
	}
	t := metav1.NewTime(a.now.Truncate(time.Second).UTC())
	u.ObservedAt = &t
	return u
}

// retire moves what the previous Vercel sandbox used into
// accounting.retired and starts counting name afresh.
func retire(u *sandboxv1.SandboxUsage, name string) {
	acct := u.Accounting
	if acct.VercelName != "" {
		acct.Retired = sumUsage(acct.Retired, acct.Counted, pending(u))
	}
	acct.VercelName, acct.Counted, acct.CountedSessionID = name, nil, ""
	u.Current = nil
}

// pending is the current session's usage when counted does not hold it.
func pending(u *sandboxv1.SandboxUsage) *sandboxv1.UsageAmounts {
	if u.Current == nil || u.Current.SessionID == u.Accounting.CountedSessionID {
		return nil
	}
	return &u.Current.UsageAmounts
}

// countSession adds a session to counted unless it is there already.
func countSession(acct *sandboxv1.UsageAccounting, s *sandboxv1.SessionUsage) {
	if s.SessionID == "" || s.SessionID == acct.CountedSessionID {
		return
	}
	acct.Counted = sumUsage(acct.Counted, &s.UsageAmounts)
	acct.CountedSessionID = s.SessionID
}

// floorTotals raises counted to Vercel's cumulative totals of the named
// sandbox. Vercel does not report memory × time; the duration counted this
// way is priced at the memory of the session that ended, else the
// sandbox's configured memory.
func floorTotals(acct *sandboxv1.UsageAccounting, sb *vercel.Sandbox, s *vercel.Session) {
	c := acct.Counted
	if c == nil {
		c = &sandboxv1.UsageAmounts{}
	}
	if gap := sb.TotalDurationMs - c.SessionMillis; gap > 0 {
		mem := sb.Memory
		if s != nil && s.Memory > 0 && (mem == 0 || s.Status.Terminal()) {
			mem = s.Memory
		}
		c.MemoryMBMillis += gap * mem
		c.SessionMillis = sb.TotalDurationMs
	}
	c.ActiveCPUMillis = max(c.ActiveCPUMillis, sb.TotalActiveCPUDurationMs)
	c.EgressBytes = max(c.EgressBytes, sb.TotalEgressBytes)
	c.IngressBytes = max(c.IngressBytes, sb.TotalIngressBytes)
	if *c != (sandboxv1.UsageAmounts{}) {
		acct.Counted = c
	}
}

// sessionUsage is one session's usage as Vercel reported it: final once it
// ended, else nothing yet. Vercel reports active CPU and network transfer
// only after a stop; the time a running session has run so far is left out
// too, so that a poll of a running session changes no status (and writes
// none): status.startedAt says it.
func sessionUsage(s *vercel.Session, now time.Time) *sandboxv1.SessionUsage {
	out := &sandboxv1.SessionUsage{SessionID: s.ID}
	if s.Status.Terminal() {
		out.SessionMillis = s.Duration
		if s.Duration == 0 && s.StartedAt > 0 {
			out.SessionMillis = max(max(s.StoppedAt, s.AbortedAt)-s.StartedAt, 0)
		}
		out.ActiveCPUMillis = s.ActiveCPUDurationMs
		if n := s.NetworkTransfer; n != nil {
			out.EgressBytes, out.IngressBytes = n.Egress, n.Ingress
		}
		end := max(s.StoppedAt, s.AbortedAt, s.UpdatedAt)
		t := metav1.NewTime(time.UnixMilli(end).UTC())
		if end <= 0 {
			t = metav1.NewTime(now.UTC())
		}
		out.EndedAt = &t
	}
	out.MemoryMBMillis = out.SessionMillis * s.Memory
	return out
}

// snapshotUsage records the size of the snapshot the next session resumes
// from when an answer carried it (a stop's snapshot), and forgets the size
// once another snapshot takes its place, whose size no answer gave.
func snapshotUsage(u *sandboxv1.SandboxUsage, a usageAnswer) {
	acct := u.Accounting
	if sn := a.snapshot; sn != nil && sn.ID == a.currentSnapshotID && sn.SizeBytes > 0 {
		acct.SnapshotID, u.SnapshotBytes = sn.ID, sn.SizeBytes
		return
	}
	if acct.SnapshotID != a.currentSnapshotID {
		acct.SnapshotID, u.SnapshotBytes = "", 0
	}
}

// sumUsage adds usage amounts; nil when all are nil or zero, so an unused
// object's status stays small.
func sumUsage(in ...*sandboxv1.UsageAmounts) *sandboxv1.UsageAmounts {
	var out sandboxv1.UsageAmounts
	for _, a := range in {
		if a == nil {
			continue
		}
		out.ActiveCPUMillis += a.ActiveCPUMillis
		out.SessionMillis += a.SessionMillis
		out.MemoryMBMillis += a.MemoryMBMillis
		out.EgressBytes += a.EgressBytes
		out.IngressBytes += a.IngressBytes
	}
	if out == (sandboxv1.UsageAmounts{}) {
		return nil
	}
	return &out
}

// snapshotStorage is usage u with the storage of snapshot id, of size
// bytes (a SandboxSnapshot's own snapshot); u itself when nothing changed.
func snapshotStorage(u *sandboxv1.SandboxUsage, id string, size int64, now time.Time) *sandboxv1.SandboxUsage {
	if u != nil && u.SnapshotBytes == size && u.Accounting != nil && u.Accounting.SnapshotID == id {
		return u
	}
	out := &sandboxv1.SandboxUsage{}
	if u != nil {
		out = u.DeepCopy()
	}
	if out.Accounting == nil {
		out.Accounting = &sandboxv1.UsageAccounting{}
	}
	out.Accounting.SnapshotID, out.SnapshotBytes = id, size
	t := metav1.NewTime(now.Truncate(time.Second).UTC())
	out.ObservedAt = &t
	return out
}

// forkUsage sums the lifetime usage and snapshot storage of a fork's
// children; nil when they used nothing yet. Their observedAt is the latest
// of theirs, so the sum changes only when a child's does.
func forkUsage(children []*sandboxv1.Sandbox) *sandboxv1.SandboxUsage {
	var out sandboxv1.SandboxUsage
	for _, c := range children {
		u := c.Status.Usage
		if u == nil {
			continue
		}
		out.Total = sumUsage(out.Total, u.Total)
		out.SnapshotBytes += u.SnapshotBytes
		if u.ObservedAt != nil && (out.ObservedAt == nil || out.ObservedAt.Before(u.ObservedAt)) {
			out.ObservedAt = u.ObservedAt.DeepCopy()
		}
	}
	if out.Total == nil && out.SnapshotBytes == 0 {
		return nil
	}
	return &out
}
