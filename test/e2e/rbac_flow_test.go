package e2e

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/managerpod"
)

// TestManagerRunsWithDeployedRBAC runs the real manager binary as the
// ServiceAccount `make deploy` creates, with exactly the RBAC it binds, and
// drives every controller through a user's flow with the real kubectl:
// a Sandbox with env from a Secret and setup commands, a capture, a fork,
// `kubectl scale`, a pause and a resume, and the delete of everything. A
// permission the manager lacks shows up as "forbidden" in its log or events
// (or as a step that never completes), and fails the test.
func TestManagerRunsWithDeployedRBAC(t *testing.T) {
	e := newEnv(t, envOptions{noManager: true})
	mgr := e.startManager("manager")

	t.Run("granted rules", func(t *testing.T) { checkLiveManagerRBAC(t, e) })

	start := time.Now()
	rbacFlow(t, e, mgr)
	t.Logf("flow took %s", time.Since(start).Round(100*time.Millisecond))
}

func rbacFlow(t *testing.T, e *env, mgr *managerpod.Process) {
	const (
		ns       = "rbac-flow"
		source   = "source"
		snapshot = "source-capture"
		fork     = "fanout"
	)
	// kubectl runs the real kubectl as the administrator, and gives up as
	// soon as the manager's log reports a refused request: a wait for a
	// condition a missing permission keeps from coming fails at once.
	kubectl := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		gaveUp := make(chan struct{})
		go func() {
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					if refused(mgr) {
						close(gaveUp)
						cancel()
						return
					}
				}
			}
		}()
		cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", e.kubeconfig}, args...)...)
		out, err := cmd.CombinedOutput()
		select {
		case <-gaveUp:
			t.Fatalf("kubectl %s: stopped, the manager's log reports a forbidden request", strings.Join(args, " "))
		default:
		}
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	vc, err := vercel.New(vercel.Config{BaseURL: e.emuURL, Token: e.emu.Token(), TeamID: teamID, ProjectID: projectID})
	must(t, err)
	readFile := func(sbx, path string) string {
		t.Helper()
		var s sandboxv1.Sandbox
		must(t, e.client.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: sbx}, &s))
		data, err := vc.ReadFile(e.ctx, s.Status.SessionID, path, "")
		if err != nil {
			t.Fatalf("read %s in Sandbox %s (session %s): %v", path, sbx, s.Status.SessionID, err)
		}
		return string(data)
	}

	// The Secret's value is random and never printed: kubectl reads it from
	// a file, and the test compares digests only.
	secretValue := "sk_test_" + randomHex(t, 16)

	// Checked however the flow ends (before the manager is stopped), so that
	// a refusal is named as the cause of a step that never completed.
	t.Cleanup(func() {
		logText := mgr.Log()
		if refused(mgr) {
			t.Errorf("the manager's log reports forbidden requests:\n%s", grepLines(logText, "forbidden"))
		}
		if strings.Contains(logText, secretValue) {
			t.Error("the manager's log contains the Secret's value")
		}
		if mgr.Exited() {
			t.Errorf("the manager exited: %v", mgr.Err())
		}
	})

	kubectl("create", "namespace", ns)
	secretFile := filepath.Join(t.TempDir(), "key")
	must(t, os.WriteFile(secretFile, []byte(secretValue), 0o600))
	kubectl("create", "secret", "generic", "api-key", "-n", ns, "--from-file=key="+secretFile)
	must(t, os.Remove(secretFile))
	sum := sha256.Sum256([]byte(secretValue))
	wantDigest := hex.EncodeToString(sum[:]) + "\n"

	// A Sandbox whose env reads the Secret, with setup commands that leave
	// evidence of what they received.
	e.apply(fmt.Sprintf(`apiVersion: sandbox.sentry.io/v1alpha1
kind: Sandbox
metadata:
  name: %s
  namespace: %s
spec:
  source:
    runtime: node24
  timeoutSeconds: 1800
  env:
  - name: GREETING
    value: hello
  - name: API_KEY
    valueFrom:
      secretKeyRef:
        name: api-key
        key: key
  setup:
  - name: digest
    command: sh
    args: ["-c", "printf %%s \"$API_KEY\" | sha256sum | cut -d' ' -f1 > /vercel/sandbox/api-key.sha256"]
  - name: greet
    command: sh
    args: ["-c", "echo \"$GREETING\" >> /vercel/sandbox/setup.log"]
`, source, ns))
	kubectl("wait", "--for=condition=Ready", "sandbox/"+source, "-n", ns, "--timeout=120s")
	if got := readFile(source, "/vercel/sandbox/api-key.sha256"); got != wantDigest {
		t.Fatalf("the setup command saw an API_KEY whose SHA-256 is %q, want the Secret's %q", strings.TrimSpace(got), strings.TrimSpace(wantDigest))
	}
	if got := readFile(source, "/vercel/sandbox/setup.log"); got != "hello\n" {
		t.Fatalf("setup.log = %q, want %q (setup ran once, with the plain env entry)", got, "hello\n")
	}
	var src sandboxv1.Sandbox
	must(t, e.client.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: source}, &src))
	if src.Status.Setup == nil || src.Status.Setup.Completed != 2 {
		t.Fatalf("status.setup = %+v, want 2 completed steps", src.Status.Setup)
	}

	// Capture it; keepSourceRunning resumes the source afterwards.
	e.apply(fmt.Sprintf(`apiVersion: sandbox.sentry.io/v1alpha1
kind: SandboxSnapshot
metadata:
  name: %s
  namespace: %s
spec:
  source:
    sandboxRef:
      name: %s
  keepSourceRunning: true
`, snapshot, ns, source))
	kubectl("wait", "--for=jsonpath={.status.readyToUse}=true", "sandboxsnapshot/"+snapshot, "-n", ns, "--timeout=120s")
	kubectl("wait", "--for=condition=Ready", "sandboxsnapshot/"+snapshot, "-n", ns, "--timeout=10s")
	var snap sandboxv1.SandboxSnapshot
	must(t, e.client.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: snapshot}, &snap))
	if !strings.HasPrefix(snap.Status.SnapshotID, "snap_") {
		t.Fatalf("status.snapshotID = %q", snap.Status.SnapshotID)
	}
	eventuallyManager(t, mgr, 60*time.Second, func() error {
		var s sandboxv1.SandboxSnapshot
		if err := e.client.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: snapshot}, &s); err != nil {
			return err
		}
		if s.Status.Capture == nil || s.Status.Capture.ResumedSessionID == "" {
			return fmt.Errorf("the capture has not resumed the source yet: %+v", s.Status.Capture)
		}
		return nil
	})
	kubectl("wait", "--for=condition=Ready", "sandbox/"+source, "-n", ns, "--timeout=120s")

	// Fork two children from the capture; their env reads the Secret too.
	e.apply(fmt.Sprintf(`apiVersion: sandbox.sentry.io/v1alpha1
kind: SandboxFork
metadata:
  name: %s
  namespace: %s
spec:
  source:
    snapshotRef:
      name: %s
  replicas: 2
  template:
    metadata:
      labels:
        example.com/flow: rbac
    spec:
      timeoutSeconds: 900
      env:
      - name: API_KEY
        valueFrom:
          secretKeyRef:
            name: api-key
            key: key
`, fork, ns, snapshot))
	kubectl("wait", "--for=condition=Ready", "sandboxfork/"+fork, "-n", ns, "--timeout=120s")
	waitForkReplicas(t, e, mgr, ns, fork, 2)
	if got := readFile(fork+"-1", "/vercel/sandbox/api-key.sha256"); got != wantDigest {
		t.Fatalf("child %s-1 booted from the capture has api-key.sha256 %q, want the source's", fork, strings.TrimSpace(got))
	}

	// kubectl scale goes through the CRD's scale subresource.
	kubectl("scale", "sandboxfork/"+fork, "-n", ns, "--replicas=3")
	kubectl("wait", "--for=jsonpath={.status.readyReplicas}=3", "sandboxfork/"+fork, "-n", ns, "--timeout=120s")
	kubectl("wait", "--for=condition=Ready", "sandboxfork/"+fork, "-n", ns, "--timeout=60s")
	waitForkReplicas(t, e, mgr, ns, fork, 3)
	kubectl("wait", "--for=condition=Ready", "sandbox", "-l", sandboxv1.LabelFork+"="+fork, "-n", ns, "--timeout=60s")

	// Pause and resume the source.
	must(t, e.client.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: source}, &src))
	before := src.Status.SessionID
	kubectl("patch", "sandbox/"+source, "-n", ns, "--type=merge", "-p", `{"spec":{"state":"Stopped"}}`)
	kubectl("wait", "--for=jsonpath={.status.phase}=Stopped", "sandbox/"+source, "-n", ns, "--timeout=120s")
	if remote, ok := e.emu.Sandbox(src.Status.VercelName); !ok || remote.Status != vercel.SessionStopped {
		t.Fatalf("paused: Vercel sandbox %s is %q (exists %v), want stopped", src.Status.VercelName, remote.Status, ok)
	}
	kubectl("patch", "sandbox/"+source, "-n", ns, "--type=merge", "-p", `{"spec":{"state":"Running"}}`)
	kubectl("wait", "--for=condition=Ready", "sandbox/"+source, "-n", ns, "--timeout=120s")
	must(t, e.client.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: source}, &src))
	if src.Status.SessionID == "" || src.Status.SessionID == before {
		t.Fatalf("resumed in session %q, want a new one (was %q)", src.Status.SessionID, before)
	}
	if got := readFile(source, "/vercel/sandbox/setup.log"); got != "hello\n" {
		t.Fatalf("after the resume setup.log = %q, want %q (the filesystem kept, setup not run again)", got, "hello\n")
	}

	// The events the controllers recorded (events.k8s.io) reached the API.
	wantEvents := map[string][]string{
		"Sandbox/" + source:           {"Created", "SetupStarted", "Resumed"},
		"SandboxSnapshot/" + snapshot: {"SnapshotCreated"},
		"SandboxFork/" + fork:         {"ChildCreated"},
		"Sandbox/" + fork + "-2":      {"Created"},
	}
	eventuallyManager(t, mgr, 30*time.Second, func() error {
		got := eventReasons(t, e, ns)
		for obj, reasons := range wantEvents {
			for _, r := range reasons {
				if !slices.Contains(got[obj], r) {
					return fmt.Errorf("no %s event for %s; events: %v", r, obj, got)
				}
			}
		}
		return nil
	})
	if out := kubectl("events", "-n", ns, "--for", "sandbox/"+source); !strings.Contains(out, "SetupStarted") {
		t.Errorf("kubectl events --for sandbox/%s shows no SetupStarted:\n%s", source, out)
	}

	// What Vercel holds for this namespace, to check it is all gone later.
	sessions := map[string]bool{}
	for _, s := range e.emu.Sessions() {
		if strings.HasPrefix(s.SourceSandboxName, ns+"-") {
			sessions[s.ID] = true
		}
	}
	liveSnapshots := func() []string {
		var ids []string
		for _, s := range e.emu.Snapshots() {
			if sessions[s.SourceSessionID] && s.Status != vercel.SnapshotDeleted {
				ids = append(ids, s.ID+" ("+string(s.Status)+")")
			}
		}
		return ids
	}
	liveSandboxes := func() []string {
		var names []string
		for _, s := range e.emu.LiveSandboxes() {
			if strings.HasPrefix(s.Name, ns+"-") {
				names = append(names, s.Name)
			}
		}
		return names
	}
	if n := len(liveSandboxes()); n != 4 {
		t.Fatalf("Vercel holds %d sandboxes of the namespace before the delete, want 4: %v", n, liveSandboxes())
	}
	if len(liveSnapshots()) == 0 {
		t.Fatal("Vercel holds no snapshot of the namespace before the delete (the capture at least)")
	}

	// Delete everything, as a user would.
	kubectl("delete", "sandboxfork,sandboxsnapshot,sandbox", "--all", "-n", ns, "--wait", "--timeout=180s")
	if out := kubectl("get", "sentry-sandboxes", "-n", ns, "-o", "name"); strings.TrimSpace(out) != "" {
		t.Fatalf("after the delete the namespace still holds:\n%s", out)
	}
	eventuallyManager(t, mgr, 30*time.Second, func() error {
		got := eventReasons(t, e, ns)
		if !slices.Contains(got["Sandbox/"+source], "Deleted") || !slices.Contains(got["SandboxSnapshot/"+snapshot], "Deleted") {
			return fmt.Errorf("no Deleted events for the source and the capture yet: %v", got)
		}
		return nil
	})
	checkNoForbiddenEvents(t, e)
	kubectl("delete", "namespace", ns, "--wait", "--timeout=120s")

	eventuallyManager(t, mgr, 30*time.Second, func() error {
		if s := liveSandboxes(); len(s) > 0 {
			return fmt.Errorf("Vercel still holds sandboxes of the namespace: %v", s)
		}
		if s := liveSnapshots(); len(s) > 0 {
			return fmt.Errorf("Vercel still holds snapshots of the namespace: %v", s)
		}
		return nil
	})
}

