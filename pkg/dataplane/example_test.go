package dataplane_test

import (
	"context"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/pkg/dataplane"
	"github.com/getsentry/sandbox-controller/pkg/sandboxclient"
)

// From a Sandbox to exec: the control plane (sandboxclient) makes it Ready,
// the data plane runs a command in its session. Neither needs a Vercel URL
// or session id: the kubeconfig and the VERCEL_* variables are all.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		panic(err)
	}
	sc, err := sandboxclient.NewForConfig(cfg)
	if err != nil {
		panic(err)
	}
	runtime := sandboxv1.Runtime("node24")
	sbx, err := sc.EnsureReady(ctx, &sandboxv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "exec-example"},
		Spec:       sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Runtime: &runtime}},
	})
	if err != nil {
		panic(err)
	}
	defer sc.Delete(ctx, "default", "exec-example")

	dp, err := dataplane.NewFromEnv()
	if err != nil {
		panic(err)
	}
	session, err := dp.Session(sbx)
	if err != nil {
		panic(err)
	}
	if err := session.WriteFiles(ctx, dataplane.File{Path: "hello.txt", Content: []byte("hello from a file\n")}); err != nil {
		panic(err)
	}
	code, err := session.Run(ctx, dataplane.Command{Name: "cat", Args: []string{"hello.txt"}}, os.Stdout, os.Stderr)
	if err != nil {
		panic(err)
	}
	fmt.Println("exit code:", code)
	// Output:
	// hello from a file
	// exit code: 0
}
