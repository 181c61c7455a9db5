package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Keys of the Secret a SandboxClass's spec.credentialsSecretRef names: the
// same as those of the manager's own credentials Secret (vercel-credentials).
const (
	// ClassSecretTokenKey holds the Vercel access token.
	ClassSecretTokenKey = "token"
	// ClassSecretTeamIDKey holds the Vercel team id (team_...).
	ClassSecretTeamIDKey = "team-id"
	// ClassSecretProjectIDKey holds the Vercel project id (prj_...).
	ClassSecretProjectIDKey = "project-id"
	// ClassSecretTeamIDKeyDeprecated and ClassSecretProjectIDKeyDeprecated
	// are the keys' first spelling, still read when the new key is absent;
	// the class then gets a DeprecatedSecretKey Warning event.
	ClassSecretTeamIDKeyDeprecated    = "teamId"
	ClassSecretProjectIDKeyDeprecated = "projectId"
)

// ReasonDeprecatedSecretKey is the Warning event of a SandboxClass whose
// Secret still spells a key the deprecated way.
const ReasonDeprecatedSecretKey = "DeprecatedSecretKey"

// Annotations and labels of the class mechanism.
const (
	// AnnotationDefaultClass set to "true" on a SandboxClass makes it the
	// class of objects that name none (like StorageClass's
	// storageclass.kubernetes.io/is-default-class). With several default
	// classes, the oldest wins.
	AnnotationDefaultClass = "sandbox.sentry.io/is-default-class"
	// LabelClass is set by the controllers on every Sandbox, SandboxSnapshot
	// and SandboxFork to the class it was reconciled with: spec.className,
	// or, when that is empty, the default class when the object was first
	// reconciled. An empty value (set on the children of a fork of no class)
	// stands for the manager's own credentials (its flags); other objects
	// of no class carry no label. It pins the class an object without
	// spec.className uses,
	// so a default class added later does not move it to another Vercel
	// project. Do not change it by hand.
	LabelClass = "sandbox.sentry.io/class"
	// SandboxClassFinalizer keeps a SandboxClass while objects use it.
	SandboxClassFinalizer = "sandbox.sentry.io/class-finalizer"
)

// SandboxClass condition types and reasons.
const (
	// ConditionCredentialsValid says whether Vercel accepts the class's
	// credentials and knows its team and project: True (reason Verified),
	// or False with reason SecretNotFound, Unauthorized, ProjectNotFound or
	// Transient.
	ConditionCredentialsValid = "CredentialsValid"
	// ReasonVerified is set on CredentialsValid=True: a read of the class's
	// team and project succeeded with its token.
	ReasonVerified = "Verified"
	// ReasonInUse is set on Ready=False of a SandboxClass being deleted
	// while objects still use it; the message says how many.
	ReasonInUse = "InUse"
	// ReasonClassNotFound is set on Ready=False and Synced=False of an object
	// whose spec.className names a SandboxClass that does not exist; the
	// controller retries until it does.
	ReasonClassNotFound = "ClassNotFound"
	// ReasonClassNotAllowed is set on Ready=False and Synced=False of an
	// object whose namespace is outside its class's spec.namespaceSelector;
	// nothing is called in Vercel.
	ReasonClassNotAllowed = "ClassNotAllowed"
	// ReasonClassMismatch is set on ResolvedRefs=False and Ready=False of an
	// object that names an object of another class (a Sandbox's snapshotRef
	// to a SandboxSnapshot of another class, a recipe's baseSnapshotRef, a
	// capture of a Sandbox of another class): each class is its own Vercel
	// project, so a snapshot is never used across classes.
	ReasonClassMismatch = "ClassMismatch"
)

// ClassSecretReference names the Secret holding a class's credentials.
type ClassSecretReference struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// namespace of the Secret. Keep classes' Secrets in one namespace only
	// cluster admins can read (the manager's own, by default): whoever can
	// read it can spend the class's Vercel budget.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
}

