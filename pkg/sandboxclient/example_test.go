package sandboxclient_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/pkg/sandboxclient"
)

// A conversation gets its sandbox: created on first use, reused (and woken
// if idle) afterwards, and deleted when the conversation ends.
func ExampleClient_EnsureReady() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		panic(err)
	}
	c, err := sandboxclient.NewForConfig(cfg)
	if err != nil {
		panic(err)
	}

	runtime := sandboxv1.Runtime("node24")
	sbx, err := c.EnsureReady(ctx, &sandboxv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "conversation-42"},
		Spec: sandboxv1.SandboxSpec{
			Source: sandboxv1.SandboxSource{Runtime: &runtime},
			Ports:  []int32{3000},
		},
	})
	var failed *sandboxclient.ConditionError
	if errors.As(err, &failed) {
		fmt.Println("sandbox failed:", failed.Reason, failed.Message)
		return
	}
	if err != nil {
		panic(err)
	}
	fmt.Println("phase:", sbx.Status.Phase)
	fmt.Println("routes:", len(sbx.Status.Routes))

	if err := c.Delete(ctx, "default", "conversation-42"); err != nil {
		panic(err)
	}
	fmt.Println("deleted")
	// Output:
	// phase: Running
	// routes: 1
	// deleted
}

// Activity is reported as it happens; the Heartbeater turns it into at most
// one patch per interval.
func ExampleClient_StartHeartbeat() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		panic(err)
	}
	c, err := sandboxclient.NewForConfig(cfg)
	if err != nil {
		panic(err)
	}
	runtime := sandboxv1.Runtime("node24")
	if _, err := c.EnsureReady(ctx, &sandboxv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "busy-agent"},
		Spec:       sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Runtime: &runtime}},
	}); err != nil {
		panic(err)
	}

	hb := c.StartHeartbeat("default", "busy-agent", 30*time.Second)
	for range 10 { // e.g. each message of the conversation
		hb.Beat()
	}
	if err := hb.Stop(ctx); err != nil {
		panic(err)
	}
	fmt.Println("heartbeat sent")

	if err := c.Delete(ctx, "default", "busy-agent"); err != nil {
		panic(err)
	}
	// Output: heartbeat sent
}

// A snapshot of a Sandbox, three forks of it, scaled down to one.
func ExampleClient_Fork() {
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		panic(err)
	}
	c, err := sandboxclient.NewForConfig(cfg)
	if err != nil {
		panic(err)
	}
	if _, err := c.Snapshot(ctx, "default", "devbox", "devbox-base", sandboxclient.SnapshotOptions{KeepSourceRunning: true}); err != nil {
		panic(err)
	}
	if _, err := c.WaitSnapshotReady(ctx, "default", "devbox-base"); err != nil {
		panic(err)
	}
	if _, err := c.Fork(ctx, "default", "try", sandboxclient.ForkSource{Snapshot: "devbox-base"}, 3, sandboxclient.ForkOptions{}); err != nil {
		panic(err)
	}
	if _, err := c.WaitForkReady(ctx, "default", "try"); err != nil {
		panic(err)
	}
	children, err := c.ForkChildren(ctx, "default", "try")
	if err != nil {
		panic(err)
	}
	for _, child := range children {
		fmt.Println(child.Name, child.Status.SessionID)
	}
	if _, err := c.Scale(ctx, "default", "try", 1); err != nil {
		panic(err)
	}
	if err := c.DeleteFork(ctx, "default", "try"); err != nil {
		panic(err)
	}
}

// A conversation takes a warm Sandbox from its workspace's pool: the spec is
// the pool's template, with the conversation's own network policy; the
// result says whether a member was claimed or why it was created cold.
func ExampleClient_Claim() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		panic(err)
	}
	c, err := sandboxclient.NewForConfig(cfg)
	if err != nil {
		panic(err)
	}
	// The pool an operator of the platform declares once per workspace snapshot.
	runtime, replicas := sandboxv1.Runtime("node24"), int32(1)
	if _, err := c.Clientset().SandboxV1alpha1().SandboxPools("default").Create(ctx, &sandboxv1.SandboxPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "workspace-pool"},
		Spec: sandboxv1.SandboxPoolSpec{
			Replicas: &replicas,
			Template: sandboxv1.SandboxPoolTemplate{Spec: sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Runtime: &runtime}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		panic(err)
	}
	if _, err := c.WaitPoolReady(ctx, "default", "workspace-pool"); err != nil {
		panic(err)
	}

	sbx, claim, err := c.Claim(ctx, "default", "conversation-7", "workspace-pool", sandboxclient.ClaimOptions{
		Customize: func(s *sandboxv1.Sandbox) error {
			s.Spec.NetworkPolicy = &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkDenyAll}
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("phase:", sbx.Status.Phase)
	fmt.Println("claimed:", claim.Claimed, claim.Reason)

	if err := c.Delete(ctx, "default", "conversation-7"); err != nil {
		panic(err)
	}
	if err := c.DeletePool(ctx, "default", "workspace-pool"); err != nil {
		panic(err)
	}
	// Output:
	// phase: Running
	// claimed: true Claimed
}
