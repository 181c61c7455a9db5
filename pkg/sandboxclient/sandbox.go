package sandboxclient

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// GetOrCreate creates sbx unless a Sandbox of its namespace and name exists,
// and returns the one in the cluster and whether this call created it. An
// existing Sandbox is returned as it is, whatever its spec: one name is one
// sandbox (a conversation that resumes gets its files back).
func (c *Client) GetOrCreate(ctx context.Context, sbx *sandboxv1.Sandbox) (*sandboxv1.Sandbox, bool, error) {
	created, err := c.sandboxes(sbx.Namespace).Create(ctx, sbx, metav1.CreateOptions{})
	if err == nil {
		return created, true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, false, fmt.Errorf("create Sandbox %s/%s: %w", sbx.Namespace, sbx.Name, err)
	}
	existing, err := c.sandboxes(sbx.Namespace).Get(ctx, sbx.Name, metav1.GetOptions{})
	if err != nil {
		return nil, false, fmt.Errorf("get Sandbox %s/%s: %w", sbx.Namespace, sbx.Name, err)
	}
	return existing, false, nil
}

// EnsureReady is what a client does when work starts: GetOrCreate, a
// heartbeat (which wakes a Sandbox that went Idle or whose session stopped),
// then WaitReady.
func (c *Client) EnsureReady(ctx context.Context, sbx *sandboxv1.Sandbox) (*sandboxv1.Sandbox, error) {
	sbx = sbx.DeepCopy()
	now := time.Now()
	metav1.SetMetaDataAnnotation(&sbx.ObjectMeta, sandboxv1.AnnotationLastActivity, formatActivity(now))
	_, created, err := c.GetOrCreate(ctx, sbx)
	if err != nil {
		return nil, err
	}
	if !created {
		if err := c.Heartbeat(ctx, sbx.Namespace, sbx.Name, now); err != nil {
			return nil, err
		}
	}
	return c.WaitReady(ctx, sbx.Namespace, sbx.Name)
}

// WaitReady watches a Sandbox until its status, for its current spec, is
// Ready=True, and returns it. It fails with a *ConditionError when the
// Sandbox is Failed (a setup command failed, the Vercel sandbox was deleted
// outside the operator, a name conflict, a session that failed to start) or
// Vercel refused the spec as invalid; with ErrStopped when spec.state is
// Stopped; and with NotFound when the Sandbox does not exist or is deleted.
// An Idle Sandbox is woken by a heartbeat, not by waiting: see EnsureReady.
func (c *Client) WaitReady(ctx context.Context, namespace, name string) (*sandboxv1.Sandbox, error) {
	return watchUntil(ctx, c.sandboxKind(), namespace, name, false, sandboxReady)
}

// WaitFor watches a Sandbox until check returns true (done) or an error,
// for waits this package does not name (e.g. `kubectl sandbox wait --for`).
// check sees every version of the object, starting with the current one;
// the error of a missing or deleted Sandbox is NotFound.
func (c *Client) WaitFor(ctx context.Context, namespace, name string, check func(*sandboxv1.Sandbox) (bool, error)) (*sandboxv1.Sandbox, error) {
	return watchUntil(ctx, c.sandboxKind(), namespace, name, false, check)
}

// sandboxReady is WaitReady's test of one observed Sandbox.
func sandboxReady(s *sandboxv1.Sandbox) (bool, error) {
	if s.DeletionTimestamp != nil {
		return false, fmt.Errorf("sandbox %s/%s is being deleted", s.Namespace, s.Name)
	}
	if s.Spec.State == sandboxv1.SandboxStateStopped {
		return false, fmt.Errorf("sandbox %s/%s: %w", s.Namespace, s.Name, ErrStopped)
	}
	if !current(s, s.Status.Conditions) {
		return false, nil // the status is about an older spec
	}
	if meta.IsStatusConditionTrue(s.Status.Conditions, sandboxv1.ConditionReady) {
		return true, nil
	}
	if s.Status.Phase == sandboxv1.SandboxFailed {
		return false, conditionError("Sandbox", s, string(s.Status.Phase), s.Status.Conditions, sandboxv1.ConditionReady)
	}
	if synced := meta.FindStatusCondition(s.Status.Conditions, sandboxv1.ConditionSynced); synced != nil &&
		synced.Status == metav1.ConditionFalse && synced.Reason == sandboxv1.ReasonInvalid {
		return false, conditionError("Sandbox", s, string(s.Status.Phase), s.Status.Conditions, sandboxv1.ConditionSynced)
	}
	return false, nil
}

// Pause sets spec.state to Stopped. On a persistent Sandbox (the default)
// the session stops and Vercel keeps the filesystem until Resume; on a
// non-persistent one it ends the sandbox for good. WaitStopped waits for it.
func (c *Client) Pause(ctx context.Context, namespace, name string) (*sandboxv1.Sandbox, error) {
	return c.setState(ctx, namespace, name, sandboxv1.SandboxStateStopped)
}

// Resume sets spec.state to Running: a paused Sandbox starts a new session
// from its filesystem. WaitReady waits for it.
func (c *Client) Resume(ctx context.Context, namespace, name string) (*sandboxv1.Sandbox, error) {
	return c.setState(ctx, namespace, name, sandboxv1.SandboxStateRunning)
}

func (c *Client) setState(ctx context.Context, namespace, name string, state sandboxv1.SandboxState) (*sandboxv1.Sandbox, error) {
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"state": state}})
	s, err := c.sandboxes(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("set Sandbox %s/%s spec.state to %s: %w", namespace, name, state, err)
	}
	return s, nil
}

// WaitStopped watches a Sandbox until its session is stopped for its current
// spec (phase Stopped or Idle), and returns it. It fails with a
// *ConditionError when the Sandbox is Failed.
func (c *Client) WaitStopped(ctx context.Context, namespace, name string) (*sandboxv1.Sandbox, error) {
	return watchUntil(ctx, c.sandboxKind(), namespace, name, false, func(s *sandboxv1.Sandbox) (bool, error) {
		if !current(s, s.Status.Conditions) {
			return false, nil
		}
		switch s.Status.Phase {
		case sandboxv1.SandboxStopped, sandboxv1.SandboxIdle:
			return true, nil
		case sandboxv1.SandboxFailed:
			return false, conditionError("Sandbox", s, string(s.Status.Phase), s.Status.Conditions, sandboxv1.ConditionReady)
		}
		return false, nil
	})
}

// Delete deletes a Sandbox and waits until it is gone: the controller has
// deleted its Vercel sandbox (or retained it, per spec.deletionPolicy) and
// removed its finalizer. A Sandbox that does not exist is not an error.
func (c *Client) Delete(ctx context.Context, namespace, name string) error {
	err := c.sandboxes(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Sandbox %s/%s: %w", namespace, name, err)
	}
	_, err = watchUntil(ctx, c.sandboxKind(), namespace, name, true, nil)
	return err
}
