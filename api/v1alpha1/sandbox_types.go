package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Sandbox condition reasons (besides the shared ones in common_types.go).
const (
	// ReasonCreating is set on Ready=False while the Vercel sandbox is being
	// created and its first session is starting.
	ReasonCreating = "Creating"
	// ReasonSettingUp is set on Ready=False while spec.setup commands run.
	ReasonSettingUp = "SettingUp"
	// ReasonRunning is set on Ready=True: the session runs and setup succeeded.
	ReasonRunning = "Running"
	// ReasonSetupFailed is set on Ready=False when a setup command exited
	// non-zero; the message carries the exit code and the tail of its output.
	ReasonSetupFailed = "SetupFailed"
	// ReasonWaitingForSnapshot is set on Ready=False while spec.source.snapshotRef
	// names a SandboxSnapshot that is not ready to use.
	ReasonWaitingForSnapshot = "WaitingForSnapshot"
	// ReasonSnapshotRefNotFound is set on ResolvedRefs=False and Ready=False
	// while spec.source.snapshotRef names a SandboxSnapshot that does not
	// exist; past the manager's --reference-deadline the Sandbox is Failed.
	ReasonSnapshotRefNotFound = "SnapshotRefNotFound"
	// ReasonSnapshotRefFailed is set on ResolvedRefs=False and Ready=False
	// while spec.source.snapshotRef names a SandboxSnapshot that is Failed;
	// past the manager's --reference-deadline the Sandbox is Failed too.
	ReasonSnapshotRefFailed = "SnapshotRefFailed"
	// ReasonShutdownTimePassed is set on Ready=False (phase Failed) when
	// spec.shutdownTime had passed before the Vercel sandbox was created: none
	// is created. A later shutdownTime (or none) creates it.
	ReasonShutdownTimePassed = "ShutdownTimePassed"
	// ReasonSessionStopped is set on Ready=False when the current session stopped.
	ReasonSessionStopped = "SessionStopped"
	// ReasonSessionFailed is set on Ready=False when the session failed to start.
	ReasonSessionFailed = "SessionFailed"
	// ReasonNameConflict is set on Ready=False when a Vercel sandbox with the
	// derived name exists but was not created for this object.
	ReasonNameConflict = "NameConflict"
	// ReasonOwnedElsewhere is set on Ready=False when a Vercel object this
	// object names is not verified as its own, and is left alone: the sandbox
	// spec.source.adopt names carries the owner tags of another object or
	// cluster, or a SandboxSnapshot's snapshot was not taken of a sandbox the
	// operator made for it (docs/security.md).
	ReasonOwnedElsewhere = "OwnedElsewhere"
	// ReasonSnapshotMissing is set on Ready=False when the snapshot a session
	// should start from is gone.
	ReasonSnapshotMissing = "SnapshotMissing"
	// ReasonDeleting is set on Ready=False while the Vercel sandbox is deleted.
	ReasonDeleting = "Deleting"
	// ReasonStopped is set on Ready=False when the session was stopped because
	// spec.state is Stopped (a pause: a persistent sandbox resumes when
	// spec.state is Running again).
	ReasonStopped = "Stopped"
	// ReasonIdleTimeout is set on Ready=False (phase Idle) when the session
	// stopped because timeoutSeconds passed without activity. A heartbeat newer
	// than the stop wakes it.
	ReasonIdleTimeout = "IdleTimeout"
	// ReasonMaxSessionLength is set on Ready=False (phase Idle) when the session
	// stopped at the plan's maximum session length. A heartbeat newer than the
	// stop wakes it in a new session.
	ReasonMaxSessionLength = "MaxSessionLength"
	// ReasonSnapshotted is set on Ready=False (phase Stopped) when the session
	// stopped because a snapshot was taken of it: a SandboxSnapshot capture
	// without keepSourceRunning, or a snapshot call outside the operator. A
	// heartbeat newer than the stop resumes it.
	ReasonSnapshotted = "Snapshotted"
	// ReasonShutdownTime is set on Ready=False when spec.shutdownTime passed and
	// spec.shutdownPolicy is Stop.
	ReasonShutdownTime = "ShutdownTime"
	// ReasonPersistent is set on Resumable=True: Vercel keeps the filesystem
	// when a session stops, so a later session resumes it.
	ReasonPersistent = "Persistent"
	// ReasonNotPersistent is set on Resumable=False: spec.persistent is false,
	// so a stopped session ends the sandbox for good.
	ReasonNotPersistent = "NotPersistent"
	// ReasonProbeNotReady is set on Ready=False (phase Running) while the
	// session runs and setup succeeded but spec.readinessProbe has not passed
	// yet in this session; the message carries the probe's last result.
	ReasonProbeNotReady = "ProbeNotReady"
	// ReasonProbeFailed is set on Ready=False (phase Running) when
	// spec.readinessProbe failed failureThreshold times in a row after the
	// session was Ready; the message carries the probe's last result. One
	// passing probe makes it Ready again.
	ReasonProbeFailed = "ProbeFailed"
	// ReasonIdleDelete is the event reason when a Sandbox is deleted because
	// its idle window passed (spec.idle.action Delete) or it rested longer
	// than spec.idle.deleteObjectAfterSeconds.
	ReasonIdleDelete = "IdleDelete"
	// ReasonIdleDeletionSoon is the Warning event reason emitted shortly
	// before a resting Sandbox is deleted for spec.idle.deleteObjectAfterSeconds.
	ReasonIdleDeletionSoon = "IdleDeletionSoon"
	// ReasonSnapshotOutdated is set on SnapshotOutdated=True when the
	// SandboxSnapshot of spec.source.snapshotRef has a content hash other than
	// the one the sandbox booted from (its recipe changed), and on
	// Recreated=True when that made the controller recreate the sandbox
	// (recreatePolicy OnNewerSnapshot).
	ReasonSnapshotOutdated = "SnapshotOutdated"
	// ReasonSnapshotCurrent is set on SnapshotOutdated=False: the sandbox
	// booted from the SandboxSnapshot's current content.
	ReasonSnapshotCurrent = "SnapshotCurrent"
	// ReasonSecretsCurrent is set on SecretsCurrent=True: Vercel holds the
	// current values of every Secret the spec references.
	ReasonSecretsCurrent = "SecretsCurrent"
	// ReasonSecretRotated is set on SecretsCurrent=False while the running
	// session keeps env values of a Secret that rotated since it started:
	// Vercel cannot change a running session's environment, so the next
	// session (after a stop and resume, or a recreation) gets the new values.
	// It is also the reason of the event announcing each rotation.
	ReasonSecretRotated = "SecretRotated"
	// ReasonReconcilePaused is set on Paused=True while the object carries the
	// sandbox.sentry.io/paused: "true" annotation.
	ReasonReconcilePaused = "ReconcilePaused"
)

