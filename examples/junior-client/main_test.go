package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/getsentry/sandbox-controller/localstack/clienttest"
	"github.com/getsentry/sandbox-controller/pkg/sandboxclient"
)

func TestMain(m *testing.M) { os.Exit(clienttest.Main(m)) }

// TestRun runs the example as `go run` does, against the dev environment.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, os.Getenv("KUBECONFIG"), "default", "conversation-1", false); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	for _, want := range []string{"Ready: Sandbox default/conversation-1 (session sbx_", "port 3000 -> ", "What is 6 x 7?", "Answer: 42", "Heartbeat sent", "Deleted Sandbox"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	sc, err := sandboxclient.NewForConfig(clienttest.Stack.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Clientset().SandboxV1alpha1().Sandboxes("default").Get(ctx, "conversation-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Sandbox is still there after the example: %v", err)
	}
}
