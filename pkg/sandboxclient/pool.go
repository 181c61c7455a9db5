package sandboxclient

import (
	"context"
	"fmt"
	"strings"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	sandboxtyped "github.com/getsentry/sandbox-controller/pkg/client/clientset/versioned/typed/api/v1alpha1"
)

func (c *Client) pools(namespace string) sandboxtyped.SandboxPoolInterface {
	return c.cs.SandboxV1alpha1().SandboxPools(namespace)
}

// ClaimOptions tune Claim.
type ClaimOptions struct {
	// Labels and Annotations are added to the new Sandbox's metadata.
	Labels, Annotations map[string]string
	// Customize changes the Sandbox built from the pool's template before it
	// is created: typically the claimant's own fields (networkPolicy, ports,
	// timeoutSeconds, deletionPolicy), which a claimed member takes on.
	Customize func(*sandboxv1.Sandbox) error
	// AllowCold lets Customize change a field a running member cannot take
	// (source, className, resources, env, persistent, setup): the Sandbox is
	// then created cold, as its Claimed condition will say. Without it such
	// a change is refused with a *ColdSpecError before anything is created.
	AllowCold bool
}

// ClaimResult says how a Sandbox with spec.poolRef got its Vercel sandbox,
// from its Claimed condition.
type ClaimResult struct {
	// Claimed is true when it took a ready member of the pool; false when it
	// was created cold.
	Claimed bool
	// Pool is the SandboxPool it names.
	Pool string
	// Member is the member Sandbox it took (empty when cold).
	Member string
	// Reason is the condition's: Claimed, or why it was created cold
	// (PoolEmpty, SpecMismatch, PoolNotFound). Empty while undecided.
	Reason string
	// Message is the condition's message (which fields mismatched, ...).
	Message string
}

func (r ClaimResult) String() string {
	switch {
	case r.Claimed:
		return fmt.Sprintf("claimed member %s of SandboxPool %s", r.Member, r.Pool)
	case r.Reason == "":
		return fmt.Sprintf("claim from SandboxPool %s not decided yet", r.Pool)
	}
	return fmt.Sprintf("created cold (%s): %s", r.Reason, r.Message)
}

// ClaimResultOf reads a Sandbox's claim outcome from its status.
func ClaimResultOf(sbx *sandboxv1.Sandbox) ClaimResult {
	var r ClaimResult
	if sbx.Spec.PoolRef != nil {
		r.Pool = sbx.Spec.PoolRef.Name
	}
	if c := meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionClaimed); c != nil {
		r.Claimed, r.Reason, r.Message = c.Status == metav1.ConditionTrue, c.Reason, c.Message
	}
	if r.Claimed && sbx.Status.Claim != nil {
		r.Member = sbx.Status.Claim.Member
	}
	return r
}

// ColdSpecError is Claim's (and SandboxFromPool's) refusal of a Sandbox
// that its pool cannot serve: Fields are the spec fields that differ from
// the template, e.g. "spec.resources".
type ColdSpecError struct {
	Pool   string
	Fields []string
}

func (e *ColdSpecError) Error() string {
	return fmt.Sprintf("SandboxPool %q cannot serve this Sandbox: %s differ from its template (a running member cannot take them), "+
		"so it would be created cold; leave them as the template has them, or allow a cold create",
		e.Pool, strings.Join(e.Fields, ", "))
}

// SandboxFromPool builds the Sandbox that claims a member of pool: the
// template's spec (so that a member can serve it) with spec.poolRef, then
// opts.Customize. It returns the fields Customize changed that a member
// cannot take; unless opts.AllowCold, those are a *ColdSpecError.
func SandboxFromPool(pool *sandboxv1.SandboxPool, name string, opts ClaimOptions) (*sandboxv1.Sandbox, []string, error) {
	tmpl := pool.Spec.Template.Spec.DeepCopy()
	sbx := &sandboxv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: pool.Namespace, Name: name, Labels: opts.Labels, Annotations: opts.Annotations},
		Spec:       *tmpl.DeepCopy(),
	}
	sbx.Spec.PoolRef = &sandboxv1.PoolRef{Name: pool.Name}
	if opts.Customize != nil {
		if err := opts.Customize(sbx); err != nil {
			return nil, nil, err
		}
	}
	fields := sandboxv1.ClaimMismatch(tmpl, &sbx.Spec)
	if len(fields) > 0 && !opts.AllowCold {
		return nil, fields, &ColdSpecError{Pool: pool.Name, Fields: fields}
	}
	return sbx, fields, nil
}

// Claim is EnsureReady for a Sandbox that takes a member of a SandboxPool:
// unless a Sandbox of that name exists (then it is used as it is, and
// heartbeated, as GetOrCreate and EnsureReady do), it reads the pool and
// creates the Sandbox from its template with spec.poolRef (SandboxFromPool);
// then it waits until the Sandbox is Ready and returns it with how it got
// its Vercel sandbox. A pool that is empty never fails a claim: the Sandbox
// is created cold and the result says why. A pool that does not exist is an
// error (there is no template to build the Sandbox from).
func (c *Client) Claim(ctx context.Context, namespace, name, pool string, opts ClaimOptions) (*sandboxv1.Sandbox, ClaimResult, error) {
	now := time.Now()
	existing, err := c.sandboxes(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		if existing.Spec.PoolRef == nil || existing.Spec.PoolRef.Name != pool {
			return nil, ClaimResult{}, fmt.Errorf("claim Sandbox %s/%s from SandboxPool %s: it exists and names %s", namespace, name, pool, poolRefText(existing))
		}
		if err := c.Heartbeat(ctx, namespace, name, now); err != nil {
			return nil, ClaimResult{}, err
		}
	case apierrors.IsNotFound(err):
		if err := c.createClaimant(ctx, namespace, name, pool, now, opts); err != nil {
			return nil, ClaimResult{}, err
		}
	default:
		return nil, ClaimResult{}, fmt.Errorf("get Sandbox %s/%s: %w", namespace, name, err)
	}
	sbx, err := c.WaitReady(ctx, namespace, name)
	if err != nil {
		return nil, ClaimResult{}, err
	}
	return sbx, ClaimResultOf(sbx), nil
}