// Sandbox condition types (besides Ready and Synced).
const (
	// ConditionResumable says whether a stopped session can be resumed: True
	// for persistent sandboxes; False when spec.persistent is false (a stop
	// ends the sandbox for good) or when the snapshot to resume from is gone.
	ConditionResumable = "Resumable"
	// ConditionRecreated is True once the controller recreated the Vercel
	// sandbox under spec.recreatePolicy; its reason says why the last time:
	// NotFound (deleted outside the operator), NotPersistent (a
	// non-persistent sandbox whose session ended was to run again),
	// SnapshotMissing (the snapshot to resume from is gone) or
	// SnapshotOutdated. status.recreations counts the recreations.
	ConditionRecreated = "Recreated"
	// ConditionSnapshotOutdated says, for a spec.source.snapshotRef sandbox,
	// whether the SandboxSnapshot's content hash changed since the sandbox
	// booted from it (True, reason SnapshotOutdated) or not (False, reason
	// SnapshotCurrent).
	ConditionSnapshotOutdated = "SnapshotOutdated"
	// ConditionPaused is True while reconciling is paused by the
	// sandbox.sentry.io/paused annotation; it is removed when unpaused.
	ConditionPaused = "Paused"
	// ConditionSecretsCurrent, set while the spec references Secrets, says
	// whether the Vercel sandbox has their current values: False with reason
	// SecretRotated while the running session keeps rotated env values until
	// its next session, or SecretNotFound / SecretRefused while a referenced
	// Secret cannot be read (the session keeps the values it was given).
	ConditionSecretsCurrent = "SecretsCurrent"
)

// Annotations that carry a client's intent.
const (
	// AnnotationLastActivity is the client's activity heartbeat, an RFC 3339
	// time. The controller keeps the session running until timeoutSeconds past
	// the latest of the session start and this time, and a heartbeat newer than
	// an idle stop resumes the sandbox. A time in the future counts as now;
	// one more than a minute ahead is rewritten to the time it was seen (with
	// a Warning event HeartbeatInFuture), so it cannot keep a sandbox awake.
	AnnotationLastActivity = "sandbox.sentry.io/last-activity"
	// AnnotationPaused set to "true" stops reconciling the object, of any of
	// the three kinds (for maintenance): nothing is called in Vercel, no
	// child is created or deleted, and only the Paused condition is written.
	// Deleting the object still deletes its Vercel sandbox or snapshot.
	AnnotationPaused = "sandbox.sentry.io/paused"
	// AnnotationReconcileRequestedAt forces a reconcile, with a fresh look at
	// Vercel, whenever its value changes (any string; a time is customary),
	// on any of the three kinds. The value handled last is in
	// status.lastHandledReconcileAt; a paused object handles none.
	AnnotationReconcileRequestedAt = "sandbox.sentry.io/reconcile-requested-at"
	// AnnotationAbandonRemote set to "true" on a Sandbox being deleted lets
	// its finalizer finish without deleting the Vercel sandbox, for a remote
	// side that is unreachable for good (a deleted project, a revoked
	// account). The Vercel sandbox and its snapshots are left behind; a
	// Warning event names them. Setting it needs `update` on the virtual
	// subresource sandboxes/abandon (config/admission/abandon-remote.yaml).
	AnnotationAbandonRemote = "sandbox.sentry.io/abandon-remote"
)

// SandboxState is the desired state of a Sandbox's session.
// +kubebuilder:validation:Enum=Running;Stopped
type SandboxState string

// Sandbox states.
const (
	// SandboxStateRunning keeps a session running (subject to the idle window).
	SandboxStateRunning SandboxState = "Running"
	// SandboxStateStopped stops the session: a pause for a persistent sandbox,
	// the end of it otherwise.
	SandboxStateStopped SandboxState = "Stopped"
)

// RecreatePolicy says whether a Sandbox whose Vercel sandbox is gone gets a
// new one.
// +kubebuilder:validation:Enum=Never;OnGone;OnNewerSnapshot
type RecreatePolicy string