// waitForkReplicas waits until the fork reports n children, all Ready, for
// its current generation, and n child Sandboxes carry its label.
func waitForkReplicas(t *testing.T, e *env, mgr *managerpod.Process, ns, name string, n int32) {
	t.Helper()
	eventuallyManager(t, mgr, 60*time.Second, func() error {
		var f sandboxv1.SandboxFork
		if err := e.client.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, &f); err != nil {
			return err
		}
		if f.Status.ObservedGeneration != f.Generation || f.Status.Replicas != n || f.Status.ReadyReplicas != n || f.Status.Phase != sandboxv1.ForkReady {
			return fmt.Errorf("fork %s: generation %d observed %d, phase %s, replicas %d ready %d, want %d",
				name, f.Generation, f.Status.ObservedGeneration, f.Status.Phase, f.Status.Replicas, f.Status.ReadyReplicas, n)
		}
		var children sandboxv1.SandboxList
		if err := e.client.List(e.ctx, &children, client.InNamespace(ns), client.MatchingLabels{sandboxv1.LabelFork: name}); err != nil {
			return err
		}
		if len(children.Items) != int(n) {
			return fmt.Errorf("fork %s has %d child Sandboxes, want %d", name, len(children.Items), n)
		}
		return nil
	})
}

// eventReasons lists the events.k8s.io events of a namespace, read with the
// real kubectl, as reasons by "Kind/name" of the object they regard.
func eventReasons(t *testing.T, e *env, ns string) map[string][]string {
	t.Helper()
	out, err := e.kubectl("get", "events.events.k8s.io", "-n", ns, "-o", "json")
	must(t, err)
	var list eventsv1.EventList
	must(t, json.Unmarshal([]byte(out), &list))
	got := map[string][]string{}
	for _, ev := range list.Items {
		k := ev.Regarding.Kind + "/" + ev.Regarding.Name
		got[k] = append(got[k], ev.Reason)
	}
	return got
}

