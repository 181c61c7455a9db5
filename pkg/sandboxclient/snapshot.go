package sandboxclient

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// SnapshotOptions tune Snapshot.
type SnapshotOptions struct {
	// KeepSourceRunning resumes the Sandbox right after the capture; without
	// it the Sandbox stays Stopped (reason Snapshotted) until a heartbeat or
	// a Resume.
	KeepSourceRunning bool
	// ExpirationSeconds is how long Vercel keeps the snapshot; Vercel's
	// default when 0.
	ExpirationSeconds int64
	// Labels are put on the SandboxSnapshot.
	Labels map[string]string
}

// Snapshot creates a SandboxSnapshot named snapshotName that captures the
// running session of the Sandbox sandboxName. WaitSnapshotReady waits for
// it; a Sandbox (spec.source.snapshotRef) or a Fork can then boot from it.
func (c *Client) Snapshot(ctx context.Context, namespace, sandboxName, snapshotName string, opts SnapshotOptions) (*sandboxv1.SandboxSnapshot, error) {
	snap := &sandboxv1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: snapshotName, Labels: opts.Labels},
		Spec: sandboxv1.SandboxSnapshotSpec{
			Source:            sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: sandboxName}},
			KeepSourceRunning: opts.KeepSourceRunning,
		},
	}
	if opts.ExpirationSeconds > 0 {
		snap.Spec.ExpirationSeconds = &opts.ExpirationSeconds
	}
	created, err := c.snapshots(namespace).Create(ctx, snap, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create SandboxSnapshot %s/%s: %w", namespace, snapshotName, err)
	}
	return created, nil
}

// WaitSnapshotReady watches a SandboxSnapshot until it is ready to use, and
// returns it. It fails with a *ConditionError when the snapshot Failed (the
// capture or a build step failed) or Expired.
func (c *Client) WaitSnapshotReady(ctx context.Context, namespace, name string) (*sandboxv1.SandboxSnapshot, error) {
	return watchUntil(ctx, c.snapshotKind(), namespace, name, false, snapshotReady)
}

// WaitSnapshotFor is WaitFor for a SandboxSnapshot: it watches until check
// returns true or an error; a missing or deleted snapshot is NotFound.
func (c *Client) WaitSnapshotFor(ctx context.Context, namespace, name string, check func(*sandboxv1.SandboxSnapshot) (bool, error)) (*sandboxv1.SandboxSnapshot, error) {
	return watchUntil(ctx, c.snapshotKind(), namespace, name, false, check)
}

func snapshotReady(s *sandboxv1.SandboxSnapshot) (bool, error) {
	if s.DeletionTimestamp != nil {
		return false, fmt.Errorf("SandboxSnapshot %s/%s is being deleted", s.Namespace, s.Name)
	}
	if !current(s, s.Status.Conditions) {
		return false, nil
	}
	if s.Status.ReadyToUse && meta.IsStatusConditionTrue(s.Status.Conditions, sandboxv1.ConditionReady) {
		return true, nil
	}
	switch s.Status.Phase {
	case sandboxv1.SnapshotFailed, sandboxv1.SnapshotExpired:
		return false, conditionError("SandboxSnapshot", s, string(s.Status.Phase), s.Status.Conditions, sandboxv1.ConditionReady)
	}
	return false, nil
}

// DeleteSnapshot deletes a SandboxSnapshot and waits until it is gone (its
// Vercel snapshot deleted or retained, per spec.deletionPolicy). A snapshot
// that does not exist is not an error.
func (c *Client) DeleteSnapshot(ctx context.Context, namespace, name string) error {
	err := c.snapshots(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete SandboxSnapshot %s/%s: %w", namespace, name, err)
	}
	_, err = watchUntil(ctx, c.snapshotKind(), namespace, name, true, nil)
	return err
}
