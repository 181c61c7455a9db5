package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels on every child Sandbox of a SandboxFork: the lineage a client selects
// on. Each value is the object's name, or, for a name longer than 63
// characters (the limit of a label value), its first 46 characters, "-" and
// 16 hex digits of its SHA-256: status.selector of the fork gives the exact
// selector.
const (
	// LabelFork names the SandboxFork that created the Sandbox.
	LabelFork = "sandbox.sentry.io/fork"
	// LabelForkIndex is the child's index within its fork (0, 1, …).
	LabelForkIndex = "sandbox.sentry.io/fork-index"
	// LabelSourceSandbox names the Sandbox the fork was captured from.
	LabelSourceSandbox = "sandbox.sentry.io/source-sandbox"
	// LabelSourceSnapshot names the SandboxSnapshot the children boot from.
	LabelSourceSnapshot = "sandbox.sentry.io/source-snapshot"
)

// SandboxFork condition reasons (besides the shared ones in common_types.go).
const (
	// ReasonWaitingForSource is set on Ready=False while the source Sandbox or
	// SandboxSnapshot does not exist or is not usable yet.
	ReasonWaitingForSource = "WaitingForSource"
	// ReasonCapturingSource is set on Ready=False while the fork's own
	// SandboxSnapshot of the source Sandbox is being taken.
	ReasonCapturingSource = "CapturingSource"
	// ReasonCreatingChildren is set on Ready=False while children are created
	// or are not all Ready yet.
	ReasonCreatingChildren = "CreatingChildren"
	// ReasonAllReady is set on Ready=True: every child Sandbox is Ready.
	ReasonAllReady = "AllReady"
	// ReasonSourceFailed is set on Ready=False (phase Failed) when the source
	// snapshot failed, or when the source was missing or not capturable for
	// longer than spec.failureDeadlineSeconds.
	ReasonSourceFailed = "SourceFailed"
	// ReasonSourceSpecUnknown is set on Ready=False (phase Pending) when
	// spec.template.inherit is SourceSpec but the SandboxSnapshot records no
	// spec of the Sandbox it was taken from (imported by id, or captured by a
	// controller version that did not record it). Children are not created
	// until the fork sets spec.template.inherit to None.
	ReasonSourceSpecUnknown = "SourceSpecUnknown"
	// ReasonSecretNotPermitted is set on Ready=False (phase Pending) when the
	// children would inherit a reference to a Secret (env or injected header
	// of the source's spec) that the fork's creator may not get, or the fork
	// records no creator (annotation AnnotationCreatedBy). No child is
	// created; the message names the Secrets and the user.
	ReasonSecretNotPermitted = "SecretNotPermitted"
)

// AnnotationCreatedBy records who created a SandboxFork, as JSON
// {"user": "...", "groups": [...]} taken from the create request. The
// MutatingAdmissionPolicy created-by.sandbox.sentry.io
// (config/admission/created-by.yaml) sets it and keeps it on updates; the
// ValidatingAdmissionPolicy of the same file refuses any other value. The
// fork controller lets children inherit a Secret reference only when this
// user may get that Secret (a SubjectAccessReview).
const AnnotationCreatedBy = "sandbox.sentry.io/created-by"

// ForkInheritance says what the children of a SandboxFork inherit.
// +kubebuilder:validation:Enum=SourceSpec;None
type ForkInheritance string

// Fork inheritance modes.
const (
	// InheritSourceSpec: children get the spec of the Sandbox the snapshot was
	// captured from, as it was at capture time (status.sourceSpec of the
	// SandboxSnapshot), with template.spec on top. A recipe snapshot has no
	// source Sandbox: children get template.spec alone. A snapshot whose
	// source spec is unknown is refused (reason SourceSpecUnknown).
	InheritSourceSpec ForkInheritance = "SourceSpec"
	// InheritNone: children get template.spec alone; fields it leaves unset
	// take the Sandbox defaults (full internet access, no env).
	InheritNone ForkInheritance = "None"
)

// SandboxForkPhase is a one-word summary of a SandboxFork's state.
// +kubebuilder:validation:Enum=Pending;Capturing;Creating;Ready;Failed
type SandboxForkPhase string

// SandboxFork phases.
const (
	ForkPending   SandboxForkPhase = "Pending"
	ForkCapturing SandboxForkPhase = "Capturing"
	ForkCreating  SandboxForkPhase = "Creating"
	ForkReady     SandboxForkPhase = "Ready"
	ForkFailed    SandboxForkPhase = "Failed"
)

// SandboxForkSource is the point in time the children start from. Exactly one
// field is set.
// +kubebuilder:validation:XValidation:rule="[has(self.sandboxRef), has(self.snapshotRef)].filter(x, x).size() == 1",message="spec.source: exactly one of sandboxRef or snapshotRef must be set"
type SandboxForkSource struct {
	// sandboxRef forks a Sandbox in this namespace: the fork first captures a
	// SandboxSnapshot of it that the fork owns, so every child starts from the
	// same state, including files written since its last automatic snapshot.
	// Capturing stops the source's session unless keepSourceRunning is set.
	// +optional
	SandboxRef *LocalObjectReference `json:"sandboxRef,omitempty"`
	// snapshotRef starts the children from a SandboxSnapshot in this namespace.
	// +optional
	SnapshotRef *LocalObjectReference `json:"snapshotRef,omitempty"`
}

