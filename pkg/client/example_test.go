package client_test

import (
	"context"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	acv1alpha1 "github.com/getsentry/sandbox-controller/pkg/client/applyconfiguration/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/pkg/client/clientset/versioned"
	"github.com/getsentry/sandbox-controller/pkg/client/informers/externalversions"
)

// Server-side apply with the generated apply configurations, and a lister
// fed by a shared informer (compiled, not run: see pkg/sandboxclient for
// examples that run).
func Example() {
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		panic(err)
	}
	cs, err := versioned.NewForConfig(cfg)
	if err != nil {
		panic(err)
	}
	sbx, err := cs.SandboxV1alpha1().Sandboxes("default").Apply(ctx,
		acv1alpha1.Sandbox("devbox", "default").
			WithSpec(acv1alpha1.SandboxSpec().
				WithSource(acv1alpha1.SandboxSource().WithRuntime(sandboxv1.Runtime("node24"))).
				WithPorts(3000)),
		metav1.ApplyOptions{FieldManager: "my-client"})
	if err != nil {
		panic(err)
	}
	fmt.Println(sbx.Name, sbx.Generation)

	factory := externalversions.NewSharedInformerFactoryWithOptions(cs, 0, externalversions.WithNamespace("default"))
	lister := factory.Sandbox().V1alpha1().Sandboxes().Lister()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	all, err := lister.Sandboxes("default").List(labels.Everything())
	if err != nil {
		panic(err)
	}
	fmt.Println(len(all))
}