// Recreate policies.
const (
	// RecreateNever reports a gone sandbox (Ready=False, phase Failed) and
	// leaves it.
	RecreateNever RecreatePolicy = "Never"
	// RecreateOnGone creates a new Vercel sandbox from spec.source when the
	// old one is gone and the Sandbox should run.
	RecreateOnGone RecreatePolicy = "OnGone"
	// RecreateOnNewerSnapshot does what OnGone does, and also recreates a
	// resting snapshotRef sandbox from the SandboxSnapshot's new content
	// when it should run again.
	RecreateOnNewerSnapshot RecreatePolicy = "OnNewerSnapshot"
)

// IdleAction says what happens when a Sandbox's idle window passes.
// +kubebuilder:validation:Enum=Stop;Delete
type IdleAction string

// Idle actions.
const (
	// IdleStop lets the session stop; the Sandbox is Idle and a newer
	// heartbeat wakes it.
	IdleStop IdleAction = "Stop"
	// IdleDelete deletes this object once its session stopped for idleness;
	// spec.deletionPolicy decides whether the Vercel sandbox goes with it.
	IdleDelete IdleAction = "Delete"
)

// IdlePolicy is a Sandbox's end of life when nobody uses it.
type IdlePolicy struct {
	// action when the idle window (timeoutSeconds) passes without activity:
	// Stop (default) stops the session and leaves the Sandbox Idle; Delete
	// deletes this object, and with it the Vercel sandbox unless
	// deletionPolicy is Retain.
	// +optional
	// +kubebuilder:default=Stop
	Action IdleAction `json:"action,omitempty"`
	// deleteObjectAfterSeconds deletes this object once its last session has
	// been stopped (phase Idle or Stopped, for any reason) that long without a
	// new one; spec.deletionPolicy decides about the Vercel sandbox. A Warning
	// event IdleDeletionSoon comes 10% of it (at most 5 minutes) before. At
	// least 60; never when unset.
	// +optional
	// +kubebuilder:validation:Minimum=60
	DeleteObjectAfterSeconds *int64 `json:"deleteObjectAfterSeconds,omitempty"`
}

// ShutdownPolicy says what happens at spec.shutdownTime.
// +kubebuilder:validation:Enum=Stop;Delete
type ShutdownPolicy string

// Shutdown policies.
const (
	// ShutdownStop stops the session and keeps it stopped.
	ShutdownStop ShutdownPolicy = "Stop"
	// ShutdownDelete deletes this object. As for any delete, spec.deletionPolicy
	// decides whether the Vercel sandbox goes with it; under Retain it is kept
	// with its session stopped.
	ShutdownDelete ShutdownPolicy = "Delete"
)

// Runtime is a Vercel-managed base image for a sandbox.
// +kubebuilder:validation:Enum=node22;node24;node26;python3.13
type Runtime string

// SandboxPhase is a one-word summary of a Sandbox's state.
// +kubebuilder:validation:Enum=Pending;Creating;SettingUp;Running;Stopping;Stopped;Idle;Failed;Deleting
type SandboxPhase string

// Sandbox phases.
const (
	SandboxPending   SandboxPhase = "Pending"
	SandboxCreating  SandboxPhase = "Creating"
	SandboxSettingUp SandboxPhase = "SettingUp"
	SandboxRunning   SandboxPhase = "Running"
	SandboxStopping  SandboxPhase = "Stopping"
	SandboxStopped   SandboxPhase = "Stopped"
	SandboxIdle      SandboxPhase = "Idle"
	SandboxFailed    SandboxPhase = "Failed"
	SandboxDeleting  SandboxPhase = "Deleting"
)

// NetworkMode selects how a sandbox may reach the network.
// +kubebuilder:validation:Enum=AllowAll;DenyAll;Allowlist
type NetworkMode string

// Network modes.
const (
	NetworkAllowAll  NetworkMode = "AllowAll"
	NetworkDenyAll   NetworkMode = "DenyAll"
	NetworkAllowlist NetworkMode = "Allowlist"
)

// SandboxSource is where a new sandbox's filesystem comes from. Exactly one
// field is set.
// +kubebuilder:validation:XValidation:rule="[has(self.runtime), has(self.image), has(self.git), has(self.tarball), has(self.snapshotRef), has(self.snapshotID), has(self.adopt)].filter(x, x).size() == 1",message="spec.source: exactly one of runtime, image, git, tarball, snapshotRef, snapshotID or adopt must be set"
type SandboxSource struct {
	// runtime starts from a Vercel-managed image: node22, node24, node26 or python3.13.
	// +optional
	Runtime *Runtime `json:"runtime,omitempty"`
	// image starts from a container image: one of Vercel's managed images
	// (vercel/sandbox/universal, vercel/sandbox/node:22, node:24, node:26,
	// python:3.14, ubuntu or arch), or a team's own image in Vercel's
	// container registry (repo, repo:tag, repo@sha256:…, team/project/repo:tag
	// or vcr.vercel.com/…). Vercel pins it to a digest at create. A team's
	// own image needs the RBAC verb use on vercelimages.sandbox.sentry.io in
	// the namespace, optionally limited to references (docs/security.md):
	// like a raw snapshot id it reaches what other tenants of the Vercel
	// project built. The managed images need no permission.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$`
	Image *ImageReference `json:"image,omitempty"`
	// git clones a repository into /vercel/sandbox.
	// +optional
	Git *GitSource `json:"git,omitempty"`
	// tarball extracts a .tar.gz archive fetched from a URL into /vercel/sandbox.
	// +optional
	Tarball *TarballSource `json:"tarball,omitempty"`
	// snapshotRef boots from the snapshot of a SandboxSnapshot in this namespace,
	// once it is ready to use.
	// +optional
	SnapshotRef *LocalObjectReference `json:"snapshotRef,omitempty"`
	// snapshotID boots from an existing Vercel snapshot by id. Setting it needs
	// the RBAC verb use on vercelsnapshots.sandbox.sentry.io in the namespace
	// (docs/security.md); snapshotRef needs no such permission.
	// +optional
	// +kubebuilder:validation:Pattern=`^(snap_[A-Za-z0-9]{28}|vhs_[a-z0-9]{28})$`
	// +kubebuilder:validation:MaxLength=33
	SnapshotID *string `json:"snapshotID,omitempty"`
	// adopt takes over an existing Vercel sandbox by name instead of creating
	// one: a sandbox made outside the operator (Box, Junior) moves under it
	// without a restart. The sandbox is tagged as this object's on adoption;
	// one tagged by another owner is refused (Ready=False, reason
	// OwnedElsewhere). Setting it needs the RBAC verb use on
	// vercelsandboxes.sandbox.sentry.io in the namespace, optionally limited
	// to names (docs/security.md). spec.deletionPolicy applies to it as to
	// any other.
	// +optional
	Adopt *AdoptSource `json:"adopt,omitempty"`
}

