package controllers

// The key of the Secret-value digests in Sandbox status (status.secrets): a
// digest anyone could compute from a guessed value would let whoever may
// read a Sandbox confirm a guess, so digests are HMACs under a key only the
// manager holds. It lives in a Secret of the manager's own namespace (where
// no tenant object may point: the secret-references admission policy), so it
// survives restarts and is shared by every replica and shard: a key of its
// own per process would make every rotation check after a restart or a
// failover disagree with the recorded digests.
//
// The Secret is installed empty with the manager (config/rbac, and so the
// chart), and the manager may only get and update that one Secret (a Role
// with resourceNames): it may not create Secrets, because a manager that can
// create Secrets in its namespace can mint a token for any ServiceAccount
// there. On start it fills the empty Secret with a random key. The shipped
// manifest has no data, so `kubectl apply` and `helm upgrade` leave the key
// in place.

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// DigestKeySecretName is the default name of the Secret, in the
	// manager's namespace, that holds the key of the Secret-value digests in
	// Sandbox status: the name config/default gives it (the chart prefixes
	// it with the release's name and passes --status-digest-key-secret).
	// Removing its key (or the Secret, and applying it again) makes the next
	// change of each referenced Secret count as a rotation once.
	DigestKeySecretName = "sandbox-controller-status-digest-key"
	digestKeyField      = "key"
	digestKeyBytes      = 32
)

// DefaultManagerNamespace is the manager's namespace as config/default
// deploys it, which config/admission/secret-references.yaml names too.
const DefaultManagerNamespace = "sandbox-controller-system"

// inClusterNamespace is where a pod reads its own namespace.
const inClusterNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// ManagerNamespace is the manager's own namespace when nothing names it
// (cmd/manager's --manager-namespace): the pod's, read from its
// ServiceAccount mount, else $POD_NAMESPACE, else the namespace
// config/default deploys it to.
func ManagerNamespace() string {
	if b, err := os.ReadFile(inClusterNamespace); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	if ns := strings.TrimSpace(os.Getenv("POD_NAMESPACE")); ns != "" {
		return ns
	}
	return DefaultManagerNamespace
}

// DigestKeySecret says where the digest key is kept.
type DigestKeySecret struct {
	// Namespace is the manager's namespace; ManagerNamespace() when empty.
	Namespace string
	// Name is the Secret's name; DigestKeySecretName when empty.
	Name string
	// CreateMissing creates the Secret (and its namespace) when it does not
	// exist. Only for a manager run out of a cluster with an
	// administrator's credentials (the test suites, the benchmark); a
	// deployed manager may not create Secrets, and never sets it.
	CreateMissing bool
}

func (s DigestKeySecret) key() types.NamespacedName {
	n := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	if n.Namespace == "" {
		n.Namespace = ManagerNamespace()
	}
	if n.Name == "" {
		n.Name = DigestKeySecretName
	}
	return n
}

// LoadDigestKey returns the digest key held in the Secret s names, writing a
// random one into the Secret first when it holds none. The write is an
// update at the resourceVersion read, so of replicas starting together one
// writes and the others, refused with a conflict, read its key.
func LoadDigestKey(ctx context.Context, c client.Client, reader client.Reader, s DigestKeySecret) ([]byte, error) {
	name := s.key()
	for attempt := 0; ; attempt++ {
		if attempt > 4 {
			return nil, fmt.Errorf("the status digest key Secret %s changed on every attempt to write the status digest key", name)
		}
		sec, again, err := readDigestKeySecret(ctx, c, reader, name, s.CreateMissing)
		if err != nil {
			return nil, err
		}
		if again {
			continue
		}
		if key, ok, err := storedDigestKey(sec, name); ok || err != nil {
			return key, err
		}
		key, again, err := writeDigestKey(ctx, c, sec, name)
		if !again {
			return key, err
		}
	}
}

// readDigestKeySecret reads the key Secret; again when it was missing and
// has just been created (DigestKeySecret.CreateMissing): read it again.
func readDigestKeySecret(ctx context.Context, c client.Client, reader client.Reader, name types.NamespacedName, createMissing bool) (sec *corev1.Secret, again bool, err error) {
	sec = &corev1.Secret{}
	err = reader.Get(ctx, name, sec)
	switch {
	case apierrors.IsNotFound(err) && createMissing:
		if err := createDigestKeySecret(ctx, c, name); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, false, err
		}
		return nil, true, nil
	case apierrors.IsNotFound(err):
		return nil, false, fmt.Errorf("the status digest key Secret %s does not exist: make deploy and the Helm chart install it; create it empty (kubectl -n %s create secret generic %s) and the manager writes a key into it", name, name.Namespace, name.Name)
	case err != nil:
		return nil, false, fmt.Errorf("read the status digest key (Secret %s): %w", name, err)
	}
	return sec, false, nil
}

// storedDigestKey is the key sec holds, ok when it holds one; one too short
// is refused.
func storedDigestKey(sec *corev1.Secret, name types.NamespacedName) (key []byte, ok bool, err error) {
	key, ok = sec.Data[digestKeyField]
	if !ok || len(key) == 0 {
		return nil, false, nil
	}
	if len(key) < digestKeyBytes {
		return nil, true, fmt.Errorf("the status digest key Secret %s holds a key %q of %d bytes, fewer than %d: remove the field and the manager writes a new key", name, digestKeyField, len(key), digestKeyBytes)
	}
	return key, true, nil
}

// writeDigestKey writes a random key into sec; again when another replica
// wrote first (or the Secret went): read again.
func writeDigestKey(ctx context.Context, c client.Client, sec *corev1.Secret, name types.NamespacedName) (key []byte, again bool, err error) {
	key = make([]byte, digestKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, false, err
	}
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	sec.Data[digestKeyField] = key
	// sec carries the resourceVersion read: a replica that wrote first
	// makes this a conflict, and the next round reads its key.
	switch err := c.Update(ctx, sec); {
	case err == nil:
		return key, false, nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return nil, true, nil
	default:
		return nil, false, fmt.Errorf("write the status digest key into Secret %s: %w", name, err)
	}
}

// createDigestKeySecret creates the empty key Secret, and its namespace when
// that is missing, as an install would have (DigestKeySecret.CreateMissing).
func createDigestKeySecret(ctx context.Context, c client.Client, name types.NamespacedName) error {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: name.Namespace, Name: name.Name,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "sandbox-controller"}},
		Type: corev1.SecretTypeOpaque,
	}
	err := c.Create(ctx, sec)
	if apierrors.IsNotFound(err) {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name.Namespace}}); client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("create the manager's namespace %s for the status digest key: %w", name.Namespace, err)
		}
		err = c.Create(ctx, sec)
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the status digest key Secret %s: %w", name, err)
	}
	return err
}
