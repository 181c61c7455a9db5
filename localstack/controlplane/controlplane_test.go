package controlplane_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/getsentry/sandbox-controller/localstack/controlplane"
)

// TestBehavesLikeACluster checks what kube-controller-manager adds to a bare
// API server: namespaces finish deleting, owner references are garbage
// collected, and a ServiceAccount kubeconfig authenticates as that account.
func TestBehavesLikeACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{ControllerManager: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	if cp.ControllerManagerPID() == 0 {
		t.Fatal("kube-controller-manager does not run")
	}
	cs := kubernetes.NewForConfigOrDie(cp.Config)
	poll := func(what string, done func(context.Context) (bool, error)) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, done); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// Garbage collection: a ConfigMap owned by another goes with it.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gc"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	owner, err := cs.CoreV1().ConfigMaps("gc").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CoreV1().ConfigMaps("gc").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owned",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: owner.UID}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps("gc").Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("the owned ConfigMap was not garbage collected", func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ConfigMaps("gc").Get(ctx, "owned", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})

	// Namespace deletion finishes (a bare API server leaves it Terminating).
	if err := cs.CoreV1().Namespaces().Delete(ctx, "gc", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("the namespace was not deleted", func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Namespaces().Get(ctx, "gc", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})

	// The serviceaccount controller made "default"; its token authenticates as it.
	path := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if err := cp.WriteServiceAccountKubeconfig(ctx, "default", "default", path); err != nil {
		t.Fatal(err)
	}
	saCfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = kubernetes.NewForConfigOrDie(saCfg).CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("listing Secrets as default/default: %v, want forbidden", err)
	}
	if want := "system:serviceaccount:default:default"; err != nil && !strings.Contains(err.Error(), want) {
		t.Errorf("the refusal does not name %s: %v", want, err)
	}
}