// ImageReference is a container image a sandbox starts from, as Vercel's
// create takes it (SDK 3.5 sandbox.d.ts `image`).
type ImageReference string

// ManagedImages are Vercel's managed sandbox images (SDK 3.5 constants.ts,
// ManagedImage): anyone may start from them. The admission policy
// config/admission/images.yaml and the SandboxPool template rule list them
// too (TestManagedImagesAgree keeps the three equal).
var ManagedImages = []ImageReference{
	"vercel/sandbox/universal", "vercel/sandbox/node:22", "vercel/sandbox/node:24", "vercel/sandbox/node:26",
	"vercel/sandbox/python:3.14", "vercel/sandbox/ubuntu", "vercel/sandbox/arch",
}

// AdoptSource names the Vercel sandbox a Sandbox adopts.
type AdoptSource struct {
	// name of the Vercel sandbox in the manager's project.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9_-]+$`
	Name string `json:"name"`
}

// GitSource is a repository to clone.
type GitSource struct {
	// url of the repository (https, http, git, ssh or file scheme).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(https?|git|ssh|file)://\S+$`
	URL string `json:"url"`
	// revision (branch, tag or commit) to check out; the default branch when
	// empty. No whitespace, and it must not start with '-'.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[^-\s\x00-\x1f\x7f][^\s\x00-\x1f\x7f]*$`
	Revision string `json:"revision,omitempty"`
	// depth of a shallow clone; a full clone when unset.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Depth *int32 `json:"depth,omitempty"`
	// credentials for a private repository: a Secret in this namespace with the
	// keys "username" and "password" (a token works as the password). They are
	// sent to Vercel only and never stored in status.
	// +optional
	Credentials *GitCredentials `json:"credentials,omitempty"`
}

// GitCredentials names the Secret holding git credentials.
type GitCredentials struct {
	// secretName is the Secret in this namespace with the keys "username" and "password".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	SecretName string `json:"secretName"`
}

// TarballSource is a .tar.gz archive to extract.
type TarballSource struct {
	// url of the .tar.gz archive.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://\S+$`
	URL string `json:"url"`
}

// SandboxResources sizes the sandbox's sessions.
type SandboxResources struct {
	// vcpus is the number of virtual CPUs: 1 or an even number up to 32 (the
	// plan may allow fewer). Each vCPU comes with 2048 MB of memory.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=32
	// +kubebuilder:validation:XValidation:rule="self == 1 || self % 2 == 0",message="spec.resources.vcpus must be 1 or an even number"
	VCPUs *int32 `json:"vcpus,omitempty"`
}

// EnvVar is one environment variable given to every command in the sandbox.
// +kubebuilder:validation:XValidation:rule="!(has(self.value) && has(self.valueFrom))",message="an env entry sets value or valueFrom, not both"
type EnvVar struct {
	// name of the variable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Name string `json:"name"`
	// value of the variable. It may not contain a NUL character, which no
	// process environment can carry (a Secret's value with one is refused
	// when it is read, reason SecretRefused).
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	// +kubebuilder:validation:XValidation:rule=`!self.contains('\u0000')`,message="env value must not contain a NUL character"
	Value *string `json:"value,omitempty"`
	// valueFrom reads the value from a Secret key in this namespace.
	// +optional
	ValueFrom *EnvVarSource `json:"valueFrom,omitempty"`
}

// EnvVarSource is where an environment variable's value comes from.
type EnvVarSource struct {
	// secretKeyRef selects a key of a Secret in this namespace.
	// +required
	SecretKeyRef SecretKeySelector `json:"secretKeyRef"`
}