// SandboxClassDefaults are applied to the objects of a class that leave the
// field unset, when they are first reconciled (written into their spec, as
// admission defaulting would).
// +kubebuilder:validation:XValidation:rule="!has(self.failoverRegions) || !self.failoverRegions.exists(r, r == (has(self.region) ? self.region : 'iad1'))",message="spec.defaults.failoverRegions must not contain spec.defaults.region (iad1 when unset)",fieldPath=".failoverRegions"
type SandboxClassDefaults struct {
	// resources of each session, for Sandboxes that set none.
	// +optional
	Resources *SandboxResources `json:"resources,omitempty"`
	// idle policy, for Sandboxes that set none.
	// +optional
	Idle *IdlePolicy `json:"idle,omitempty"`
	// networkPolicy, for Sandboxes that set none.
	// +optional
	NetworkPolicy *NetworkPolicy `json:"networkPolicy,omitempty"`
	// region and failoverRegions, for Sandboxes that set no region (both
	// are taken together, so a failover list never names the Sandbox's own
	// region).
	// +optional
	Region VercelRegion `json:"region,omitempty"`
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=18
	FailoverRegions []VercelRegion `json:"failoverRegions,omitempty"`
	// snapshotRetention, for persistent Sandboxes that set none.
	// +optional
	SnapshotRetention *SnapshotRetention `json:"snapshotRetention,omitempty"`
	// maxSessionLengthSeconds is the longest a session of this class is
	// kept running by extensions (the plan's maximum session length of the
	// class's Vercel team); the manager's --max-session-length when unset.
	// 60 to 86400.
	// +optional
	// +kubebuilder:validation:Minimum=60
	// +kubebuilder:validation:Maximum=86400
	MaxSessionLengthSeconds *int64 `json:"maxSessionLengthSeconds,omitempty"`
}

// SandboxClassSpec is the desired state of a SandboxClass.
type SandboxClassSpec struct {
	// credentialsSecretRef names the Secret with the Vercel credentials of
	// the class, under the keys "token", "team-id" and "project-id" (as the
	// manager's own Secret; "teamId" and "projectId" are still read, with a
	// DeprecatedSecretKey event). A new token in it is used without a
	// restart.
	// +required
	CredentialsSecretRef ClassSecretReference `json:"credentialsSecretRef"`
	// defaults for the objects of the class.
	// +optional
	Defaults *SandboxClassDefaults `json:"defaults,omitempty"`
	// namespaceSelector selects the namespaces whose objects may use the
	// class; every namespace when unset or empty. An object in another
	// namespace is refused (Ready=False, reason ClassNotAllowed) without any
	// call to Vercel.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// prices of the class's Vercel team, which turn usage into money (kubectl
	// sandbox usage, money budgets of SandboxQuotas). Every unset price is
	// Vercel's published list price (docs/sandboxclass.md).
	// +optional
	Prices *SandboxPrices `json:"prices,omitempty"`
}

// SandboxClassStatus is the observed state of a SandboxClass.
type SandboxClassStatus struct {
	// observedGeneration is the generation last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// teamID and projectID are the ids read from the Secret.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	TeamID string `json:"teamID,omitempty"`
	// projectID is the Vercel project of the class.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ProjectID string `json:"projectID,omitempty"`
	// inUse counts the Sandboxes, SandboxSnapshots and SandboxForks of the
	// class. A class being deleted stays until it is 0.
	// +optional
	InUse int32 `json:"inUse,omitempty"`
	// conditions: CredentialsValid, Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SandboxClass is a set of Vercel credentials (team, project, token), the
// defaults for the objects using it, and the namespaces allowed to use it.
// Cluster-scoped, like StorageClass; only cluster admins should create them.
// It is in no kubectl category: a category is also reached by namespaced
// commands, and `kubectl delete <category> --all -n <ns>` would delete every
// SandboxClass of the cluster.
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=sbxclass
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="metadata.name of a SandboxClass must be at most 63 characters (it is a label value on the objects using it)"
// +kubebuilder:printcolumn:name="Team",type=string,JSONPath=`.status.teamID`,description="Vercel team"
// +kubebuilder:printcolumn:name="Project",type=string,JSONPath=`.status.projectID`,description="Vercel project"
// +kubebuilder:printcolumn:name="Credentials",type=string,JSONPath=`.status.conditions[?(@.type=="CredentialsValid")].status`,description="Vercel accepts the credentials"
// +kubebuilder:printcolumn:name="In use",type=integer,JSONPath=`.status.inUse`,description="Objects using the class"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SandboxClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec of the class.
	// +required
	Spec SandboxClassSpec `json:"spec"`
	// status of the class.
	// +optional
	Status SandboxClassStatus `json:"status,omitempty"`
}

// SandboxClassList contains a list of SandboxClass.
// +kubebuilder:object:root=true
type SandboxClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxClass `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &SandboxClass{}, &SandboxClassList{})
}
