package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels on the members of a SandboxPool (values are label values of the
// names: the name itself, or for a name over 63 characters its first 46
// characters, "-" and 16 hex digits of its SHA-256).
const (
	// LabelPool names the SandboxPool a member Sandbox belongs to.
	LabelPool = "sandbox.sentry.io/pool"
	// LabelClaimedBy is set on a pool member by the Sandbox that claims it,
	// to that Sandbox's UID, with an update at the member's resourceVersion:
	// the API server lets exactly one claimant's update through. A member
	// with this label is no longer handed out, scaled down or replaced by the
	// pool, and its own reconciler leaves its Vercel sandbox to the claimant.
	LabelClaimedBy = "sandbox.sentry.io/claimed-by"
	// AnnotationClaimant is set with LabelClaimedBy to the claimant's name,
	// so the pool can tell a claim whose claimant was deleted midway.
	AnnotationClaimant = "sandbox.sentry.io/claimant"
)

// SandboxPool condition types and reasons (besides Ready and Synced).
const (
	// ReasonPoolFilled is set on Ready=True: the pool holds at least its
	// target of ready members.
	ReasonPoolFilled = "Filled"
	// ReasonPoolFilling is set on Ready=False while fewer members than the
	// target are ready (after a claim, a scale-up, a snapshot rebuild).
	ReasonPoolFilling = "Filling"
	// ReasonPoolWaitingForSnapshot is set on Ready=False while the template's
	// spec.source.snapshotRef names a SandboxSnapshot that is not ready to
	// use: no member is created until it is.
	ReasonPoolWaitingForSnapshot = "WaitingForSnapshot"
)

// Sandbox claim condition: set on a Sandbox with spec.poolRef.
const (
	// ConditionClaimed says how a Sandbox with spec.poolRef got its Vercel
	// sandbox: True (reason Claimed) when it took a pool member, False when
	// it was created cold, with the reason why (PoolEmpty, SpecMismatch,
	// PoolNotFound). It is set once, on the first reconcile, and not revised.
	ConditionClaimed = "Claimed"
	// ReasonClaimed is set on Claimed=True: the Sandbox took a ready member
	// of its pool; the message names the member and its Vercel sandbox.
	ReasonClaimed = "Claimed"
	// ReasonPoolEmpty is set on Claimed=False when the pool had no ready,
	// current member to hand out: the Sandbox was created cold.
	ReasonPoolEmpty = "PoolEmpty"
	// ReasonSpecMismatch is set on Claimed=False when the Sandbox's spec asks
	// for something a running member cannot take (another source, class,
	// resources, env, persistence or setup than the pool's template): it was
	// created cold. The message names the fields.
	ReasonSpecMismatch = "SpecMismatch"
	// ReasonPoolNotFound is set on Claimed=False when spec.poolRef names no
	// SandboxPool in the namespace (or one being deleted): it was created
	// cold.
	ReasonPoolNotFound = "PoolNotFound"
	// ReasonHandedOver is the reason of the Normal event a claimed member's
	// deletion records: its Vercel sandbox now carries its claimant's owner
	// tags, so it was left to the claimant (not deleted, and no
	// OwnedElsewhere warning).
	ReasonHandedOver = "HandedOver"
)

// PoolRef names the SandboxPool a Sandbox claims a member of.
type PoolRef struct {
	// name of a SandboxPool in this namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ClaimStatus records the pool member a Sandbox took.
type ClaimStatus struct {
	// pool is the SandboxPool the member came from.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Pool string `json:"pool"`
	// member is the name of the member Sandbox that was taken (deleted once
	// its Vercel sandbox is this object's).
	// +required
	// +kubebuilder:validation:MaxLength=253
	Member string `json:"member"`
	// memberUID is the member's UID. The Vercel sandbox's name derives from
	// the member's namespace, name and UID, as every Vercel name derives
	// from its object; it is used only while the Vercel sandbox carries this
	// object's owner tags (docs/security.md).
	// +required
	// +kubebuilder:validation:MaxLength=64
	MemberUID string `json:"memberUID"`
	// claimedAt is when the member was taken.
	// +optional
	ClaimedAt *metav1.Time `json:"claimedAt,omitempty"`
}

// SandboxPoolTemplate shapes the members.
type SandboxPoolTemplate struct {
	// metadata: labels and annotations added to every member (none with the
	// prefix sandbox.sentry.io/).
	// +optional
	Metadata ForkChildMetadata `json:"metadata,omitempty"`
	// spec of every member, as a Sandbox's. A claim is served only when its
	// source, className, resources, env, persistent and setup equal this
	// spec's; networkPolicy, ports, timeoutSeconds and the rest are the
	// claimant's own. timeoutSeconds, idle and state are the pool's
	// (spec.idle, spec.memberState) while a member waits. spec.source,
	// spec.className and spec.persistent are immutable, as on a Sandbox:
	// a new source is a new pool (a rebuilt SandboxSnapshot is not).
	// +required
	Spec SandboxSpec `json:"spec"`
}

// PoolPolicy sizes a pool from the demand it sees.
// +kubebuilder:validation:XValidation:rule="!has(self.minReady) || !has(self.maxReady) || self.minReady <= self.maxReady",message="spec.policy.minReady must not exceed spec.policy.maxReady"
type PoolPolicy struct {
	// minReady is the fewest members the pool keeps, whatever spec.replicas
	// says. Defaults to 0.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MinReady *int32 `json:"minReady,omitempty"`
	// maxReady is the most members the pool keeps: the demand target never
	// goes above it. Defaults to spec.replicas (no growth beyond it).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MaxReady *int32 `json:"maxReady,omitempty"`
	// headroomPercent is added to the demand: the target is
	// ceil(claims per second × replenish seconds × (1 + headroomPercent/100)),
	// the members claimed while one is being replaced, plus a margin for
	// bursts. Defaults to 50.
	// +optional
	// +kubebuilder:default=50
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	HeadroomPercent *int32 `json:"headroomPercent,omitempty"`
}

// PoolIdleAction says what happens to a member nobody claimed for a while.
// +kubebuilder:validation:Enum=Stop;Delete
type PoolIdleAction string

// Pool idle actions.
const (
	// PoolIdleStop stops a Running member's session (Vercel keeps its
	// filesystem): it stays in the pool and is resumed when claimed.
	PoolIdleStop PoolIdleAction = "Stop"
	// PoolIdleDelete deletes the member and its Vercel sandbox; the pool
	// creates a fresh one.
	PoolIdleDelete PoolIdleAction = "Delete"
)

// PoolIdle is what happens to members nobody claims.
type PoolIdle struct {
	// afterSeconds a member waits unclaimed before action applies: 60 to
	// 86400; defaults to 3600. For Running members it is also their session
	// window, so a claim gets a session with up to this long left before the
	// claimant's own timeoutSeconds is applied.
	// +optional
	// +kubebuilder:default=3600
	// +kubebuilder:validation:Minimum=60
	// +kubebuilder:validation:Maximum=86400
	AfterSeconds *int64 `json:"afterSeconds,omitempty"`
	// action: Delete (default) deletes the member and its Vercel sandbox and
	// replaces it; Stop stops a Running member's session, which a claim
	// resumes (as for memberState Stopped).
	// +optional
	// +kubebuilder:default=Delete
	Action PoolIdleAction `json:"action,omitempty"`
}

// SandboxPoolSpec is the desired state of a SandboxPool.
// +kubebuilder:validation:XValidation:rule="!has(self.template.spec.source.adopt)",message="spec.template.spec.source.adopt: a pool creates its members; it cannot adopt one Vercel sandbox for each",fieldPath=".template.spec.source"
// +kubebuilder:validation:XValidation:rule="!has(self.template.spec.source.snapshotID)",message="spec.template.spec.source.snapshotID: the manager creates a pool's members and may not use raw snapshot ids for you (docs/security.md); use snapshotRef",fieldPath=".template.spec.source"
// +kubebuilder:validation:XValidation:rule="!has(self.template.spec.source.image) || self.template.spec.source.image in ['vercel/sandbox/universal', 'vercel/sandbox/node:22', 'vercel/sandbox/node:24', 'vercel/sandbox/node:26', 'vercel/sandbox/python:3.14', 'vercel/sandbox/ubuntu', 'vercel/sandbox/arch']",message="spec.template.spec.source.image: the manager creates a pool's members and may not use a team's own image for you (docs/security.md); use one of Vercel's managed images or a snapshotRef",fieldPath=".template.spec.source.image"
// +kubebuilder:validation:XValidation:rule="!has(self.template.spec.poolRef)",message="spec.template.spec.poolRef: members are created, not claimed from a pool",fieldPath=".template.spec.poolRef"
// +kubebuilder:validation:XValidation:rule="!has(self.template.spec.rewind)",message="spec.template.spec.rewind: members have no history to rewind; rewind a claimed Sandbox instead",fieldPath=".template.spec.rewind"
// +kubebuilder:validation:XValidation:rule="!has(self.template.spec.shutdownTime)",message="spec.template.spec.shutdownTime: an absolute end of life cannot apply to members created over time; use spec.idle",fieldPath=".template.spec.shutdownTime"
type SandboxPoolSpec struct {
	// template of the members.
	// +required
	Template SandboxPoolTemplate `json:"template"`
	// replicas is the number of members the pool keeps ready to claim
	// (unclaimed); spec.policy may raise it with demand. `kubectl scale`,
	// an HPA or KEDA drive it through the scale subresource.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Replicas *int32 `json:"replicas,omitempty"`
	// policy raises the member count with the observed claim rate, between
	// minReady and maxReady. The pool keeps exactly spec.replicas when unset.
	// +optional
	Policy *PoolPolicy `json:"policy,omitempty"`
	// memberState: Running (default) keeps members' sessions running — a
	// claim is a re-tag and a policy update, the fastest, billed as running
	// vCPUs for as long as a member waits; Stopped pauses each member once
	// its setup succeeded — only snapshot storage is billed while it waits,
	// and a claim resumes it (a session start, about a second on Vercel).
	// +optional
	// +kubebuilder:default=Running
	MemberState SandboxState `json:"memberState,omitempty"`
	// idle: what happens to members nobody claims for a while.
	// +optional
	Idle *PoolIdle `json:"idle,omitempty"`
}

// SandboxPoolStatus is the observed state of a SandboxPool.
type SandboxPoolStatus struct {
	// replicas is the number of unclaimed members that exist.
	// +optional
	Replicas int32 `json:"replicas"`
	// readyReplicas is the number of members a claim can take now: Ready
	// (or, for Stopped members, paused after setup) and from the current
	// snapshot.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`
	// targetReplicas is the number of members the pool keeps: spec.replicas
	// raised by the demand policy, within minReady and maxReady.
	// +optional
	TargetReplicas int32 `json:"targetReplicas"`
	// readyText is readyReplicas/targetReplicas, for `kubectl get`.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	ReadyText string `json:"readyText,omitempty"`
	// selector selects the members (used by the scale subresource).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Selector string `json:"selector,omitempty"`
	// claimsPerMinute is the claim rate over the last 10 minutes, counted
	// from the Sandboxes that name this pool (hits and misses), as a decimal
	// number such as "0.5".
	// +optional
	// +kubebuilder:validation:MaxLength=16
	ClaimsPerMinute string `json:"claimsPerMinute,omitempty"`
	// replenishSeconds is how long a new member takes to become claimable:
	// the median over the current members.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ReplenishSeconds int32 `json:"replenishSeconds,omitempty"`
	// hits counts the Sandboxes naming this pool that took a member
	// (Claimed=True), among those that exist.
	// +optional
	Hits int32 `json:"hits"`
	// misses counts the Sandboxes naming this pool that found it empty
	// (Claimed=False, PoolEmpty) and were created cold, among those that
	// exist.
	// +optional
	Misses int32 `json:"misses"`
	// snapshotID is the Vercel snapshot the members boot from, for a
	// template with spec.source.snapshotRef: members booted from another are
	// not handed out and are replaced.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SnapshotID string `json:"snapshotID,omitempty"`
	// lastError is the last error met, kept until the next success.
	// +optional
	LastError *ErrorStatus `json:"lastError,omitempty"`
	// conditions: Ready (at least targetReplicas members are ready) and
	// Synced (the last reconcile succeeded).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// observedGeneration is the spec generation the controller last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// lastHandledReconcileAt is the value of the
	// sandbox.sentry.io/reconcile-requested-at annotation handled last.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`
}

// SandboxPool keeps warm Sandboxes (members) that a Sandbox with
// spec.poolRef takes instead of creating its own.
// +genclient
// +genclient:method=GetScale,verb=get,subresource=scale,result=k8s.io/api/autoscaling/v1.Scale
// +genclient:method=UpdateScale,verb=update,subresource=scale,input=k8s.io/api/autoscaling/v1.Scale,result=k8s.io/api/autoscaling/v1.Scale
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=sbxpool,categories=sentry-sandboxes
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.readyText`,description="Claimable members / target"
// +kubebuilder:printcolumn:name="Claims/min",type=string,JSONPath=`.status.claimsPerMinute`,description="Claims per minute over the last 10 minutes"
// +kubebuilder:printcolumn:name="Hits",type=integer,JSONPath=`.status.hits`,description="Claims served by a member"
// +kubebuilder:printcolumn:name="Misses",type=integer,JSONPath=`.status.misses`,description="Claims created cold because the pool was empty"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SandboxPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec SandboxPoolSpec `json:"spec"`
	// status is the observed state.
	// +optional
	Status SandboxPoolStatus `json:"status,omitempty"`
}

// SandboxPoolList is a list of SandboxPools.
// +kubebuilder:object:root=true
type SandboxPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxPool `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &SandboxPool{}, &SandboxPoolList{})
}

// SandboxPoolFinalizer keeps a SandboxPool until its unclaimed members (and
// with them their Vercel sandboxes) are deleted.
const SandboxPoolFinalizer = "sandbox.sentry.io/pool-finalizer"