// SetupCommand is one command run once per fresh filesystem, before Ready.
// +kubebuilder:validation:XValidation:rule="!(has(self.user) && has(self.sudo) && self.sudo)",message="user and sudo are exclusive: a step runs as root (sudo) or as user",fieldPath=".user"
type SetupCommand struct {
	// name labels the step in status and events; defaults to the command.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name,omitempty"`
	// command is the executable to run (resolved through PATH), e.g. "npm".
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
	// sudo runs the command as root.
	// +optional
	Sudo bool `json:"sudo,omitempty"`
	// user runs the command as this Linux user of the sandbox, the way the
	// official SDK's asUser does: as `sudo -u USER -- bash -c ...`, in cwd
	// (the user's home, /home/USER or /root, when cwd is empty), in sudo's
	// environment (sudo resets the rest: the sandbox's env is not passed).
	// The user must exist when the step runs:
	// create it in an earlier step (e.g. command useradd, args
	// ["-m", "USER"], sudo true); if it does not, sudo answers "unknown
	// user" and the step fails with exit code 1. Exclusive with sudo.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_-]{0,31}$`
	User string `json:"user,omitempty"`
	// timeoutSeconds kills the command when exceeded; no limit other than the
	// session's when unset.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=18000
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`
}

// ReadinessProbe checks that what runs in the sandbox serves: Ready waits for
// it. Exactly one of httpGet or exec is set.
// +kubebuilder:validation:XValidation:rule="has(self.httpGet) != has(self.exec)",message="spec.readinessProbe: exactly one of httpGet or exec must be set"
type ReadinessProbe struct {
	// httpGet sends GET requests to a port in spec.ports through its public
	// route (status.routes); a status from 200 to 399 passes. Redirects are
	// not followed.
	// +optional
	HTTPGet *HTTPGetProbe `json:"httpGet,omitempty"`
	// exec runs a command in the sandbox; exit code 0 passes. Each run is a
	// detached Vercel command, started once per period and polled until it
	// exits (a run-command and a few status reads); at most the manager's
	// --max-probes-per-namespace run at once in a namespace.
	// +optional
	Exec *ExecProbe `json:"exec,omitempty"`
	// periodSeconds between probes; 1 to 300, default 5.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=300
	PeriodSeconds *int32 `json:"periodSeconds,omitempty"`
	// timeoutSeconds a probe may take before it counts as failed; 1 to 60,
	// default 2.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=60
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`
	// failureThreshold is how many probes in a row must fail, once the
	// session was Ready, before Ready turns False (ProbeFailed); 1 to 100,
	// default 3. Before the first pass, Ready is False (ProbeNotReady) anyway.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	FailureThreshold *int32 `json:"failureThreshold,omitempty"`
}

// HTTPGetProbe is an HTTP GET on a sandbox port's public route.
type HTTPGetProbe struct {
	// port inside the sandbox; it must be one of spec.ports.
	// +required
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// path of the request, starting with "/"; "/" when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^/[^\s\x00-\x1f\x7f]*$`
	Path string `json:"path,omitempty"`
}

// ExecProbe is a command run in the sandbox.
type ExecProbe struct {
	// command is the executable to run (resolved through PATH), e.g. "test".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Command string `json:"command"`
	// args passed to the command.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=4096
	Args []string `json:"args,omitempty"`
}

