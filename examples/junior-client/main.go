// Command junior-client shows how a Go program such as Junior uses the
// operator: it creates a Sandbox with the api/v1alpha1 types, waits for it to
// be Ready, sends activity heartbeats, prints what a client needs for the
// Vercel data plane (the session id and routes), and deletes it.
//
//	make dev   # in another terminal, then:
//	export KUBECONFIG=$PWD/bin/dev/kubeconfig
//	go run ./examples/junior-client --name conversation-42
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// lastActivity is the heartbeat annotation: the controller keeps the session
// up until spec.timeoutSeconds after the latest heartbeat (RFC 3339, UTC).
const lastActivity = "sandbox.sentry.io/last-activity"

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "Path to the kubeconfig (default $KUBECONFIG; in-cluster config when empty).")
	namespace := flag.String("namespace", "default", "Namespace of the Sandbox.")
	name := flag.String("name", "junior-example", "Name of the Sandbox, e.g. one per conversation.")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := run(ctx, *kubeconfig, *namespace, *name); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, namespace, name string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := sandboxv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}

	// Declare the sandbox. Creating is idempotent from the client's side: an
	// existing Sandbox of that name (a conversation that resumes) is reused.
	runtimeName := sandboxv1.Runtime("node24")
	timeout := int64(600)
	sbx := &sandboxv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: sandboxv1.SandboxSpec{
			Source:         sandboxv1.SandboxSource{Runtime: &runtimeName},
			Ports:          []int32{3000},
			TimeoutSeconds: &timeout, // idle window
		},
	}
	if err := c.Create(ctx, sbx); apierrors.IsAlreadyExists(err) {
		fmt.Printf("Sandbox %s/%s exists; reusing it\n", namespace, name)
	} else if err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	} else {
		fmt.Printf("Created Sandbox %s/%s\n", namespace, name)
	}

	// Wait for Ready: the controller created the Vercel sandbox and its
	// session runs. A Failed phase will not get better by waiting.
	key := client.ObjectKey{Namespace: namespace, Name: name}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, sbx); err != nil {
			return false, err
		}
		ready := meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionReady)
		if sbx.Status.Phase == sandboxv1.SandboxFailed && ready != nil {
			return false, fmt.Errorf("sandbox failed: %s: %s", ready.Reason, ready.Message)
		}
		return ready != nil && ready.Status == metav1.ConditionTrue, nil
	})
	if err != nil {
		return fmt.Errorf("wait for Ready: %w", err)
	}
	fmt.Printf("Ready: session %s\n", sbx.Status.SessionID)
	for _, r := range sbx.Status.Routes {
		fmt.Printf("  port %d -> %s\n", r.Port, r.URL)
	}

	// While the conversation is active, heartbeat now and then. A merge
	// patch of one annotation never conflicts with the controller's writes.
	for i := 1; i <= 2; i++ {
		patch := client.MergeFrom(sbx.DeepCopy())
		metav1.SetMetaDataAnnotation(&sbx.ObjectMeta, lastActivity, time.Now().UTC().Format(time.RFC3339))
		if err := c.Patch(ctx, sbx, patch); err != nil {
			return fmt.Errorf("heartbeat: %w", err)
		}
		fmt.Printf("Heartbeat %d: %s=%s\n", i, lastActivity, sbx.Annotations[lastActivity])
		time.Sleep(time.Second)
	}

	// Done with the conversation: delete it. The finalizer keeps the object
	// until the Vercel sandbox is gone, so wait for NotFound.
	if err := c.Delete(ctx, sbx); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete sandbox: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, sbx)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err != nil {
		return fmt.Errorf("wait for deletion: %w", err)
	}
	fmt.Printf("Deleted Sandbox %s/%s (and its Vercel sandbox)\n", namespace, name)
	return nil
}
