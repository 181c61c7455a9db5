package perf

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/test/officialsdk"
)

// armTTFC labels the phase's objects (the operator sees them).
const armTTFC = "ttfc"

// ttfcSource makes the workspace snapshot every arm starts from: a Sandbox,
// captured by a SandboxSnapshot, both Ready (untimed, before the profile).
func (h *harness) ttfcSource(ctx context.Context) (ttfcSource, error) {
	ns, err := h.newNamespace(ctx, "bench-ttfc")
	if err != nil {
		return ttfcSource{}, err
	}
	src := ttfcSource{namespace: ns, snapshotName: "workspace"}
	if err := h.readySandboxes(ctx, ns, 1, func(i int) *sandboxv1.Sandbox {
		return kindsSandbox(ns, fmt.Sprintf("src-%05d", i), armTTFC)
	}); err != nil {
		return src, err
	}
	w, err := h.kube.Watch(ctx, &sandboxv1.SandboxSnapshotList{}, client.InNamespace(ns))
	if err != nil {
		return src, err
	}
	if err := h.kube.Create(ctx, captureSnapshot(ns, src.snapshotName, "src-00000", armTTFC)); err != nil {
		w.Stop()
		return src, err
	}
	got, err := h.waitObjectsReady(ctx, w, func() client.ObjectList { return &sandboxv1.SandboxSnapshotList{} },
		[]client.ListOption{client.InNamespace(ns)}, 1, h.cfg.ReadyTimeout, time.Now(), snapshotReady)
	if err != nil {
		return src, err
	}
	if len(got) != 1 {
		return src, fmt.Errorf("SandboxSnapshot %s/%s not Ready within %s", ns, src.snapshotName, h.cfg.ReadyTimeout)
	}
	var snap sandboxv1.SandboxSnapshot
	if err := h.kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: src.snapshotName}, &snap); err != nil {
		return src, err
	}
	src.snapshotID = snap.Status.SnapshotID
	return src, nil
}

// appClient is the Vercel client of the app a conversation belongs to: the
// operator's configuration (hence its credential's request budget) without
// the operator's in-flight bound, as an app's own client would be.
func (h *harness) appClient() (*vercel.Client, error) {
	cfg := h.vcfg
	cfg.HTTPClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	cfg.UserAgent = "sandbox-controller-bench-app"
	return vercel.New(cfg)
}

// firstCommand runs the conversation's first command with its output in the
// same stream, and checks that it ran.
func firstCommand(ctx context.Context, vc *vercel.Client, sessionID string) error {
	s, err := vc.RunCommandStream(ctx, sessionID, vercel.RunCommandRequest{Command: "echo", Args: []string{"ttfc"}, Logs: true})
	if err != nil {
		return fmt.Errorf("run the first command: %w", err)
	}
	defer s.Close()
	cmd, err := s.Wait()
	if err != nil {
		return fmt.Errorf("wait for the first command: %w", err)
	}
	if cmd.ExitCode == nil || *cmd.ExitCode != 0 {
		return fmt.Errorf("first command: exit code %v", cmd.ExitCode)
	}
	return nil
}

// prepareOperatorArm: each conversation creates a Sandbox from the
// workspace SandboxSnapshot, waits (through one shared watch) until it is
// Ready, and runs the first command in the session its status names.
func (h *harness) prepareOperatorArm(ctx context.Context, src ttfcSource) (*ttfcArm, error) {
	return h.sandboxArm(ctx, src, nil)
}

// ttfcSandboxSpec is the spec of a conversation's Sandbox (and of a pool's
// members, which a claim must match).
func ttfcSandboxSpec(src ttfcSource) sandboxv1.SandboxSpec {
	return sandboxv1.SandboxSpec{
		Source:         sandboxv1.SandboxSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: src.snapshotName}},
		TimeoutSeconds: ptr.To[int64](sessionTimeoutSeconds),
		// The phase's end deletes without Vercel calls (the plan's 20
		// deletes per second would dominate it); deletes are not measured.
		DeletionPolicy: sandboxv1.DeletionPolicyRetain,
	}
}

