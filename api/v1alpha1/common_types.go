package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Condition types shared by every kind.
const (
	// ConditionReady is True when the remote object is usable: for a Sandbox, its
	// session runs and its setup commands succeeded.
	ConditionReady = "Ready"
	// ConditionSynced is True when the last reconcile succeeded, every call to
	// Vercel and to the API server included; False with the error's reason
	// (one of the reasons below marked Synced=False) otherwise.
	ConditionSynced = "Synced"
	// ConditionResolvedRefs is set on objects that name another object of
	// this operator (a Sandbox's spec.source.snapshotRef, a recipe's
	// baseSnapshotRef): True while it exists and can become usable, False
	// with a reason saying why not. Its lastTransitionTime starts the
	// manager's --reference-deadline, after which the object is Failed.
	ConditionResolvedRefs = "ResolvedRefs"
)

// Finalizers the controllers keep on their objects until the remote side is
// cleaned up. config/admission adds them at create; a controller adds its own
// when it is missing.
const (
	// SandboxFinalizer keeps a Sandbox until its Vercel sandbox is deleted (or
	// retained, per spec.deletionPolicy).
	SandboxFinalizer = "sandbox.sentry.io/finalizer"
	// SandboxSnapshotFinalizer keeps a SandboxSnapshot until its Vercel
	// snapshot is deleted (or retained, or left to another SandboxSnapshot
	// that still uses it).
	SandboxSnapshotFinalizer = "sandbox.sentry.io/snapshot-finalizer"
	// SandboxForkFinalizer keeps a SandboxFork until its children and its own
	// snapshot are deleted (or released, per spec.deletionPolicy).
	SandboxForkFinalizer = "sandbox.sentry.io/fork-finalizer"
)

// Condition reasons shared by every kind. The ones set on Synced=False
// classify the error of the last reconcile; the same reason is the Warning
// event's and lastError's.
const (
	// ReasonReconciled is set on Synced=True after a reconcile that succeeded.
	ReasonReconciled = "Reconciled"
	// ReasonResolved is set on ResolvedRefs=True: every object the spec
	// names exists.
	ReasonResolved = "Resolved"
	// ReasonNotFound is set on Ready=False when the remote object vanished
	// outside the operator, and on Synced=False when Vercel answered 404.
	ReasonNotFound = "NotFound"
	// ReasonGone is set on Synced=False when Vercel answered 410 (a session
	// that has stopped) or closed a command's stream because its session
	// stopped.
	ReasonGone = "Gone"
	// ReasonSnapshotNotFound is set on Synced=False when Vercel answered 410
	// snapshot_not_found: the snapshot to start from is gone.
	ReasonSnapshotNotFound = "SnapshotNotFound"
	// ReasonStopping is set on Synced=False when Vercel refused a call because
	// the session is stopping or being snapshotted; the controller retries
	// once it has stopped.
	ReasonStopping = "Stopping"
	// ReasonConflict is set on Synced=False when Vercel answered that the
	// object being created already exists (409).
	ReasonConflict = "Conflict"
	// ReasonRateLimited is set on Synced=False when Vercel answered 429 (or
	// the client held the request back after a 429 to the same credential);
	// the controller retries after Vercel's Retry-After delay, else with
	// exponential backoff.
	ReasonRateLimited = "RateLimited"
	// ReasonTransient is set on Synced=False for 5xx answers and connection
	// errors; the controller retries with a backoff capped at one minute.
	ReasonTransient = "Transient"
	// ReasonInvalid is set on Synced=False when Vercel rejected the spec as
	// invalid (400, 422); the controller does not retry until the spec changes.
	ReasonInvalid = "Invalid"
	// ReasonUnauthorized is set on Synced=False and Ready=False when Vercel
	// rejected the manager's credentials (401, 403: a revoked token, or a
	// team the token has no access to); the controller retries with backoff
	// and uses a rotated token file without a restart.
	ReasonUnauthorized = "Unauthorized"
	// ReasonProjectNotFound is set on Synced=False and Ready=False when
	// Vercel does not know the manager's project: a delete is then not taken
	// as done, since every delete in a wrong project answers 404.
	ReasonProjectNotFound = "ProjectNotFound"
	// ReasonPaymentRequired is set on Synced=False when Vercel answered 402
	// for the account.
	ReasonPaymentRequired = "PaymentRequired"
	// ReasonSecretNotFound is set on Synced=False when a referenced Secret
	// does not exist, and on Ready=False while the object waits for it.
	ReasonSecretNotFound = "SecretNotFound"
	// ReasonSecretKeyNotFound is set like SecretNotFound when the Secret
	// exists but lacks the key a reference names.
	ReasonSecretKeyNotFound = "SecretKeyNotFound"
	// ReasonSecretRefused is set on Synced=False when a referenced Secret is
	// one the controller never sends to Vercel: a ServiceAccount token
	// (type kubernetes.io/service-account-token), or whose value its use
	// cannot take (a forwardURL that is not an https URL without query or
	// fragment, an env value with a NUL). See docs/security.md.
	ReasonSecretRefused = "SecretRefused"
	// ReasonNetworkPolicyInvalid is set on Synced=False when
	// spec.networkPolicy holds what the API server cannot check (a regex
	// that does not compile as RE2); the message names the field. Not
	// retried until the spec changes; a running session keeps its policy.
	ReasonNetworkPolicyInvalid = "NetworkPolicyInvalid"
	// ReasonReconcileError is set on Synced=False for any other error, such as
	// a refusal by the Kubernetes API server; the controller retries with a
	// backoff.
	ReasonReconcileError = "ReconcileError"
)

// DeletionPolicy says what happens to the remote object when the Kubernetes
// object is deleted.
// +kubebuilder:validation:Enum=Delete;Retain
type DeletionPolicy string

const (
	// DeletionPolicyDelete deletes the remote object before the finalizer is removed.
	DeletionPolicyDelete DeletionPolicy = "Delete"
	// DeletionPolicyRetain leaves the remote object in Vercel (orphans it).
	DeletionPolicyRetain DeletionPolicy = "Retain"
)

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// name of the referenced object: a Kubernetes object name (lowercase
	// letters, digits, '-' and '.').
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// SecretKeySelector selects one key of a Secret in the same namespace. The
// value is read by the controller when it calls Vercel and never written to
// status, events or logs.
type SecretKeySelector struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// key within the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// ErrorStatus records the last error the controller met.
type ErrorStatus struct {
	// time the error was observed.
	// +required
	Time metav1.Time `json:"time"`
	// reason is a CamelCase classification of the error (e.g. RateLimited, Invalid).
	// +required
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason"`
	// message is a human-readable description; it never contains a secret.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
}
