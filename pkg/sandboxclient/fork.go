package sandboxclient

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// ForkSource is where a fork's children start from: exactly one of a running
// Sandbox (captured now, into the fork's own SandboxSnapshot) or a
// SandboxSnapshot.
type ForkSource struct {
	Sandbox  string
	Snapshot string
}

// ForkOptions tune Fork.
type ForkOptions struct {
	// KeepSourceRunning resumes a source Sandbox right after the capture.
	KeepSourceRunning bool
	// Template sets the children's labels, annotations and spec overrides.
	Template sandboxv1.SandboxForkTemplate
}

// Fork creates a SandboxFork named forkName: replicas new Sandboxes (named
// <forkName>-<index>) from one point in time of source, labelled with their
// lineage (sandbox.sentry.io/fork and the source labels). WaitForkReady
// waits for every child to be Ready; ForkChildren lists them.
func (c *Client) Fork(ctx context.Context, namespace, forkName string, source ForkSource, replicas int32, opts ForkOptions) (*sandboxv1.SandboxFork, error) {
	if (source.Sandbox == "") == (source.Snapshot == "") {
		return nil, fmt.Errorf("fork %s/%s: set exactly one of ForkSource.Sandbox and ForkSource.Snapshot", namespace, forkName)
	}
	fork := &sandboxv1.SandboxFork{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: forkName},
		Spec: sandboxv1.SandboxForkSpec{
			Replicas:          &replicas,
			KeepSourceRunning: opts.KeepSourceRunning,
			Template:          opts.Template,
		},
	}
	if source.Sandbox != "" {
		fork.Spec.Source.SandboxRef = &sandboxv1.LocalObjectReference{Name: source.Sandbox}
	} else {
		fork.Spec.Source.SnapshotRef = &sandboxv1.LocalObjectReference{Name: source.Snapshot}
	}
	created, err := c.forks(namespace).Create(ctx, fork, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create SandboxFork %s/%s: %w", namespace, forkName, err)
	}
	return created, nil
}

// Scale sets a SandboxFork's spec.replicas (a merge patch): the controller
// creates the missing children or deletes the highest-indexed ones.
// WaitForkReady waits for the result.
func (c *Client) Scale(ctx context.Context, namespace, forkName string, replicas int32) (*sandboxv1.SandboxFork, error) {
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"replicas": replicas}})
	f, err := c.forks(namespace).Patch(ctx, forkName, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("scale SandboxFork %s/%s to %d: %w", namespace, forkName, replicas, err)
	}
	return f, nil
}

// WaitForkReady watches a SandboxFork until, for its current spec, it has
// spec.replicas children and all of them are Ready, and returns it. It fails
// with a *ConditionError when the fork Failed (its source snapshot failed or
// the source stayed missing past spec.failureDeadlineSeconds).
func (c *Client) WaitForkReady(ctx context.Context, namespace, name string) (*sandboxv1.SandboxFork, error) {
	return watchUntil(ctx, c.forkKind(), namespace, name, false, forkReady)
}

// WaitForkFor is WaitFor for a SandboxFork: it watches until check returns
// true or an error; a missing or deleted fork is NotFound.
func (c *Client) WaitForkFor(ctx context.Context, namespace, name string, check func(*sandboxv1.SandboxFork) (bool, error)) (*sandboxv1.SandboxFork, error) {
	return watchUntil(ctx, c.forkKind(), namespace, name, false, check)
}

func forkReady(f *sandboxv1.SandboxFork) (bool, error) {
	if f.DeletionTimestamp != nil {
		return false, fmt.Errorf("SandboxFork %s/%s is being deleted", f.Namespace, f.Name)
	}
	if !current(f, f.Status.Conditions) {
		return false, nil
	}
	want := int32(1)
	if f.Spec.Replicas != nil {
		want = *f.Spec.Replicas
	}
	switch f.Status.Phase {
	case sandboxv1.ForkReady:
		return f.Status.Replicas == want && f.Status.ReadyReplicas == want && len(f.Status.Children) == int(want), nil
	case sandboxv1.ForkFailed:
		return false, conditionError("SandboxFork", f, string(f.Status.Phase), f.Status.Conditions, sandboxv1.ConditionReady)
	}
	return false, nil
}

// ForkChildren lists the Sandboxes a SandboxFork created (by its
// sandbox.sentry.io/fork label).
func (c *Client) ForkChildren(ctx context.Context, namespace, forkName string) ([]sandboxv1.Sandbox, error) {
	sel := labels.SelectorFromSet(labels.Set{sandboxv1.LabelFork: forkName}).String()
	list, err := c.sandboxes(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list children of SandboxFork %s/%s: %w", namespace, forkName, err)
	}
	return list.Items, nil
}

// DeleteFork deletes a SandboxFork and waits until it is gone, its children
// and its own snapshot deleted (or released, per spec.deletionPolicy). A fork
// that does not exist is not an error.
func (c *Client) DeleteFork(ctx context.Context, namespace, name string) error {
	err := c.forks(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete SandboxFork %s/%s: %w", namespace, name, err)
	}
	_, err = watchUntil(ctx, c.forkKind(), namespace, name, true, nil)
	return err
}
