package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SandboxSnapshot condition reasons (besides the shared ones in common_types.go).
const (
	// ReasonSnapshotReady is set on Ready=True: the Vercel snapshot exists and
	// sandboxes can boot from it.
	ReasonSnapshotReady = "SnapshotReady"
	// ReasonSourceNotFound is set on Ready=False while spec.source.sandboxRef (or
	// a recipe's baseSnapshotRef) names an object that does not exist.
	ReasonSourceNotFound = "SourceNotFound"
	// ReasonSourceNotRunning is set on Ready=False while the Sandbox to capture
	// has no running session; the capture starts once it runs.
	ReasonSourceNotRunning = "SourceNotRunning"
	// ReasonWaitingForBase is set on Ready=False while a recipe's
	// baseSnapshotRef is not ready to use.
	ReasonWaitingForBase = "WaitingForBase"
	// ReasonBaseSnapshotNotFound is set on ResolvedRefs=False and Ready=False
	// while a recipe's baseSnapshotRef names a SandboxSnapshot that does not
	// exist; past the manager's --reference-deadline the object is Failed.
	ReasonBaseSnapshotNotFound = "BaseSnapshotNotFound"
	// ReasonBaseSnapshotCycle is set on ResolvedRefs=False and Ready=False
	// while following baseSnapshotRef from this object leads back to an
	// object already visited, so no base can ever be built; past the
	// manager's --reference-deadline the object is Failed.
	ReasonBaseSnapshotCycle = "BaseSnapshotCycle"
	// ReasonBaseSnapshotFailed is set on ResolvedRefs=False and Ready=False
	// while a recipe's baseSnapshotRef names a SandboxSnapshot that is
	// Failed; past the manager's --reference-deadline this one is Failed too.
	ReasonBaseSnapshotFailed = "BaseSnapshotFailed"
	// ReasonCapturing is set on Ready=False while Vercel captures the source.
	ReasonCapturing = "Capturing"
	// ReasonCaptureFailed is set on Ready=False when the captured session
	// stopped before a snapshot of it could be taken.
	ReasonCaptureFailed = "CaptureFailed"
	// ReasonBuilding is set on Ready=False while a recipe build runs (here or
	// for another SandboxSnapshot with the same content hash).
	ReasonBuilding = "Building"
	// ReasonBuildFailed is set on Ready=False when a build step failed or a
	// time budget ran out; the message names the step, exit code and output tail.
	ReasonBuildFailed = "BuildFailed"
	// ReasonExpired is set on Ready=False when Vercel expired or deleted the
	// snapshot. Recipe snapshots rebuild; others stay Expired.
	ReasonExpired = "Expired"
	// ReasonRebuilding is set on Ready=True while a recipe snapshot older than
	// spec.maxAgeSeconds is rebuilt; the old snapshot is served meanwhile.
	ReasonRebuilding = "Rebuilding"
)

// Labels the SandboxSnapshot controller uses. After a capture stopped or
// resumed a Sandbox's session it sets the Sandbox's
// AnnotationReconcileRequestedAt, so the Sandbox is observed again at once.
const (
	// LabelContentHash carries the first 12 hex digits of status.contentHash on
	// every recipe SandboxSnapshot: it finds the users of a shared build (whose
	// full hash is then compared) and is the short hash `kubectl get` shows.
	LabelContentHash = "sandbox.sentry.io/content-hash"
)

// SandboxSnapshotPhase is a one-word summary of a SandboxSnapshot's state.
// +kubebuilder:validation:Enum=Pending;Building;Capturing;Ready;Failed;Expired;Deleting
type SandboxSnapshotPhase string

// SandboxSnapshot phases.
const (
	SnapshotPending   SandboxSnapshotPhase = "Pending"
	SnapshotBuilding  SandboxSnapshotPhase = "Building"
	SnapshotCapturing SandboxSnapshotPhase = "Capturing"
	SnapshotReady     SandboxSnapshotPhase = "Ready"
	SnapshotFailed    SandboxSnapshotPhase = "Failed"
	SnapshotExpired   SandboxSnapshotPhase = "Expired"
	SnapshotDeleting  SandboxSnapshotPhase = "Deleting"
)

// SnapshotOrigin says who made a SandboxSnapshot's Vercel snapshot.
// +kubebuilder:validation:Enum=Captured;Built;Imported
type SnapshotOrigin string

