package controllers

// The key of the Secret-value digests in Sandbox status (status.secrets): a
// digest anyone could compute from a guessed value would let whoever may
// read a Sandbox confirm a guess, so digests are HMACs under a key only the
// manager holds. It lives in a Secret of the manager's own namespace (where
// no tenant object may point: the secret-references admission policy), so it
// survives restarts and is shared by every replica and shard: a key of its
// own per process would make every rotation check after a restart or a
// failover disagree with the recorded digests.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/getsentry/sandbox-controller/internal/admissionpolicy"
)

const (
	// DigestKeySecretName is the Secret, in the manager's namespace, that
	// holds the key of the Secret-value digests in Sandbox status. The
	// manager creates it when it is missing; deleting it makes the next
	// change of each referenced Secret count as a rotation once.
	DigestKeySecretName = "sandbox-controller-status-digest-key"
	digestKeyField      = "key"
	digestKeyBytes      = 32
)

// inClusterNamespace is where a pod reads its own namespace.
const inClusterNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// ManagerNamespace is the manager's own namespace: the pod's when it runs in
// a cluster, else the namespace config/default deploys it to.
func ManagerNamespace() string {
	if b, err := os.ReadFile(inClusterNamespace); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return admissionpolicy.ManagerNamespace
}

// LoadDigestKey reads the digest key from its Secret in namespace, creating
// the Secret with a random key when it does not exist. Replicas starting
// together race on the create; the loser reads the winner's key. Out of a
// cluster (make dev, the test suites) a missing namespace is created too; in
// a cluster it is the manager's pod's own, so it exists.
func LoadDigestKey(ctx context.Context, c client.Client, reader client.Reader, namespace string) ([]byte, error) {
	name := types.NamespacedName{Namespace: namespace, Name: DigestKeySecretName}
	for attempt := 0; ; attempt++ {
		sec := &corev1.Secret{}
		err := reader.Get(ctx, name, sec)
		if err == nil {
			key := sec.Data[digestKeyField]
			if len(key) < digestKeyBytes {
				return nil, fmt.Errorf("Secret %s holds no key %q of at least %d bytes: delete it and the manager creates a new one", name, digestKeyField, digestKeyBytes)
			}
			return key, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("read the status digest key (Secret %s): %w", name, err)
		}
		if attempt > 2 {
			return nil, fmt.Errorf("Secret %s was deleted while it was created", name)
		}
		key := make([]byte, digestKeyBytes)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: DigestKeySecretName,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "sandbox-controller"}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{digestKeyField: key},
		}
		err = c.Create(ctx, sec)
		if apierrors.IsNotFound(err) && !inCluster() {
			// The namespace is missing: only out of a cluster.
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); client.IgnoreAlreadyExists(err) != nil {
				return nil, fmt.Errorf("create the manager's namespace %s for the status digest key: %w", namespace, err)
			}
			err = c.Create(ctx, sec)
		}
		switch {
		case err == nil:
			return key, nil
		case apierrors.IsAlreadyExists(err):
			continue // another replica won the race: read its key
		default:
			return nil, fmt.Errorf("create the status digest key (Secret %s): %w", name, err)
		}
	}
}

func inCluster() bool {
	_, err := os.Stat(inClusterNamespace)
	return err == nil || !errors.Is(err, os.ErrNotExist)
}
