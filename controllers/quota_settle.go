package controllers

// Settling a Sandbox's account after each of its reconciles: what it holds
// now, whether it still waits, and which waiters the capacity it freed may
// let through.

import (
	"context"

	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// Settle records what a Sandbox holds after a reconcile, from the status the
// reconcile left (nil: the Sandbox is gone). Capacity it released wakes the
// waiters.
func (l *QuotaLedger) Settle(ctx context.Context, key types.NamespacedName, sbx *sandboxv1.Sandbox) {
	if l == nil {
		return
	}
	n := l.namespace(key.Namespace)
	n.mu.Lock()
	changed, wake, err := l.settleLocked(ctx, n, key, sbx)
	n.mu.Unlock()
	if err != nil {
		// Built on the next use; what this reconcile left is in status.
		return
	}
	if changed {
		l.wakeQuotas(ctx, key.Namespace)
	}
	l.wakeSandboxes(key.Namespace, wake)
}

// settleLocked records what the Sandbox of key holds and whether it still
// waits; changed says what it holds changed, and wake is the waiters to wake.
// Called with n.mu held.
func (l *QuotaLedger) settleLocked(ctx context.Context, n *nsLedger, key types.NamespacedName, sbx *sandboxv1.Sandbox) (changed bool, wake []string, err error) {
	if err := l.build(ctx, key.Namespace, n); err != nil {
		return false, nil, err
	}
	old, had := n.holders[key.Name]
	h, holds := settledHolding(old, had, sbx)
	if holds {
		n.holders[key.Name] = h
	} else {
		delete(n.holders, key.Name)
	}
	waited := n.stopWaiting(key.Name, sbx)
	if releases(old, had, h, holds) || waited {
		// Freed capacity, or a waiter that no longer waits (started, gone,
		// stopped): the capacity it was owed may go to a later one.
		wake = waiterNames(n)
	}
	return had != holds || old != h, wake, nil
}

// settledHolding is what sbx holds after its reconcile (nil: it is gone),
// given what the ledger had for it (old, if had).
func settledHolding(old holding, had bool, sbx *sandboxv1.Sandbox) (holding, bool) {
	if sbx == nil {
		return holding{}, false
	}
	h, holds := holdingOf(sbx)
	if had && old.uid == sbx.UID && old.running && !holds && !sbx.DeletionTimestamp.IsZero() {
		// Being deleted before its create was answered: it may run until
		// the finalizer is done.
		return old, true
	}
	return h, holds
}

// releases reports whether going from old (if had) to h (if holds) frees
// capacity: a running session, or a Vercel sandbox.
func releases(old holding, had bool, h holding, holds bool) bool {
	return had && old.running && (!holds || !h.running) || had && old.remote && !holds
}

// stopWaiting drops the Sandbox name from the waiters once sbx no longer
// waits (started, gone, stopped), and reports whether it did.
func (n *nsLedger) stopWaiting(name string, sbx *sandboxv1.Sandbox) bool {
	if _, ok := n.waiters[name]; !ok || sbx != nil && isWaiting(sbx) {
		return false
	}
	delete(n.waiters, name)
	return true
}

// isWaiting reports whether a Sandbox waits for quota.
func isWaiting(s *sandboxv1.Sandbox) bool {
	return hasCondition(s.Status.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonQuotaExceeded)
}