func poolRefText(s *sandboxv1.Sandbox) string {
	if s.Spec.PoolRef == nil {
		return "no spec.poolRef"
	}
	return "spec.poolRef " + s.Spec.PoolRef.Name
}

// createClaimant creates the claiming Sandbox; a concurrent creator of the
// same name wins, as in GetOrCreate.
func (c *Client) createClaimant(ctx context.Context, namespace, name, pool string, now time.Time, opts ClaimOptions) error {
	p, err := c.pools(namespace).Get(ctx, pool, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get SandboxPool %s/%s: %w", namespace, pool, err)
	}
	sbx, _, err := SandboxFromPool(p, name, opts)
	if err != nil {
		return fmt.Errorf("claim Sandbox %s/%s: %w", namespace, name, err)
	}
	metav1.SetMetaDataAnnotation(&sbx.ObjectMeta, sandboxv1.AnnotationLastActivity, formatActivity(now))
	_, _, err = c.GetOrCreate(ctx, sbx)
	return err
}

// PoolStatus is what a SandboxPool reports about its members and claims.
type PoolStatus struct {
	// Replicas is spec.replicas, the members asked for.
	Replicas int32
	// Target is the members the pool keeps (Replicas raised by its policy).
	Target int32
	// Ready is the members a claim can take now; Members the unclaimed
	// members that exist.
	Ready, Members int32
	// ClaimsPerMinute is the claim rate over the last 10 minutes.
	ClaimsPerMinute string
	// Hits and Misses count the existing claimants that took a member or
	// found the pool empty.
	Hits, Misses int32
	// Replenish is how long a new member takes to become claimable.
	Replenish time.Duration
	// Reason and Message are the Ready condition's (Filled, Filling,
	// WaitingForSnapshot, QuotaExceeded).
	Reason, Message string
}

// PoolStatusOf summarises a SandboxPool's spec and status.
func PoolStatusOf(p *sandboxv1.SandboxPool) PoolStatus {
	s := PoolStatus{
		Replicas: 1, Target: p.Status.TargetReplicas, Ready: p.Status.ReadyReplicas, Members: p.Status.Replicas,
		ClaimsPerMinute: p.Status.ClaimsPerMinute, Hits: p.Status.Hits, Misses: p.Status.Misses,
		Replenish: time.Duration(p.Status.ReplenishSeconds) * time.Second,
	}
	if p.Spec.Replicas != nil {
		s.Replicas = *p.Spec.Replicas
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, sandboxv1.ConditionReady); c != nil {
		s.Reason, s.Message = c.Reason, c.Message
	}
	return s
}

// PoolStatus reads a SandboxPool and summarises it.
func (c *Client) PoolStatus(ctx context.Context, namespace, name string) (PoolStatus, error) {
	p, err := c.pools(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return PoolStatus{}, fmt.Errorf("get SandboxPool %s/%s: %w", namespace, name, err)
	}
	return PoolStatusOf(p), nil
}

// ScalePool sets a SandboxPool's spec.replicas through its scale
// subresource, as kubectl scale, an HPA or KEDA do (so a role with only
// sandboxpools/scale may call it). WaitPoolReady waits for the members.
func (c *Client) ScalePool(ctx context.Context, namespace, name string, replicas int32) (*autoscalingv1.Scale, error) {
	if replicas < 0 {
		return nil, fmt.Errorf("scale SandboxPool %s/%s: replicas %d is negative", namespace, name, replicas)
	}
	var out *autoscalingv1.Scale
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := c.pools(namespace).GetScale(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Replicas = replicas
		out, err = c.pools(namespace).UpdateScale(ctx, name, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("scale SandboxPool %s/%s to %d: %w", namespace, name, replicas, err)
	}
	return out, nil
}

// WaitPoolReady watches a SandboxPool until, for its current spec, it holds
// its target of ready members (Ready=True), and returns it.
func (c *Client) WaitPoolReady(ctx context.Context, namespace, name string) (*sandboxv1.SandboxPool, error) {
	return watchUntil(ctx, c.poolKind(), namespace, name, false, func(p *sandboxv1.SandboxPool) (bool, error) {
		if p.DeletionTimestamp != nil {
			return false, fmt.Errorf("SandboxPool %s/%s is being deleted", p.Namespace, p.Name)
		}
		return current(p, p.Status.Conditions) && meta.IsStatusConditionTrue(p.Status.Conditions, sandboxv1.ConditionReady), nil
	})
}

// WaitPoolFor is WaitFor for a SandboxPool: it watches until check returns
// true or an error; a missing or deleted pool is NotFound.
func (c *Client) WaitPoolFor(ctx context.Context, namespace, name string, check func(*sandboxv1.SandboxPool) (bool, error)) (*sandboxv1.SandboxPool, error) {
	return watchUntil(ctx, c.poolKind(), namespace, name, false, check)
}

// DeletePool deletes a SandboxPool and waits until it is gone: its
// unclaimed members and their Vercel sandboxes deleted. A pool that does not
// exist is not an error. Sandboxes that claimed members are not touched.
func (c *Client) DeletePool(ctx context.Context, namespace, name string) error {
	err := c.pools(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete SandboxPool %s/%s: %w", namespace, name, err)
	}
	_, err = watchUntil(ctx, c.poolKind(), namespace, name, true, nil)
	return err
}