// SandboxForkTemplate shapes the children.
type SandboxForkTemplate struct {
	// metadata: labels and annotations added to every child.
	// +optional
	Metadata ForkChildMetadata `json:"metadata,omitempty"`
	// spec fields that override those inherited from the source Sandbox.
	// +optional
	Spec SandboxOverrides `json:"spec,omitempty"`
	// inherit: SourceSpec (default) gives the children the spec of the Sandbox
	// the snapshot was captured from, frozen at capture time (resources,
	// ports, timeoutSeconds, env, networkPolicy, persistent; never setup,
	// state or shutdownTime), under spec's overrides; a snapshot that does not
	// record that spec (imported by id) is refused with reason
	// SourceSpecUnknown. None gives the children spec alone.
	// +optional
	Inherit ForkInheritance `json:"inherit,omitempty"`
}

// SourceSandboxSpec is the part of a Sandbox's spec that a fork's children
// inherit, recorded when the Sandbox is captured. Nothing absolute in time
// (shutdownTime) and nothing already in the snapshot (setup) is kept. Env and
// header values from Secrets are kept as references, never as values.
type SourceSandboxSpec struct {
	// resources of the source's sessions.
	// +optional
	Resources *SandboxResources `json:"resources,omitempty"`
	// ports the source exposed.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=15
	Ports []int32 `json:"ports,omitempty"`
	// timeoutSeconds is the source's idle window.
	// +optional
	TimeoutSeconds *int64 `json:"timeoutSeconds,omitempty"`
	// env of the source.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Env []EnvVar `json:"env,omitempty"`
	// networkPolicy of the source; unset means full internet access.
	// +optional
	NetworkPolicy *NetworkPolicy `json:"networkPolicy,omitempty"`
	// persistent: whether the source kept its filesystem across sessions.
	// +optional
	Persistent *bool `json:"persistent,omitempty"`
}

// ForkChildMetadata is the metadata every child gets.
type ForkChildMetadata struct {
	// labels added to every child (the lineage labels are always set too): at
	// most 64, none with the prefix sandbox.sentry.io/ (the controller's);
	// keys are label keys (an optional DNS prefix and '/', then a name of at
	// most 63 characters), values at most 63 characters. (The
	// characters of a value are checked when a child is created: a check here
	// would exceed the API server's validation cost budget.)
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !format.qualifiedName().validate(k).hasValue())",message="spec.template.metadata.labels: each key must be a valid label key ([prefix/]name, name at most 63 characters)"
	// +kubebuilder:validation:XValidation:rule="self.all(k, self[k].size() <= 63)",message="spec.template.metadata.labels: each value must be at most 63 characters"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('sandbox.sentry.io/'))",message="spec.template.metadata.labels: keys with the prefix sandbox.sentry.io/ are the controller's (the lineage and class labels) and may not be set on children"
	Labels map[string]string `json:"labels,omitempty"`
	// annotations added to every child: at most 64, keys like label keys but
	// none with the prefix sandbox.sentry.io/ (the controller's and its
	// users' intents: abandon-remote, paused, last-activity, ...), values at
	// most 4096 characters.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !format.qualifiedName().validate(k).hasValue())",message="spec.template.metadata.annotations: each key must be a valid annotation key ([prefix/]name, name at most 63 characters)"
	// +kubebuilder:validation:XValidation:rule="self.all(k, self[k].size() <= 4096)",message="spec.template.metadata.annotations: each value must be at most 4096 characters"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('sandbox.sentry.io/'))",message="spec.template.metadata.annotations: keys with the prefix sandbox.sentry.io/ are the controller's (such as sandbox.sentry.io/abandon-remote and sandbox.sentry.io/paused) and may not be set on children"
	Annotations map[string]string `json:"annotations,omitempty"`
}

// SandboxOverrides are the Sandbox spec fields a fork may set on its
// children; each one set replaces the source Sandbox's value.
type SandboxOverrides struct {
	// resources of the children's sessions.
	// +optional
	Resources *SandboxResources `json:"resources,omitempty"`
	// env of the children (replaces the source's list when set).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Env []EnvVar `json:"env,omitempty"`
	// timeoutSeconds is the children's idle window, 1 to 86400 (24 h).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	TimeoutSeconds *int64 `json:"timeoutSeconds,omitempty"`
	// ports the children expose (at most 15, 1024–65535, not 23456).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=15
	// +kubebuilder:validation:items:Minimum=1024
	// +kubebuilder:validation:items:Maximum=65535
	// +kubebuilder:validation:XValidation:rule="!self.exists(p, p == 23456)",message="spec.template.spec.ports must not contain 23456 (reserved by Vercel)"
	Ports []int32 `json:"ports,omitempty"`
	// networkPolicy of the children.
	// +optional
	NetworkPolicy *NetworkPolicy `json:"networkPolicy,omitempty"`
	// state of the children: Running or Stopped.
	// +optional
	State SandboxState `json:"state,omitempty"`
}