// sandboxArm is an arm in which each conversation creates a Sandbox of
// ttfcSandboxSpec, changed by edit (nil: none), and waits for it to be Ready.
func (h *harness) sandboxArm(ctx context.Context, src ttfcSource, edit func(*sandboxv1.Sandbox)) (*ttfcArm, error) {
	vc, err := h.appClient()
	if err != nil {
		return nil, err
	}
	wctx, stop := context.WithCancel(ctx)
	rw := h.watchReadySessions(wctx, src.namespace)
	sessions := &durations{}
	conversation := func(ctx context.Context, id string) error {
		ready := rw.expect(id)
		sb := &sandboxv1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Namespace: src.namespace, Name: id, Labels: map[string]string{armLabel: armTTFC}},
			Spec:       ttfcSandboxSpec(src),
		}
		if edit != nil {
			edit(sb)
		}
		if err := h.kube.Create(ctx, sb); err != nil {
			return fmt.Errorf("create Sandbox %s: %w", id, err)
		}
		var sid string
		select {
		case sid = <-ready:
		case <-ctx.Done():
			return fmt.Errorf("the Sandbox %s is not Ready: %w", id, ctx.Err())
		}
		if at := scheduledStart(ctx); !at.IsZero() {
			sessions.add(time.Since(at))
		}
		return firstCommand(ctx, vc, sid)
	}
	return &ttfcArm{conversation: conversation, sessions: sessions, close: func() {
		stop()
		rw.wg.Wait()
		if err := h.deleteLabelled(ctx, src.namespace); err != nil {
			h.logf("  ttfc operator arm: cleanup: %v", err)
		}
	}}, nil
}

// deleteLabelled deletes the phase's conversation Sandboxes of ns (not the
// source) and waits until they are gone.
func (h *harness) deleteLabelled(ctx context.Context, ns string) error {
	sel := []client.DeleteAllOfOption{client.InNamespace(ns), client.MatchingLabels{armLabel: armTTFC}}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if err := h.kube.DeleteAllOf(ctx, &sandboxv1.Sandbox{}, sel...); err != nil {
			return err
		}
		var l sandboxv1.SandboxList
		if err := h.kube.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{armLabel: armTTFC}); err != nil {
			return err
		}
		left := 0
		for _, s := range l.Items {
			if !strings.HasPrefix(s.Name, "src-") {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("conversation Sandboxes of %s not deleted within 2m", ns)
}

// readySessions hands each expected Sandbox's session id to its waiter once
// a watch shows the Sandbox Ready.
type readySessions struct {
	mu      sync.Mutex
	waiting map[string]chan string
	ready   map[string]string
	wg      sync.WaitGroup
}

func (h *harness) watchReadySessions(ctx context.Context, ns string) *readySessions {
	rs := &readySessions{waiting: map[string]chan string{}, ready: map[string]string{}}
	rs.wg.Add(1)
	go func() {
		defer rs.wg.Done()
		for ctx.Err() == nil {
			// A watch without a resource version starts with every existing
			// object, so a restarted watch misses nothing.
			w, err := h.kube.Watch(ctx, &sandboxv1.SandboxList{}, client.InNamespace(ns))
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				if sb, ok := ev.Object.(*sandboxv1.Sandbox); ok && sandboxReady(sb) && sb.Status.SessionID != "" {
					rs.deliver(sb.Name, sb.Status.SessionID)
				}
			}
			w.Stop()
		}
	}()
	return rs
}

// expect registers a waiter for name (before its Sandbox is created).
func (rs *readySessions) expect(name string) <-chan string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	ch := make(chan string, 1)
	if sid, ok := rs.ready[name]; ok {
		ch <- sid
		return ch
	}
	rs.waiting[name] = ch
	return ch
}

func (rs *readySessions) deliver(name, sid string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if ch, ok := rs.waiting[name]; ok {
		ch <- sid
		delete(rs.waiting, name)
	}
	rs.ready[name] = sid
}

