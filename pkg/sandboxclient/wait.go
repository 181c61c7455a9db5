package sandboxclient

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// ConditionError says that the state a wait asked for will not come without
// a change: the object reports a terminal phase. Reason and Message are the
// condition's, as `kubectl describe` shows them.
type ConditionError struct {
	// Kind, Namespace and Name identify the object.
	Kind, Namespace, Name string
	// Phase is the object's status.phase.
	Phase string
	// Type, Reason and Message are the condition that settled it (usually Ready).
	Type, Reason, Message string
}

func (e *ConditionError) Error() string {
	return fmt.Sprintf("%s %s/%s is %s: %s=False %s: %s", e.Kind, e.Namespace, e.Name, e.Phase, e.Type, e.Reason, e.Message)
}

// ErrStopped is returned by WaitReady for a Sandbox whose spec.state is
// Stopped: it cannot become Ready until it is resumed.
var ErrStopped = errors.New("spec.state is Stopped; resume it first")

// conditionError builds a ConditionError from the object's condition typ.
func conditionError(kind string, obj metav1.Object, phase string, conds []metav1.Condition, typ string) *ConditionError {
	e := &ConditionError{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), Phase: phase, Type: typ}
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		e.Reason, e.Message = c.Reason, c.Message
	}
	return e
}

// current says whether the object's Ready condition was written for its
// current spec (generation): a status about an older spec says nothing about
// whether the new one will succeed. Every controller stamps Ready with the
// generation it acted on.
func current(obj metav1.Object, conds []metav1.Condition) bool {
	c := meta.FindStatusCondition(conds, sandboxv1.ConditionReady)
	return c != nil && c.ObservedGeneration >= obj.GetGeneration()
}

// summary describes an object's state for an error: phase and conditions.
func summary(phase string, conds []metav1.Condition) string {
	return strings.Join(append([]string{"phase " + valueOr(phase, "unset")}, conditionTexts(conds)...), "; ")
}

// conditionTexts are the conditions as `Type=Status Reason: message`.
func conditionTexts(conds []metav1.Condition) []string {
	var parts []string
	for _, c := range conds {
		s := fmt.Sprintf("%s=%s", c.Type, c.Status)
		if c.Reason != "" {
			s += " " + c.Reason
		}
		if c.Message != "" {
			s += ": " + c.Message
		}
		parts = append(parts, s)
	}
	return parts
}

func valueOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// object is what the waits need of each kind.
type object interface {
	runtime.Object
	metav1.Object
}

// kind describes one of the kinds for watchUntil.
type kind[T object] struct {
	name     string // Sandbox, SandboxSnapshot, SandboxFork
	resource string // sandboxes, ...
	empty    T      // an empty object, for the informer's type
	list     func(ctx context.Context, namespace string, opts metav1.ListOptions) (runtime.Object, error)
	watch    func(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error)
	summary  func(T) string
}

func (c *Client) sandboxKind() kind[*sandboxv1.Sandbox] {
	return kind[*sandboxv1.Sandbox]{
		empty: &sandboxv1.Sandbox{},
		name:  "Sandbox", resource: "sandboxes",
		list: func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
			return c.sandboxes(ns).List(ctx, o)
		},
		watch: func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
			return c.sandboxes(ns).Watch(ctx, o)
		},
		summary: func(s *sandboxv1.Sandbox) string { return summary(string(s.Status.Phase), s.Status.Conditions) },
	}
}

func (c *Client) snapshotKind() kind[*sandboxv1.SandboxSnapshot] {
	return kind[*sandboxv1.SandboxSnapshot]{
		empty: &sandboxv1.SandboxSnapshot{},
		name:  "SandboxSnapshot", resource: "sandboxsnapshots",
		list: func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
			return c.snapshots(ns).List(ctx, o)
		},
		watch: func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
			return c.snapshots(ns).Watch(ctx, o)
		},
		summary: func(s *sandboxv1.SandboxSnapshot) string {
			return summary(string(s.Status.Phase), s.Status.Conditions)
		},
	}
}

func (c *Client) forkKind() kind[*sandboxv1.SandboxFork] {
	return kind[*sandboxv1.SandboxFork]{
		empty: &sandboxv1.SandboxFork{},
		name:  "SandboxFork", resource: "sandboxforks",
		list: func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
			return c.forks(ns).List(ctx, o)
		},
		watch: func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
			return c.forks(ns).Watch(ctx, o)
		},
		summary: func(f *sandboxv1.SandboxFork) string {
			return fmt.Sprintf("%s; %d/%d children ready", summary(string(f.Status.Phase), f.Status.Conditions),
				f.Status.ReadyReplicas, f.Status.Replicas)
		},
	}
}

func (c *Client) poolKind() kind[*sandboxv1.SandboxPool] {
	return kind[*sandboxv1.SandboxPool]{
		empty: &sandboxv1.SandboxPool{},
		name:  "SandboxPool", resource: "sandboxpools",
		list: func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
			return c.pools(ns).List(ctx, o)
		},
		watch: func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
			return c.pools(ns).Watch(ctx, o)
		},
		summary: func(p *sandboxv1.SandboxPool) string {
			return strings.Join(append([]string{fmt.Sprintf("%d/%d members ready", p.Status.ReadyReplicas, p.Status.TargetReplicas)},
				conditionTexts(p.Status.Conditions)...), "; ")
		},
	}
}

// watchUntil watches one object until check says done (returning it) or
// fails. A missing object is a NotFound error, unless gone is true: then
// its absence (at the start or a delete event) is what is waited for, and
// the result is nil. The watch is client-go's UntilWithSync: a list, then a
// watch from its resourceVersion, re-established when the server ends it.
func watchUntil[T object](ctx context.Context, k kind[T], namespace, name string, gone bool, check func(T) (bool, error)) (T, error) {
	var zero, last T
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return k.list(ctx, namespace, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return k.watch(ctx, namespace, o)
		},
	}
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: "sandbox.sentry.io", Resource: k.resource}, name)
	seen := false
	precondition := func(store cache.Store) (bool, error) {
		_, exists, err := store.GetByKey(namespace + "/" + name)
		if err != nil {
			return false, err
		}
		switch {
		case !exists && gone:
			return true, nil
		case !exists:
			return false, notFound
		}
		return false, nil
	}
	ev, err := watchtools.UntilWithSync(ctx, lw, k.empty, precondition, func(ev watch.Event) (bool, error) {
		switch ev.Type {
		case watch.Deleted:
			if gone {
				return true, nil
			}
			return false, notFound
		case watch.Added, watch.Modified:
			obj, ok := ev.Object.(T)
			if !ok {
				return false, fmt.Errorf("watch %s: unexpected object %T", k.resource, ev.Object)
			}
			last, seen = obj, true
			if gone {
				return false, nil
			}
			return check(obj)
		case watch.Error:
			return false, apierrors.FromObject(ev.Object)
		}
		return false, nil
	})
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			what := "nothing yet"
			if seen {
				what = k.summary(last)
			}
			return zero, fmt.Errorf("%s %s/%s: %w (last seen: %s)", k.name, namespace, name, ctxErr, what)
		}
		return zero, err
	}
	if ev == nil || ev.Type == watch.Deleted {
		return zero, nil
	}
	return ev.Object.(T), nil
}
