package sandboxclient_test

import (
	"context"
	"errors"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/clienttest"
	"github.com/getsentry/sandbox-controller/pkg/sandboxclient"
)

func node24(namespace, name string) *sandboxv1.Sandbox {
	rt := sandboxv1.Runtime("node24")
	return &sandboxv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Runtime: &rt}},
	}
}

// The client libraries must not pull the operator's framework into a client
// program.
func TestClientPackagesDependNotOnControllerRuntime(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/getsentry/sandbox-controller/pkg/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "sigs.k8s.io/controller-runtime") {
			t.Errorf("pkg/... depends on %s", pkg)
		}
	}
}

func TestEnsureReadyCreatesAndWatches(t *testing.T) {
	c, log, ns := newClient(t)
	ctx := testContext(t, 2*time.Minute)

	sbx, err := c.EnsureReady(ctx, node24(ns, "fresh"))
	if err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(sbx.Status.Conditions, sandboxv1.ConditionReady) || sbx.Status.SessionID == "" {
		t.Fatalf("EnsureReady returned a Sandbox that is not Ready: phase %s, session %q", sbx.Status.Phase, sbx.Status.SessionID)
	}
	if sbx.Annotations[sandboxv1.AnnotationLastActivity] == "" {
		t.Errorf("created without the %s annotation", sandboxv1.AnnotationLastActivity)
	}
	// Waiting watched: one list and watches, no GET of the object in a loop.
	if n := log.count("GET", "watch=true"); n == 0 {
		t.Errorf("no watch request; requests:\n%s", log)
	}
	if n := log.count("GET", "/sandboxes/fresh?"); n != 0 {
		t.Errorf("%d GETs of the Sandbox (polling); requests:\n%s", n, log)
	}

	// Again: the existing Sandbox is reused (same session) and heartbeated.
	before := log.count("PATCH", "/sandboxes/fresh")
	again, err := c.EnsureReady(ctx, node24(ns, "fresh"))
	if err != nil {
		t.Fatal(err)
	}
	if again.UID != sbx.UID || again.Status.SessionID != sbx.Status.SessionID {
		t.Errorf("EnsureReady of an existing Sandbox returned uid %s session %s, want %s %s", again.UID, again.Status.SessionID, sbx.UID, sbx.Status.SessionID)
	}
	if n := log.count("PATCH", "/sandboxes/fresh") - before; n != 1 {
		t.Errorf("%d heartbeat patches for an existing Sandbox, want 1", n)
	}
}

func TestGetOrCreateReturnsExisting(t *testing.T) {
	c, _, ns := newClient(t)
	ctx := testContext(t, time.Minute)
	first, created, err := c.GetOrCreate(ctx, node24(ns, "once"))
	if err != nil || !created {
		t.Fatalf("first GetOrCreate: created=%v err=%v", created, err)
	}
	other := node24(ns, "once")
	other.Spec.Ports = []int32{3000}
	second, created, err := c.GetOrCreate(ctx, other)
	if err != nil || created {
		t.Fatalf("second GetOrCreate: created=%v err=%v", created, err)
	}
	if second.UID != first.UID || len(second.Spec.Ports) != 0 {
		t.Errorf("second GetOrCreate returned uid %s ports %v, want the existing %s without ports", second.UID, second.Spec.Ports, first.UID)
	}
}

func TestWaitReadyFailsWithTheConditionReason(t *testing.T) {
	c, _, ns := newClient(t)
	ctx := testContext(t, 2*time.Minute)
	sbx := node24(ns, "bad-setup")
	sbx.Spec.Setup = []sandboxv1.SetupCommand{{Name: "fail", Command: "sh", Args: []string{"-c", "echo broken >&2; exit 3"}}}

	start := time.Now()
	_, err := c.EnsureReady(ctx, sbx)
	var ce *sandboxclient.ConditionError
	if !errors.As(err, &ce) {
		t.Fatalf("EnsureReady error = %v, want a *ConditionError", err)
	}
	if ce.Reason != sandboxv1.ReasonSetupFailed || ce.Phase != string(sandboxv1.SandboxFailed) || ce.Name != "bad-setup" {
		t.Errorf("ConditionError = %+v, want phase Failed reason SetupFailed for bad-setup", ce)
	}
	if !strings.Contains(err.Error(), "3") || !strings.Contains(err.Error(), sandboxv1.ReasonSetupFailed) {
		t.Errorf("error %q does not carry the reason and the exit code", err)
	}
	// It returned on the status, not on the context's deadline.
	if d, _ := ctx.Deadline(); time.Until(d) < 30*time.Second {
		t.Errorf("returned after %s, close to the deadline", time.Since(start))
	}
}