// Snapshot origins.
const (
	// SnapshotCaptured: the operator took it of a Sandbox's session
	// (spec.source.sandboxRef).
	SnapshotCaptured SnapshotOrigin = "Captured"
	// SnapshotBuilt: the operator took it of a recipe build's session.
	SnapshotBuilt SnapshotOrigin = "Built"
	// SnapshotImported: it was made outside this object (spec.source.snapshotID);
	// the operator never deletes it.
	SnapshotImported SnapshotOrigin = "Imported"
)

// SnapshotProvenance records where a Vercel snapshot came from. Vercel
// snapshots carry no tags of their own; the session they were taken of
// belongs to a Vercel sandbox that does.
type SnapshotProvenance struct {
	// origin: Captured or Built (the operator made it, and deletes it per
	// spec.deletionPolicy), or Imported (made elsewhere: never deleted by the
	// operator, whatever spec.deletionPolicy says).
	// +required
	Origin SnapshotOrigin `json:"origin"`
	// sourceSessionID is the Vercel session the snapshot was taken of, as
	// Vercel reports it (the snapshot's sourceSessionId).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SourceSessionID string `json:"sourceSessionID,omitempty"`
	// sourceVercelName is the Vercel sandbox of that session, for Captured
	// and Built snapshots: one the operator created, tagged with its owner.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	SourceVercelName string `json:"sourceVercelName,omitempty"`
}

// SandboxSnapshotSource is where the snapshot comes from. Exactly one field is set.
// +kubebuilder:validation:XValidation:rule="[has(self.sandboxRef), has(self.snapshotID), has(self.recipe)].filter(x, x).size() == 1",message="spec.source: exactly one of sandboxRef, snapshotID or recipe must be set"
type SandboxSnapshotSource struct {
	// sandboxRef captures a Sandbox in this namespace once, as soon as it runs.
	// Vercel stops the captured session (see spec.keepSourceRunning).
	// +optional
	SandboxRef *LocalObjectReference `json:"sandboxRef,omitempty"`
	// snapshotID imports an existing Vercel snapshot: the controller observes
	// it and reports its size and expiry, and never deletes it (whatever
	// spec.deletionPolicy says). Setting it needs the RBAC verb use on
	// vercelsnapshots.sandbox.sentry.io in the namespace (docs/security.md).
	// +optional
	// +kubebuilder:validation:Pattern=`^(snap_[A-Za-z0-9]{28}|vhs_[a-z0-9]{28})$`
	// +kubebuilder:validation:MaxLength=33
	SnapshotID *string `json:"snapshotID,omitempty"`
	// recipe builds the snapshot: boot a builder sandbox from the base, clone
	// the repositories, run the setup commands, capture. Recipes are
	// content-addressed: SandboxSnapshots of a namespace with equal recipes
	// share one build and one Vercel snapshot.
	// +optional
	Recipe *SnapshotRecipe `json:"recipe,omitempty"`
}

// SnapshotRecipe describes how to build a snapshot.
// +kubebuilder:validation:XValidation:rule="has(self.runtime) != has(self.baseSnapshotRef)",message="spec.source.recipe: exactly one of runtime or baseSnapshotRef must be set"
type SnapshotRecipe struct {
	// runtime is the Vercel-managed base image to start from.
	// +optional
	Runtime *Runtime `json:"runtime,omitempty"`
	// baseSnapshotRef layers this recipe on another SandboxSnapshot in this
	// namespace; the build waits until it is ready, and a change of the base
	// changes this recipe's content hash.
	// +optional
	BaseSnapshotRef *LocalObjectReference `json:"baseSnapshotRef,omitempty"`
	// repositories are cloned, each into its path under /vercel/sandbox, before
	// the setup commands run.
	// +optional
	// +listType=map
	// +listMapKey=path
	// +kubebuilder:validation:MaxItems=16
	Repositories []RecipeRepository `json:"repositories,omitempty"`
	// env is given to every setup command (not to the clone steps).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Env []RecipeEnvVar `json:"env,omitempty"`
	// setup commands run in order after the clones. Each runs detached; the
	// build survives a manager restart and continues from its last finished step.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Setup []RecipeCommand `json:"setup,omitempty"`
	// rebuildEpoch is any string; changing it forces a new build.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	RebuildEpoch string `json:"rebuildEpoch,omitempty"`
	// resources of the builder sandbox. Not part of the content hash.
	// +optional
	Resources *SandboxResources `json:"resources,omitempty"`
	// timeoutSeconds is the total time budget of a build (default 1800). Not
	// part of the content hash.
	// +optional
	// +kubebuilder:validation:Minimum=60
	// +kubebuilder:validation:Maximum=18000
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`
}

// RecipeRepository is a git repository checked out by a build.
type RecipeRepository struct {
	// url of the repository (https, http, git, ssh or file scheme). It must not
	// carry credentials; use credentials instead.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(https?|git|ssh|file)://[^@\s]+$`
	URL string `json:"url"`
	// revision (branch, tag or commit) to check out; the default branch when
	// empty. No whitespace, and it must not start with '-'.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[^-\s\x00-\x1f\x7f][^\s\x00-\x1f\x7f]*$`
	Revision string `json:"revision,omitempty"`
	// path relative to /vercel/sandbox to clone into.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`
	// +kubebuilder:validation:XValidation:rule="!self.split('/').exists(s, s == '..')",message="path must stay under /vercel/sandbox"
	Path string `json:"path"`
	// depth of a shallow clone; a full clone when unset.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Depth *int32 `json:"depth,omitempty"`
	// credentials for a private repository: a Secret in this namespace with the
	// keys "username" and "password". They are given to the clone step only:
	// never to setup commands, never stored in the snapshot or in status. Not
	// part of the content hash.
	// +optional
	Credentials *GitCredentials `json:"credentials,omitempty"`
}