// SandboxSpec is the desired state of a Sandbox.
// +kubebuilder:validation:XValidation:rule="!has(self.recreatePolicy) || self.recreatePolicy != 'OnNewerSnapshot' || has(self.source.snapshotRef)",message="spec.recreatePolicy OnNewerSnapshot needs spec.source.snapshotRef",fieldPath=".recreatePolicy"
// +kubebuilder:validation:XValidation:rule="self.source == oldSelf.source",message="spec.source is immutable",fieldPath=".source"
// +kubebuilder:validation:XValidation:rule="has(self.persistent) == has(oldSelf.persistent) && (!has(self.persistent) || self.persistent == oldSelf.persistent)",message="spec.persistent is immutable",fieldPath=".persistent"
// +kubebuilder:validation:XValidation:rule="!has(self.readinessProbe) || !has(self.readinessProbe.httpGet) || (has(self.ports) && self.ports.exists(p, p == self.readinessProbe.httpGet.port))",message="spec.readinessProbe.httpGet.port must be one of spec.ports",fieldPath=".readinessProbe.httpGet.port"
// +kubebuilder:validation:XValidation:rule="has(self.className) == has(oldSelf.className) && (!has(self.className) || self.className == oldSelf.className)",message="spec.className is immutable",fieldPath=".className"
// +kubebuilder:validation:XValidation:rule="has(self.poolRef) == has(oldSelf.poolRef) && (!has(self.poolRef) || self.poolRef == oldSelf.poolRef)",message="spec.poolRef is immutable",fieldPath=".poolRef"
// +kubebuilder:validation:XValidation:rule="!has(self.failoverRegions) || !self.failoverRegions.exists(r, r == (has(self.region) ? self.region : 'iad1'))",message="spec.failoverRegions must not contain the sandbox's region (spec.region, iad1 when unset)",fieldPath=".failoverRegions"
// +kubebuilder:validation:XValidation:rule="!has(self.snapshotRetention) || !has(self.persistent) || self.persistent",message="spec.snapshotRetention is only for persistent Sandboxes (spec.persistent is false)",fieldPath=".snapshotRetention"
// +kubebuilder:validation:XValidation:rule="!has(self.rewind) || !has(self.persistent) || self.persistent",message="spec.rewind is only for persistent Sandboxes (spec.persistent is false)",fieldPath=".rewind"
// +kubebuilder:validation:XValidation:rule="!has(self.poolRef) || !has(self.source.adopt)",message="spec.poolRef cannot be combined with spec.source.adopt: a claim takes a pool member or creates from spec.source",fieldPath=".poolRef"
type SandboxSpec struct {
	// source of the sandbox's filesystem: exactly one of runtime, image, git,
	// tarball, snapshotRef, snapshotID or adopt (an existing Vercel sandbox).
	// Immutable.
	// +required
	Source SandboxSource `json:"source"`
	// poolRef claims a ready member of a SandboxPool in this namespace instead
	// of creating a Vercel sandbox: the member's sandbox becomes this
	// object's (re-tagged, this spec's networkPolicy, ports and timeout
	// applied) and the member object goes. When the pool is empty, missing,
	// or cannot serve this spec (another source, className, resources, env,
	// persistent or setup than its template), the Sandbox is created from
	// spec.source as without poolRef; the Claimed condition says which
	// happened and why. Immutable.
	// +optional
	PoolRef *PoolRef `json:"poolRef,omitempty"`
	// className is the SandboxClass whose Vercel credentials, project and
	// defaults this object uses; the default class (annotation
	// sandbox.sentry.io/is-default-class) when unset, else the manager's own
	// credentials. Immutable.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	ClassName *string `json:"className,omitempty"`
	// resources of each session.
	// +optional
	Resources *SandboxResources `json:"resources,omitempty"`
	// ports to expose; each gets a public route in status.routes. At most 15,
	// unique, 1024–65535, and not 23456 (reserved by Vercel).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=15
	// +kubebuilder:validation:items:Minimum=1024
	// +kubebuilder:validation:items:Maximum=65535
	// +kubebuilder:validation:XValidation:rule="!self.exists(p, p == 23456)",message="spec.ports must not contain 23456 (reserved by Vercel)"
	Ports []int32 `json:"ports,omitempty"`
	// timeoutSeconds is the idle window: a session runs until timeoutSeconds
	// after the latest of its start and the client's heartbeat (the
	// sandbox.sentry.io/last-activity annotation, RFC 3339), never beyond the
	// plan's maximum session length; then it stops and the Sandbox is Idle.
	// 1 to 86400 (24 h, Vercel's longest session); defaults to 300.
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	TimeoutSeconds *int64 `json:"timeoutSeconds,omitempty"`
	// recreatePolicy: Never (default) reports a Vercel sandbox that is gone
	// and leaves it; OnGone creates a new one from spec.source when the old
	// one was deleted outside the operator (NotFound), is non-persistent and
	// its session ended (NotPersistent), or cannot resume because its
	// snapshot is gone (SnapshotMissing), each time the Sandbox should run
	// (spec.state Running and, after an idle stop, a newer heartbeat).
	// OnNewerSnapshot (snapshotRef only) also recreates a resting sandbox
	// from the SandboxSnapshot's new content, instead of resuming it, when
	// its content hash changed (condition SnapshotOutdated). A running
	// session is never replaced. The new Vercel sandbox's name ends in
	// -r<status.recreations>; the old one is deleted unless deletionPolicy
	// is Retain, and setup runs again on the new filesystem.
	// +optional
	// +kubebuilder:default=Never
	RecreatePolicy RecreatePolicy `json:"recreatePolicy,omitempty"`
	// idle is what happens to a Sandbox nobody uses: whether the end of the
	// idle window stops or deletes it, and whether a resting Sandbox is
	// deleted after a while. Stop, and never deleted, when unset.
	// +optional
	Idle *IdlePolicy `json:"idle,omitempty"`
	// env is given to every command in the sandbox.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Env []EnvVar `json:"env,omitempty"`
	// networkPolicy controls egress; full internet access when unset.
	// +optional
	NetworkPolicy *NetworkPolicy `json:"networkPolicy,omitempty"`
	// persistent sandboxes keep their filesystem when a session stops (Vercel
	// snapshots it), so a later session resumes it. Defaults to true. Immutable.
	// +optional
	// +kubebuilder:default=true
	Persistent *bool `json:"persistent,omitempty"`
	// snapshotRetention is how many of a persistent Sandbox's snapshots
	// Vercel keeps, and for how long. The operator always sends it (its
	// defaults when unset: keep the last 5, each for 30 days after its last
	// use), so Vercel changing its own defaults does not change a Sandbox;
	// status.snapshotRetention shows what was sent. A change applies to the
	// snapshots taken from then on. Only for persistent Sandboxes.
	// +optional
	SnapshotRetention *SnapshotRetention `json:"snapshotRetention,omitempty"`
	// region is the Vercel region the sandbox's sessions run in; Vercel's
	// default (iad1) when unset. A change applies to the next session, as on
	// Vercel: the running one stays where it is. status.region shows where
	// the current session runs.
	// +optional
	Region VercelRegion `json:"region,omitempty"`
	// failoverRegions are the regions Vercel may start a session in when
	// region cannot take it, in order. A persistent Sandbox's snapshot
	// lives in one region: resuming elsewhere needs that region here.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=18
	FailoverRegions []VercelRegion `json:"failoverRegions,omitempty"`
	// setup commands run in order until they have all succeeded once on the
	// sandbox's filesystem; later sessions (resume, idle wake) do not run them
	// again. Ready waits for them in every session, and the session is kept
	// alive while one runs. A failing command fails the Sandbox until
	// spec.setup changes, which runs setup again from its first command.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Setup []SetupCommand `json:"setup,omitempty"`
	// readinessProbe makes Ready wait, after setup, until the probe passes in
	// the session; a probe that fails failureThreshold times in a row after
	// that sets Ready=False (ProbeFailed) until it passes again. Probes run
	// from the manager while the session runs; they are not activity and do
	// not keep the session alive.
	// +optional
	ReadinessProbe *ReadinessProbe `json:"readinessProbe,omitempty"`
	// deletionPolicy: Delete (default) deletes the Vercel sandbox with this
	// object; Retain leaves it in Vercel.
	// +optional
	// +kubebuilder:default=Delete
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
	// state: Running (default) or Stopped. Stopped on a persistent sandbox is a
	// pause: the session stops and Vercel keeps the filesystem; Running again
	// resumes it in a new session (setup that succeeded does not run again). On a
	// non-persistent sandbox Stopped ends it for good.
	// +optional
	// +kubebuilder:default=Running
	State SandboxState `json:"state,omitempty"`
	// shutdownTime is an absolute end of life: at this time the sandbox is
	// stopped or deleted, per shutdownPolicy. A ShutdownWarning event is
	// emitted a few minutes before (the manager's --shutdown-warning flag).
	// A time that has already passed when the Sandbox is first reconciled
	// creates nothing in Vercel: the Sandbox is Failed with reason
	// ShutdownTimePassed (under shutdownPolicy Delete it is deleted).
	// +optional
	ShutdownTime *metav1.Time `json:"shutdownTime,omitempty"`
	// shutdownPolicy: Stop (default) stops the session at shutdownTime and keeps
	// it stopped; Delete deletes this object, and with it the Vercel sandbox
	// unless deletionPolicy is Retain (then the sandbox is kept, stopped).
	// +optional
	// +kubebuilder:default=Stop
	ShutdownPolicy ShutdownPolicy `json:"shutdownPolicy,omitempty"`
	// rewind takes a persistent Sandbox back to an earlier snapshot of its
	// own (status.history lists them): see SandboxRewind and
	// docs/sandbox.md#history-and-rewind. status.rewind records the last
	// one handled.
	// +optional
	Rewind *SandboxRewind `json:"rewind,omitempty"`
}