// checkNoForbiddenEvents fails on any event in the cluster that mentions a
// refused request.
func checkNoForbiddenEvents(t *testing.T, e *env) {
	t.Helper()
	out, err := e.kubectl("get", "events.events.k8s.io", "-A", "-o", "json")
	must(t, err)
	var list eventsv1.EventList
	must(t, json.Unmarshal([]byte(out), &list))
	for _, ev := range list.Items {
		if strings.Contains(strings.ToLower(ev.Note+" "+ev.Reason), "forbidden") {
			t.Errorf("%s event %s on %s %s/%s: %s", ev.Type, ev.Reason, ev.Regarding.Kind, ev.Namespace, ev.Regarding.Name, ev.Note)
		}
	}
}

// errGiveUp, wrapped in what an eventually function returns, ends the wait
// at once.
var errGiveUp = errors.New("giving up")

// eventually polls f until it returns nil, failing the test with its last
// error after timeout, or at once when the error wraps errGiveUp.
func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if errors.Is(err, errGiveUp) || time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	must(t, err)
	return hex.EncodeToString(b)
}

// grepLines returns the first lines of s that contain word,
// case-insensitively, each cut to a readable length.
func grepLines(s, word string) string {
	const maxLines, maxLen = 5, 600
	var out []string
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(strings.ToLower(l), word) {
			continue
		}
		if n++; n <= maxLines {
			if len(l) > maxLen {
				l = l[:maxLen] + "…"
			}
			out = append(out, l)
		}
	}
	if n > maxLines {
		out = append(out, fmt.Sprintf("(%d more)", n-maxLines))
	}
	return strings.Join(out, "\n")
}

// eventuallyManager is eventually that gives up as soon as the manager's log
// reports a refused request.
func eventuallyManager(t *testing.T, mgr *managerpod.Process, timeout time.Duration, f func() error) {
	t.Helper()
	eventually(t, timeout, func() error {
		if refused(mgr) {
			return fmt.Errorf("%w: the manager's log reports a forbidden request", errGiveUp)
		}
		return f()
	})
}

// refused reports whether the manager's log shows a request the API server
// refused for lack of permission.
func refused(mgr *managerpod.Process) bool {
	return strings.Contains(strings.ToLower(mgr.Log()), "forbidden")
}