// RecipeEnvVar is a plain environment variable of the setup commands. Values
// are part of the content hash; do not put secrets here.
type RecipeEnvVar struct {
	// name of the variable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Name string `json:"name"`
	// value of the variable. It may not contain a NUL character, which no
	// process environment can carry. (A pattern, not a CEL rule: recipes
	// nest env lists in setup steps, and a rule over every value would
	// exceed the API server's validation cost budget.)
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	// +kubebuilder:validation:Pattern=`^[^\x00]*$`
	Value string `json:"value,omitempty"`
}

// RecipeCommand is one setup step of a build.
// +kubebuilder:validation:XValidation:rule="!(has(self.user) && has(self.sudo) && self.sudo)",message="user and sudo are exclusive: a step runs as root (sudo) or as user",fieldPath=".user"
type RecipeCommand struct {
	// name labels the step in status and events; defaults to the command. Not
	// part of the content hash.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name,omitempty"`
	// command is the executable to run (resolved through PATH).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Command string `json:"command"`
	// args passed to the command.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:items:MaxLength=8192
	Args []string `json:"args,omitempty"`
	// cwd is the working directory; /vercel/sandbox when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/`
	Cwd string `json:"cwd,omitempty"`
	// env of this step, overlaying the recipe's env.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Env []RecipeEnvVar `json:"env,omitempty"`
	// sudo runs the command as root.
	// +optional
	Sudo bool `json:"sudo,omitempty"`
	// user runs the command as this Linux user of the sandbox, the way the
	// official SDK's asUser does: as `sudo -u USER -- bash -c ...`, in cwd
	// (the user's home, /home/USER or /root, when cwd is empty), with the
	// step's env passed as `env NAME=VALUE` arguments (as the SDK does:
	// sudo resets the environment). The user must exist when the step runs:
	// create it in an earlier step (e.g. command useradd, args
	// ["-m", "USER"], sudo true); if it does not, sudo answers "unknown
	// user" and the step fails with exit code 1. Exclusive with sudo.
	// Part of the content hash.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_-]{0,31}$`
	User string `json:"user,omitempty"`
	// timeoutSeconds is this step's time budget (default 600); the step is
	// killed and the build fails when it runs out. Not part of the content hash.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=18000
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`
}

// SandboxSnapshotSpec is the desired state of a SandboxSnapshot.
// +kubebuilder:validation:XValidation:rule="self.source == oldSelf.source",message="spec.source is immutable",fieldPath=".source"
// +kubebuilder:validation:XValidation:rule="!has(self.maxAgeSeconds) || has(self.source.recipe)",message="spec.maxAgeSeconds applies to recipe snapshots only",fieldPath=".maxAgeSeconds"
// +kubebuilder:validation:XValidation:rule="has(self.className) == has(oldSelf.className) && (!has(self.className) || self.className == oldSelf.className)",message="spec.className is immutable",fieldPath=".className"
type SandboxSnapshotSpec struct {
	// source of the snapshot: exactly one of sandboxRef, snapshotID or recipe. Immutable.
	// +required
	Source SandboxSnapshotSource `json:"source"`
	// className is the SandboxClass whose Vercel credentials, project and
	// defaults this object uses; the default class (annotation
	// sandbox.sentry.io/is-default-class) when unset, else the manager's own
	// credentials. Immutable.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	ClassName *string `json:"className,omitempty"`
	// keepSourceRunning resumes the captured Sandbox after a sandboxRef capture
	// (Vercel stops a session when it snapshots it).
	// +optional
	KeepSourceRunning bool `json:"keepSourceRunning,omitempty"`
	// expirationSeconds is how long after its last use Vercel keeps a snapshot
	// this object creates: 0 (never expire) or 3600 (one hour) to 31536000
	// (365 days); Vercel's default (30 days) when unset. A recipe snapshot is
	// rebuilt when it expires, so a shorter time would rebuild it nonstop.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=31536000
	// +kubebuilder:validation:XValidation:rule="self == 0 || self >= 3600",message="spec.expirationSeconds must be 0 (never expire) or at least 3600 (one hour)"
	ExpirationSeconds *int64 `json:"expirationSeconds,omitempty"`
	// maxAgeSeconds rebuilds a recipe snapshot once it is older; the old
	// snapshot is served until the new one is ready, then retired. 3600 (one
	// hour) to 31536000 (365 days): a build takes minutes, and every
	// SandboxSnapshot sharing the build rebuilds at the smallest maxAgeSeconds
	// among them.
	// +optional
	// +kubebuilder:validation:Minimum=3600
	// +kubebuilder:validation:Maximum=31536000
	MaxAgeSeconds *int64 `json:"maxAgeSeconds,omitempty"`
	// deletionPolicy: Delete (default) deletes the Vercel snapshot with this
	// object, unless another SandboxSnapshot still uses it; Retain leaves it.
	// An imported snapshot (source.snapshotID) is always retained.
	// +optional
	// +kubebuilder:default=Delete
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
}

// SnapshotCaptureStatus records a sandboxRef capture. It is written before
// Vercel is asked, so a restarted controller finds the snapshot it asked for
// instead of capturing twice.
type SnapshotCaptureStatus struct {
	// vercelName of the captured Vercel sandbox.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	VercelName string `json:"vercelName,omitempty"`
	// sessionID that is captured.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SessionID string `json:"sessionID,omitempty"`
	// requestedAt is when the capture was requested.
	// +optional
	RequestedAt *metav1.Time `json:"requestedAt,omitempty"`
	// resumedSessionID is the session the source resumed in (keepSourceRunning).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ResumedSessionID string `json:"resumedSessionID,omitempty"`
}

// SnapshotBuildStatus is the progress of a recipe build.
type SnapshotBuildStatus struct {
	// step is what the build does now, e.g. "clone app", "setup 2/3 (install)", "capture".
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Step string `json:"step,omitempty"`
	// completedSteps counts the clone and setup steps that finished.
	// +optional
	CompletedSteps int32 `json:"completedSteps,omitempty"`
	// totalSteps is the number of clone and setup steps.
	// +optional
	TotalSteps int32 `json:"totalSteps,omitempty"`
	// startedAt is when the build began.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// stepStartedAt is when the current step began.
	// +optional
	StepStartedAt *metav1.Time `json:"stepStartedAt,omitempty"`
	// builderName is the Vercel sandbox the build runs in, named from the content hash.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	BuilderName string `json:"builderName,omitempty"`
	// sessionID of the builder.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SessionID string `json:"sessionID,omitempty"`
	// commandID of the step running now.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	CommandID string `json:"commandID,omitempty"`
	// attempts counts the builds started for this object.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// replaces is the snapshot id a rebuild replaces (expired or older than maxAgeSeconds).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Replaces string `json:"replaces,omitempty"`
	// replacesSourceVercelName is the builder the replaced snapshot was taken
	// of, which the check before retiring it needs once that builder is gone.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ReplacesSourceVercelName string `json:"replacesSourceVercelName,omitempty"`
	// replacesProof is snapshotProof as it was for the replaced snapshot,
	// which retiring it may need once its builder is gone.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ReplacesProof string `json:"replacesProof,omitempty"`
	// sharedWith names the SandboxSnapshot that runs the build this object waits for.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SharedWith string `json:"sharedWith,omitempty"`
	// failed is true when the build in builderName failed; it is not retried
	// until the recipe, and so the content hash, changes (rebuildEpoch forces it).
	// +optional
	Failed bool `json:"failed,omitempty"`
	// durationSeconds of the last finished build.
	// +optional
	DurationSeconds *int64 `json:"durationSeconds,omitempty"`
	// completedAt is when the last build finished.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
}

// SandboxSnapshotStatus is the observed state of a SandboxSnapshot.
type SandboxSnapshotStatus struct {
	// phase summarises the state: Pending, Building, Capturing, Ready, Failed,
	// Expired or Deleting.
	// +optional
	Phase SandboxSnapshotPhase `json:"phase,omitempty"`
	// readyToUse is true while sandboxes can boot from snapshotID.
	// +optional
	ReadyToUse bool `json:"readyToUse,omitempty"`
	// snapshotID is the Vercel snapshot id.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SnapshotID string `json:"snapshotID,omitempty"`
	// sizeBytes of the snapshot.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// createdAt is when Vercel took the snapshot.
	// +optional
	CreatedAt *metav1.Time `json:"createdAt,omitempty"`
	// expiresAt is when Vercel deletes the snapshot unless it is used; unset = never.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// provenance records who made the Vercel snapshot and from which session.
	// +optional
	Provenance *SnapshotProvenance `json:"provenance,omitempty"`
	// snapshotProof is the manager's keyed signature (an HMAC under its status
	// digest key) that a read of Vercel showed snapshotID to be taken of a
	// sandbox the operator made for this object. It is recorded while that
	// sandbox can still be read, and lets the finalizer delete the snapshot
	// after the sandbox is gone (builders are deleted after each build). Only
	// the manager can make one; a value it did not sign for this object and
	// this snapshot is ignored.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	SnapshotProof string `json:"snapshotProof,omitempty"`
	// contentHash identifies a recipe: a hash of its canonical form and of its base.
	// +optional
	// +kubebuilder:validation:MaxLength=80
	ContentHash string `json:"contentHash,omitempty"`
	// capture records a sandboxRef capture.
	// +optional
	Capture *SnapshotCaptureStatus `json:"capture,omitempty"`
	// sourceSpec is the spec of the captured Sandbox as it was when the
	// capture was requested (sandboxRef only): what the children of a
	// SandboxFork of this snapshot inherit, even after the Sandbox changed or
	// was deleted.
	// +optional
	SourceSpec *SourceSandboxSpec `json:"sourceSpec,omitempty"`
	// build is the progress of a recipe build.
	// +optional
	Build *SnapshotBuildStatus `json:"build,omitempty"`
	// lastError is the last error met, kept until the next success.
	// +optional
	LastError *ErrorStatus `json:"lastError,omitempty"`
	// conditions: Ready (sandboxes can boot from the snapshot), Synced (the
	// last reconcile reached Vercel and succeeded) and, for a recipe with a
	// baseSnapshotRef, ResolvedRefs (the chain of bases exists, without a cycle).
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
	// usage is what making this snapshot used on Vercel: for a recipe
	// build, current is the builder's session and total sums every builder
	// session (retries included); snapshotBytes is the stored snapshot's
	// size (status.sizeBytes) while this object holds it. A snapshot
	// captured from a Sandbox counts its session on that Sandbox, not here.
	// +optional
	Usage *SandboxUsage `json:"usage,omitempty"`
}

// SandboxSnapshot is one Vercel snapshot: captured from a Sandbox, imported
// by id, or built from a recipe.
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sbxsnap,categories=sentry-sandboxes
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`,description="Lifecycle phase"
// +kubebuilder:printcolumn:name="Ready",type=boolean,JSONPath=`.status.readyToUse`,description="Sandboxes can boot from the snapshot"
// +kubebuilder:printcolumn:name="SnapshotID",type=string,JSONPath=`.status.snapshotID`,description="Vercel snapshot id"
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.status.sizeBytes`,description="Snapshot size in bytes"
// +kubebuilder:printcolumn:name="Hash",type=string,JSONPath=`.metadata.labels.sandbox\.sentry\.io/content-hash`,description="Recipe content hash (short)"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SandboxSnapshot struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec SandboxSnapshotSpec `json:"spec"`
	// status is the observed state.
	// +optional
	Status SandboxSnapshotStatus `json:"status,omitempty"`
}

// SandboxSnapshotList is a list of SandboxSnapshots.
// +kubebuilder:object:root=true
type SandboxSnapshotList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxSnapshot `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &SandboxSnapshot{}, &SandboxSnapshotList{})
}