// SandboxRoute is the public URL of one exposed port.
type SandboxRoute struct {
	// port inside the sandbox.
	// +required
	Port int32 `json:"port"`
	// url that reaches the port.
	// +required
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`
}

// BootedFrom names the snapshot the sandbox's filesystem came from.
type BootedFrom struct {
	// snapshotName is the SandboxSnapshot, when the source was snapshotRef.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SnapshotName string `json:"snapshotName,omitempty"`
	// snapshotID is the Vercel snapshot id.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SnapshotID string `json:"snapshotID,omitempty"`
	// contentHash is the SandboxSnapshot's status.contentHash at boot, when
	// the source was snapshotRef to a recipe.
	// +optional
	// +kubebuilder:validation:MaxLength=80
	ContentHash string `json:"contentHash,omitempty"`
}

// SetupState is where spec.setup stands on the sandbox's filesystem.
// +kubebuilder:validation:Enum=Running;Succeeded;Failed
type SetupState string

const (
	// SetupRunning: setup commands remain to run; a session that stops in
	// the middle of one runs it again in the next session.
	SetupRunning SetupState = "Running"
	// SetupSucceeded: every setup command exited 0 on this filesystem; later
	// sessions (resume, idle wake) are Ready without running setup again.
	SetupSucceeded SetupState = "Succeeded"
	// SetupFailed: a setup command exited non-zero; no session is Ready on
	// this filesystem until spec.setup changes, which runs setup again.
	SetupFailed SetupState = "Failed"
)

// SetupStatus tracks spec.setup on the sandbox's filesystem, which a
// persistent sandbox keeps across sessions.
type SetupStatus struct {
	// state: Running, Succeeded or Failed.
	// +optional
	State SetupState `json:"state,omitempty"`
	// specHash identifies the spec.setup that state is about.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SpecHash string `json:"specHash,omitempty"`
	// attempt counts the times setup started from its first command on this
	// filesystem; each attempt's commands carry it in their marker.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// sessionID the setup command ran in last.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SessionID string `json:"sessionID,omitempty"`
	// completed counts the setup commands that finished successfully.
	// +optional
	Completed int32 `json:"completed,omitempty"`
	// commandID of the setup command running now.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	CommandID string `json:"commandID,omitempty"`
}

// SandboxStatus is the observed state of a Sandbox.
type SandboxStatus struct {
	// phase summarises the state: Pending, Creating, SettingUp, Running,
	// Stopping, Stopped, Idle, Failed or Deleting.
	// +optional
	Phase SandboxPhase `json:"phase,omitempty"`
	// conditions: Ready (the session runs and setup succeeded), Synced (the
	// last reconcile reached Vercel and succeeded), Resumable (a stopped
	// session can be resumed), Paused (reconciling is paused by annotation),
	// Recreated (the Vercel sandbox was recreated, and why), SecretsCurrent
	// (Vercel has the referenced Secrets' current values) and, with a
	// snapshotRef source, ResolvedRefs (the SandboxSnapshot exists) and
	// SnapshotOutdated (its content changed since the sandbox booted).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// observedGeneration is the spec generation the controller last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// vercelName is the name of the Vercel sandbox, derived from this object and
	// recorded with the result of its create.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	VercelName string `json:"vercelName,omitempty"`
	// sessionID is the id of the current Vercel session (sbx_…), for data-plane
	// calls such as running a command.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SessionID string `json:"sessionID,omitempty"`
	// sessionVCPUs is the number of vCPUs the current session was started
	// with. A change of spec.resources.vcpus applies to the next session
	// only, so SandboxQuotas count this number, not the spec's, until the
	// session stops. Unset for a session the controller did not start (an
	// adoption): the spec's number is counted then.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SessionVCPUs int32 `json:"sessionVCPUs,omitempty"`
	// region is where the current (or last) session runs, as Vercel
	// reported it; it can differ from spec.region after a change (the next
	// session moves) or a failover.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Region string `json:"region,omitempty"`
	// snapshotRetention is the retention last sent to Vercel for a
	// persistent Sandbox (spec.snapshotRetention with the operator's
	// defaults filled in).
	// +optional
	SnapshotRetention *SnapshotRetention `json:"snapshotRetention,omitempty"`
	// routes are the public URLs of spec.ports.
	// +optional
	// +listType=map
	// +listMapKey=port
	// +kubebuilder:validation:MaxItems=15
	Routes []SandboxRoute `json:"routes,omitempty"`
	// startedAt is when the current session started running.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// expiresAt is the current session's deadline: when it stops unless the
	// controller extends it for activity. Unset while no session runs.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// currentSnapshotID is the snapshot the next session resumes from.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	CurrentSnapshotID string `json:"currentSnapshotID,omitempty"`
	// bootedFrom is the snapshot the filesystem was created from, if any.
	// +optional
	BootedFrom *BootedFrom `json:"bootedFrom,omitempty"`
	// setup tracks the spec.setup commands.
	// +optional
	Setup *SetupStatus `json:"setup,omitempty"`
	// lastError is the last error met, kept until the next success.
	// +optional
	LastError *ErrorStatus `json:"lastError,omitempty"`
	// stoppedAt is when the last session stopped; a heartbeat newer than this
	// wakes an Idle sandbox. Unset while a session runs.
	// +optional
	StoppedAt *metav1.Time `json:"stoppedAt,omitempty"`
	// lastHandledReconcileAt is the value of the
	// sandbox.sentry.io/reconcile-requested-at annotation handled last.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`
	// recreations counts the Vercel sandboxes created anew under
	// spec.recreatePolicy. It is recorded before each create, and the
	// Vercel name (status.vercelName) ends in -r<recreations>, so a crash
	// never leaves two Vercel sandboxes for one object.
	// +optional
	Recreations int32 `json:"recreations,omitempty"`
	// claim records the pool member this Sandbox took (spec.poolRef).
	// +optional
	Claim *ClaimStatus `json:"claim,omitempty"`
	// secrets records which values of the referenced Secrets Vercel holds,
	// as digests (never the values), so that a rotated Secret is detected
	// and applied without a spec change.
	// +optional
	Secrets *SecretsStatus `json:"secrets,omitempty"`
	// usage is what this Sandbox used on Vercel: the current session and
	// the total over its life (every session, pause and recreation), read
	// from the answers of the polls the controller makes anyway.
	// snapshotBytes is the size of the snapshot the next session resumes
	// from when a SandboxSnapshot in this namespace reports it.
	// +optional
	Usage *SandboxUsage `json:"usage,omitempty"`
	// history is the snapshot lineage of a persistent Sandbox: the latest
	// snapshots of its Vercel sandbox, newest first, at most
	// snapshotRetention.keepLast of them, with the one the next session
	// resumes from marked current. It is read from Vercel only when the
	// lineage can have changed (a stop took a snapshot, a rewind), never on
	// a poll.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	History []SnapshotHistoryEntry `json:"history,omitempty"`
	// rewind records the last spec.rewind handled.
	// +optional
	Rewind *RewindStatus `json:"rewind,omitempty"`
}