// SandboxForkSpec is the desired state of a SandboxFork.
// +kubebuilder:validation:XValidation:rule="self.source == oldSelf.source",message="spec.source is immutable",fieldPath=".source"
// +kubebuilder:validation:XValidation:rule="has(self.className) == has(oldSelf.className) && (!has(self.className) || self.className == oldSelf.className)",message="spec.className is immutable",fieldPath=".className"
type SandboxForkSpec struct {
	// source of the fork: exactly one of sandboxRef or snapshotRef. Immutable.
	// +required
	Source SandboxForkSource `json:"source"`
	// className is the SandboxClass whose Vercel credentials, project and
	// defaults this object uses; the default class (annotation
	// sandbox.sentry.io/is-default-class) when unset, else the manager's own
	// credentials. Immutable.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	ClassName *string `json:"className,omitempty"`
	// replicas is the number of child Sandboxes, named <fork>-<index>. Scaling
	// down deletes the highest indexes first. `kubectl scale` works.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Replicas *int32 `json:"replicas,omitempty"`
	// template: labels, annotations and Sandbox spec overrides for the children.
	// +optional
	Template SandboxForkTemplate `json:"template,omitempty"`
	// keepSourceRunning resumes the source Sandbox after the capture (which
	// stops its session). Only meaningful with sandboxRef.
	// +optional
	KeepSourceRunning bool `json:"keepSourceRunning,omitempty"`
	// failureDeadlineSeconds: a source that is missing or not capturable for
	// this long fails the fork. 1 to 604800 (7 days); defaults to 600.
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=604800
	FailureDeadlineSeconds *int64 `json:"failureDeadlineSeconds,omitempty"`
	// deletionPolicy: Delete (default) deletes the children and the fork's own
	// snapshot with the fork; Retain releases them (they stay, unowned).
	// +optional
	// +kubebuilder:default=Delete
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
}

// ForkChildStatus is the state of one child Sandbox.
type ForkChildStatus struct {
	// name of the child Sandbox.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// phase of the child.
	// +optional
	Phase SandboxPhase `json:"phase,omitempty"`
	// ready is true when the child's Ready condition is True.
	// +optional
	Ready bool `json:"ready,omitempty"`
}

// SandboxForkStatus is the observed state of a SandboxFork.
type SandboxForkStatus struct {
	// phase: Pending, Capturing, Creating, Ready or Failed.
	// +optional
	Phase SandboxForkPhase `json:"phase,omitempty"`
	// snapshotRef names the SandboxSnapshot the children boot from (the fork's
	// own capture, or spec.source.snapshotRef).
	// +optional
	SnapshotRef *LocalObjectReference `json:"snapshotRef,omitempty"`

	// waitingSince is when the fork began waiting for its source to exist
	// or become ready; spec.failureDeadlineSeconds counts from it. Cleared
	// once the source is ready, so a later wait (a rebuilt snapshot) gets
	// the whole deadline again.
	// +optional
	WaitingSince *metav1.Time `json:"waitingSince,omitempty"`
	// replicas is the number of children that exist.
	// +optional
	Replicas int32 `json:"replicas"`
	// readyReplicas is the number of children that are Ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`
	// readyText is readyReplicas/spec.replicas, for `kubectl get`.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	ReadyText string `json:"readyText,omitempty"`
	// selector selects the children (used by the scale subresource).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Selector string `json:"selector,omitempty"`
	// children, by index.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	Children []ForkChildStatus `json:"children,omitempty"`
	// lastError is the last error met, kept until the next success.
	// +optional
	LastError *ErrorStatus `json:"lastError,omitempty"`
	// conditions: Ready (every child Ready) and Synced (the last reconcile
	// succeeded).
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
	// usage sums the status.usage.total and snapshotBytes of the children
	// that exist now; current and accounting stay unset (the children
	// have one session each, see their own status.usage).
	// +optional
	Usage *SandboxUsage `json:"usage,omitempty"`
}

// SandboxFork makes N new Sandboxes from one point in time of a Sandbox or a
// SandboxSnapshot, labelled with their lineage.
// +genclient
// +genclient:method=GetScale,verb=get,subresource=scale,result=k8s.io/api/autoscaling/v1.Scale
// +genclient:method=UpdateScale,verb=update,subresource=scale,input=k8s.io/api/autoscaling/v1.Scale,result=k8s.io/api/autoscaling/v1.Scale
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=sbxfork,categories=sentry-sandboxes
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`,description="Lifecycle phase"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.readyText`,description="Ready children / desired replicas"
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.status.snapshotRef.name`,description="SandboxSnapshot the children boot from"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SandboxFork struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec SandboxForkSpec `json:"spec"`
	// status is the observed state.
	// +optional
	Status SandboxForkStatus `json:"status,omitempty"`
}

// SandboxForkList is a list of SandboxForks.
// +kubebuilder:object:root=true
type SandboxForkList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxFork `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &SandboxFork{}, &SandboxForkList{})
}