func TestWaitReadyDeadlineSaysLastStatus(t *testing.T) {
	c, _, ns := newClient(t)
	sbx := node24(ns, "waits")
	sbx.Spec.Source = sandboxv1.SandboxSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "not-yet"}}
	if _, _, err := c.GetOrCreate(testContext(t, time.Minute), sbx); err != nil {
		t.Fatal(err)
	}
	// Let the controller report SnapshotRefNotFound first.
	if _, err := c.WaitReady(testContext(t, 5*time.Second), ns, "waits"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady error = %v, want the context's deadline", err)
	}
	_, err := c.WaitReady(testContext(t, 2*time.Second), ns, "waits")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), sandboxv1.ReasonSnapshotRefNotFound) {
		t.Errorf("WaitReady error = %v, want the deadline and the last status (%s)", err, sandboxv1.ReasonSnapshotRefNotFound)
	}
}

func TestWaitReadyNotFound(t *testing.T) {
	c, _, ns := newClient(t)
	_, err := c.WaitReady(testContext(t, 30*time.Second), ns, "missing")
	if !apierrors.IsNotFound(err) {
		t.Errorf("WaitReady of a missing Sandbox = %v, want NotFound", err)
	}
}

func heartbeaterRunning() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "(*Heartbeater).loop")
}

func TestHeartbeaterCoalesces(t *testing.T) {
	c, log, ns := newClient(t)
	ctx := testContext(t, time.Minute)
	if _, _, err := c.GetOrCreate(ctx, node24(ns, "busy")); err != nil {
		t.Fatal(err)
	}
	patches := func() int { return log.count("PATCH", "/sandboxes/busy") }
	annotation := func() time.Time {
		s, err := c.Clientset().SandboxV1alpha1().Sandboxes(ns).Get(ctx, "busy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		at, _ := time.Parse(time.RFC3339, s.Annotations[sandboxv1.AnnotationLastActivity])
		return at
	}

	h := c.StartHeartbeat(ns, "busy", time.Hour)
	h.Beat() // sent at once
	for deadline := time.Now().Add(10 * time.Second); annotation().IsZero(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first Beat was not sent")
		}
	}
	time.Sleep(1100 * time.Millisecond) // the next heartbeat is a later second
	var last time.Time
	for range 100 {
		h.Beat()
		last = time.Now()
	}
	time.Sleep(300 * time.Millisecond)
	if n := patches(); n != 1 {
		t.Fatalf("%d patches within the interval, want 1 (the first Beat)", n)
	}
	if err := h.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := patches(); n != 2 {
		t.Errorf("%d patches for 101 Beats, want 2 (the first, and the rest coalesced at Stop)", n)
	}
	if got := annotation(); got.Before(last.Truncate(time.Second)) {
		t.Errorf("annotation %s is older than the last Beat %s", got, last)
	}
	if heartbeaterRunning() {
		t.Error("the Heartbeater's goroutine still runs after Stop")
	}
}