// SecretsStatus records the referenced Secrets' values given to Vercel.
type SecretsStatus struct {
	// applied lists, per referenced Secret, the version and digest of the
	// values Vercel was given.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Applied []AppliedSecret `json:"applied,omitempty"`
	// staleSession is the running session when it started with env values
	// of a Secret that rotated since: it keeps them until it stops.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	StaleSession string `json:"staleSession,omitempty"`
}

// AppliedSecret is one referenced Secret as Vercel was given it.
type AppliedSecret struct {
	// name of the Secret in this namespace.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// resourceVersion of the Secret when it was read.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// digest identifies the values of the Secret's referenced keys: a
	// truncated HMAC-SHA256 over them and this object's UID, keyed with a key
	// only the manager holds, so it cannot confirm a guessed value. Not the
	// values.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Digest string `json:"digest,omitempty"`
}

// Sandbox is one Vercel named sandbox: its sessions (VM boots) come and go, the
// Sandbox persists.
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sbx,categories=sentry-sandboxes
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`,description="Lifecycle phase"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="Session runs and setup succeeded"
// +kubebuilder:printcolumn:name="Session",type=string,JSONPath=`.status.sessionID`,description="Current Vercel session id"
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.status.expiresAt`,description="When the current session stops unless extended"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,description="Why Ready is what it is",priority=1
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.metadata.labels.sandbox\.sentry\.io/class`,description="The SandboxClass whose credentials it uses (empty: the manager's own)",priority=1
// +kubebuilder:printcolumn:name="vCPUs",type=integer,JSONPath=`.status.sessionVCPUs`,description="vCPUs of the current session",priority=1
// +kubebuilder:printcolumn:name="Route",type=string,JSONPath=`.status.routes[0].url`,description="Public URL of the first exposed port",priority=1
type Sandbox struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec SandboxSpec `json:"spec"`
	// status is the observed state.
	// +optional
	Status SandboxStatus `json:"status,omitempty"`
}

// SandboxList is a list of Sandboxes.
// +kubebuilder:object:root=true
type SandboxList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Sandbox `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &Sandbox{}, &SandboxList{})
}