// sdkDriver is the node process of the SDK arm (testdata/ttfc-sdk.mjs).
type sdkDriver struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stderr  *lockedWriter
	home    string
	writeMu sync.Mutex
	mu      sync.Mutex
	waiting map[string]chan sdkAnswer
	done    chan struct{} // closed when stdout ends
}

type sdkAnswer struct {
	ID    string `json:"id"`
	Ready bool   `json:"ready"`
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

// prepareSDKArm starts one node process running Vercel's official SDK
// against the emulator (through the same recorder as the operator); each
// conversation is one line to it and one answer back.
func (h *harness) prepareSDKArm(ctx context.Context, src ttfcSource) (*ttfcArm, error) {
	root := h.stack.RepoRoot
	modules, err := officialsdk.Install(ctx, root, h.logf)
	if err != nil {
		return nil, err
	}
	home, err := os.MkdirTemp("", "bench-ttfc-node-")
	if err != nil {
		return nil, err
	}
	d := &sdkDriver{stderr: &lockedWriter{w: &bytes.Buffer{}}, home: home, waiting: map[string]chan sdkAnswer{}, done: make(chan struct{})}
	d.cmd = exec.Command("node", filepath.Join(root, "test", "perf", "testdata", "ttfc-sdk.mjs"))
	d.cmd.Env = append(os.Environ(), officialsdk.NodeEnv(root, modules, h.vercelURL, h.vcfg.Token, home)...)
	d.cmd.Env = append(d.cmd.Env, "VERCEL_TOKEN="+h.vcfg.Token, "VERCEL_TEAM_ID="+h.vcfg.TeamID, "VERCEL_PROJECT_ID="+h.vcfg.ProjectID,
		"TTFC_SNAPSHOT_ID="+src.snapshotID, fmt.Sprintf("TTFC_TIMEOUT_MS=%d", sessionTimeoutSeconds*1000))
	d.cmd.Stderr = d.stderr
	if d.stdin, err = d.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start node: %w", err)
	}
	readyCh := make(chan struct{})
	go d.read(stdout, readyCh)
	select {
	case <-readyCh:
	case <-d.done:
		d.close()
		return nil, fmt.Errorf("the SDK driver ended before it was ready: %s", tail(d.stderr.String(), 2000))
	case <-time.After(time.Minute):
		d.close()
		return nil, errors.New("the SDK driver was not ready within 1m")
	}
	return &ttfcArm{conversation: d.conversation, close: d.close}, nil
}

func (d *sdkDriver) read(stdout io.Reader, ready chan<- struct{}) {
	defer close(d.done)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var a sdkAnswer
		if json.Unmarshal(sc.Bytes(), &a) != nil {
			continue
		}
		if a.Ready {
			close(ready)
			continue
		}
		d.mu.Lock()
		if ch, ok := d.waiting[a.ID]; ok {
			ch <- a
			delete(d.waiting, a.ID)
		}
		d.mu.Unlock()
	}
}

func (d *sdkDriver) conversation(ctx context.Context, id string) error {
	ch := make(chan sdkAnswer, 1)
	d.mu.Lock()
	d.waiting[id] = ch
	d.mu.Unlock()
	d.writeMu.Lock()
	_, err := io.WriteString(d.stdin, id+"\n")
	d.writeMu.Unlock()
	if err != nil {
		return fmt.Errorf("send to the SDK driver: %w", err)
	}
	select {
	case a := <-ch:
		if !a.OK {
			return fmt.Errorf("SDK: %s", tail(a.Error, 500))
		}
		return nil
	case <-d.done:
		return fmt.Errorf("the SDK driver ended: %s", tail(d.stderr.String(), 1000))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close ends the node process (its stdin first; killed if it lingers).
func (d *sdkDriver) close() {
	_ = d.stdin.Close()
	exited := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = d.cmd.Process.Kill()
		<-exited
	}
	_ = os.RemoveAll(d.home)
}

// lockedWriter serialises writes to a buffer read by another goroutine.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// String is what was written, for error messages.
func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b, ok := l.w.(*bytes.Buffer); ok {
		return b.String()
	}
	return ""
}