func TestPauseAndResume(t *testing.T) {
	c, _, ns := newClient(t)
	ctx := testContext(t, 3*time.Minute)
	sbx, err := c.EnsureReady(ctx, node24(ns, "pausable"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pause(ctx, ns, "pausable"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "pausable"); !errors.Is(err, sandboxclient.ErrStopped) {
		t.Errorf("WaitReady of a paused Sandbox = %v, want ErrStopped", err)
	}
	stopped, err := c.WaitStopped(ctx, ns, "pausable")
	if err != nil {
		t.Fatal(err)
	}
	if stopped.Status.Phase != sandboxv1.SandboxStopped || meta.IsStatusConditionTrue(stopped.Status.Conditions, sandboxv1.ConditionReady) {
		t.Errorf("after Pause: phase %s, want Stopped and not Ready", stopped.Status.Phase)
	}
	if s, ok := emuSession(sbx.Status.SessionID); !ok || s.Status == vercel.SessionRunning {
		t.Errorf("Vercel session %s still running after WaitStopped", sbx.Status.SessionID)
	}
	if _, err := c.Resume(ctx, ns, "pausable"); err != nil {
		t.Fatal(err)
	}
	resumed, err := c.WaitReady(ctx, ns, "pausable")
	if err != nil {
		t.Fatal(err)
	}
	if resumed.Status.SessionID == "" || resumed.Status.SessionID == sbx.Status.SessionID {
		t.Errorf("resumed in session %q, want a new session (was %s)", resumed.Status.SessionID, sbx.Status.SessionID)
	}
}

func emuSession(id string) (vercel.Session, bool) {
	for _, s := range clienttest.Stack.Emulator.Sessions() {
		if s.ID == id {
			return s, true
		}
	}
	return vercel.Session{}, false
}

func TestDeleteWaitsUntilGone(t *testing.T) {
	c, _, ns := newClient(t)
	ctx := testContext(t, 2*time.Minute)
	sbx, err := c.EnsureReady(ctx, node24(ns, "doomed"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, ns, "doomed"); err != nil {
		t.Fatal(err)
	}
	// Right after Delete returns: the finalizer ran, so the object and the
	// Vercel sandbox are gone.
	_, err = c.Clientset().SandboxV1alpha1().Sandboxes(ns).Get(ctx, "doomed", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("Get after Delete = %v, want NotFound", err)
	}
	if _, ok := clienttest.Stack.Emulator.Sandbox(sbx.Status.VercelName); ok {
		t.Errorf("Vercel sandbox %s still exists after Delete", sbx.Status.VercelName)
	}
	// Deleting what is gone is not an error.
	if err := c.Delete(ctx, ns, "doomed"); err != nil {
		t.Errorf("second Delete = %v", err)
	}
}

func TestSnapshotForkScale(t *testing.T) {
	c, _, ns := newClient(t)
	ctx := testContext(t, 4*time.Minute)
	if _, err := c.EnsureReady(ctx, node24(ns, "origin")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(ctx, ns, "origin", "origin-snap", sandboxclient.SnapshotOptions{KeepSourceRunning: true}); err != nil {
		t.Fatal(err)
	}
	snap, err := c.WaitSnapshotReady(ctx, ns, "origin-snap")
	if err != nil {
		t.Fatal(err)
	}
	if !snap.Status.ReadyToUse || snap.Status.SnapshotID == "" {
		t.Fatalf("snapshot not ready to use: %+v", snap.Status)
	}

	if _, err := c.Fork(ctx, ns, "kids", sandboxclient.ForkSource{Snapshot: "origin-snap"}, 2, sandboxclient.ForkOptions{}); err != nil {
		t.Fatal(err)
	}
	fork, err := c.WaitForkReady(ctx, ns, "kids")
	if err != nil {
		t.Fatal(err)
	}
	if fork.Status.ReadyReplicas != 2 {
		t.Errorf("fork ready replicas %d, want 2", fork.Status.ReadyReplicas)
	}
	kids, err := c.ForkChildren(ctx, ns, "kids")
	if err != nil || len(kids) != 2 {
		t.Fatalf("ForkChildren = %d, %v; want 2", len(kids), err)
	}
	for _, k := range kids {
		if k.Status.BootedFrom == nil || k.Status.BootedFrom.SnapshotID != snap.Status.SnapshotID {
			t.Errorf("child %s booted from %+v, want snapshot %s", k.Name, k.Status.BootedFrom, snap.Status.SnapshotID)
		}
	}

	if _, err := c.Scale(ctx, ns, "kids", 1); err != nil {
		t.Fatal(err)
	}
	if fork, err = c.WaitForkReady(ctx, ns, "kids"); err != nil {
		t.Fatal(err)
	}
	if fork.Status.Replicas != 1 || len(fork.Status.Children) != 1 || fork.Status.Children[0].Name != "kids-0" {
		t.Errorf("after Scale(1): replicas %d children %+v, want kids-0 only", fork.Status.Replicas, fork.Status.Children)
	}

	if err := c.DeleteFork(ctx, ns, "kids"); err != nil {
		t.Fatal(err)
	}
	if kids, err := c.ForkChildren(ctx, ns, "kids"); err != nil || len(kids) != 0 {
		t.Errorf("after DeleteFork: %d children, %v", len(kids), err)
	}
	if err := c.DeleteSnapshot(ctx, ns, "origin-snap"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Clientset().SandboxV1alpha1().SandboxSnapshots(ns).Get(ctx, "origin-snap", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Get after DeleteSnapshot = %v, want NotFound", err)
	}
}

func TestForkNeedsOneSource(t *testing.T) {
	c, _, ns := newClient(t)
	ctx := testContext(t, time.Minute)
	for _, src := range []sandboxclient.ForkSource{{}, {Sandbox: "a", Snapshot: "b"}} {
		if _, err := c.Fork(ctx, ns, "bad", src, 1, sandboxclient.ForkOptions{}); err == nil {
			t.Errorf("Fork with source %+v succeeded", src)
		}
	}
}

func TestWaitForSeesChanges(t *testing.T) {
	c, _, ns := newClient(t)
	ctx := testContext(t, time.Minute)
	if _, _, err := c.GetOrCreate(ctx, node24(ns, "watched")); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(time.Hour).Truncate(time.Second)
	go func() {
		time.Sleep(500 * time.Millisecond)
		if err := c.Heartbeat(ctx, ns, "watched", at); err != nil {
			t.Error(err)
		}
	}()
	got, err := c.WaitFor(ctx, ns, "watched", func(s *sandboxv1.Sandbox) (bool, error) {
		return s.Annotations[sandboxv1.AnnotationLastActivity] == at.UTC().Format(time.RFC3339), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[sandboxv1.AnnotationLastActivity] != at.UTC().Format(time.RFC3339) {
		t.Errorf("WaitFor returned annotation %q", got.Annotations[sandboxv1.AnnotationLastActivity])
	}
	boom := errors.New("boom")
	if _, err := c.WaitFor(ctx, ns, "watched", func(*sandboxv1.Sandbox) (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Errorf("WaitFor with a failing check = %v, want its error", err)
	}
}
