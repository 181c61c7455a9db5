// Command junior-client shows how a Go program such as Junior uses the
// operator with pkg/sandboxclient and pkg/dataplane: it gets (or creates) a
// Sandbox for a conversation and waits for it to be Ready, runs a command
// in it and reads a file back, reports activity with a heartbeat, and
// deletes it when the conversation ends. It never sees a Vercel URL or
// session id: the kubeconfig and the VERCEL_* variables are all it needs.
//
//	make dev   # in another terminal, then:
//	source bin/dev/env   # KUBECONFIG and VERCEL_* as make dev prints them
//	go run ./examples/junior-client --name conversation-42
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/pkg/dataplane"
	"github.com/getsentry/sandbox-controller/pkg/sandboxclient"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "Path to the kubeconfig (default $KUBECONFIG; in-cluster config when empty).")
	namespace := flag.String("namespace", "default", "Namespace of the Sandbox.")
	name := flag.String("name", "junior-example", "Name of the Sandbox, e.g. one per conversation.")
	keep := flag.Bool("keep", false, "Keep the Sandbox at the end instead of deleting it (the conversation goes on).")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout, *kubeconfig, *namespace, *name, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, kubeconfig, namespace, name string, keep bool) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	sc, err := sandboxclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dp, err := dataplane.NewFromEnv()
	if err != nil {
		return fmt.Errorf("data plane (set VERCEL_TOKEN, VERCEL_TEAM_ID, VERCEL_PROJECT_ID): %w", err)
	}

	// Declare the conversation's sandbox and wait for it. An existing one (a
	// conversation that resumes) is reused with its files, and woken if it
	// went idle. A failure says why, from the Sandbox's Ready condition.
	runtime := sandboxv1.Runtime("node24")
	timeout := int64(600) // idle window: stop 10 minutes after the last heartbeat
	sbx, err := sc.EnsureReady(ctx, &sandboxv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: sandboxv1.SandboxSpec{
			Source:         sandboxv1.SandboxSource{Runtime: &runtime},
			Ports:          []int32{3000},
			TimeoutSeconds: &timeout,
		},
	})
	var failed *sandboxclient.ConditionError
	if errors.As(err, &failed) {
		return fmt.Errorf("sandbox cannot become ready (%s): %s", failed.Reason, failed.Message)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Ready: Sandbox %s/%s (session %s)\n", namespace, name, sbx.Status.SessionID)
	for _, r := range sbx.Status.Routes {
		fmt.Fprintf(out, "  port %d -> %s\n", r.Port, r.URL)
	}

	// While the conversation is active, report activity as it happens; the
	// Heartbeater sends at most one patch per interval.
	hb := sc.StartHeartbeat(namespace, name, 30*time.Second)
	hb.Beat()

	// Work in the sandbox: a file in, a command, a file out.
	session, err := dp.Session(sbx)
	if err != nil {
		return err
	}
	if err := session.WriteFiles(ctx, dataplane.File{Path: "question.txt", Content: []byte("What is 6 x 7?\n")}); err != nil {
		return err
	}
	hb.Beat()
	code, err := session.Run(ctx, dataplane.Command{
		Name: "sh", Args: []string{"-c", "cat question.txt; echo 42 > answer.txt"},
	}, out, os.Stderr)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("command exited with %d", code)
	}
	answer, err := session.ReadFile(ctx, "answer.txt")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Answer: %s", answer)
	hb.Beat()
	if err := hb.Stop(ctx); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	fmt.Fprintln(out, "Heartbeat sent")

	if keep {
		return nil
	}
	// Done with the conversation: delete it and wait until the Vercel
	// sandbox is gone too.
	if err := sc.Delete(ctx, namespace, name); err != nil {
		return err
	}
	fmt.Fprintf(out, "Deleted Sandbox %s/%s (and its Vercel sandbox)\n", namespace, name)
	return nil
}
