package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// TestLeaderCut cuts the leader off instead of killing it, in the two ways
// a leader loses the API server while it keeps running: its process is
// stopped (SIGSTOP, as a frozen VM or a long pause does) and resumed once the
// other replica has taken over, or its connections to the API server are cut
// while Vercel stays reachable. Either cut lands the moment Vercel has
// applied one of the leader's mutations and before the leader has read the
// answer, with creates, pauses and deletes in flight; more happen while it
// is cut off. Then:
//
//   - the other replica takes the Lease over;
//   - the old leader sends no mutating Vercel request once the other holds
//     the Lease (each replica reaches Vercel through its own recording proxy,
//     so every request is attributed);
//   - every object converges (Ready, Stopped, or deleted with its Vercel
//     sandbox gone), and no object has two Vercel sandboxes.
func TestLeaderCut(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane, the emulator and manager processes")
	}
	dir, err := os.MkdirTemp("", "leader-cut-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "manager")
	build := exec.Command("go", "build", "-o", bin, "./cmd/manager")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/manager: %v\n%s", err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	log := &testLog{t: t}
	defer log.close()
	cfg := Config{ManagerBin: bin, RepoRoot: root, WorkDir: filepath.Join(dir, "run"), Log: log}
	cfg.defaults()
	if err := os.MkdirAll(filepath.Join(cfg.WorkDir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(cfg.WorkDir, 0o755); err != nil {
		t.Fatal(err)
	}
	h := &harness{cfg: cfg, canaries: newCanaries(), start: time.Now()}
	if h.logFile, err = os.Create(filepath.Join(cfg.WorkDir, "chaos.log")); err != nil {
		t.Fatal(err)
	}
	defer h.logFile.Close()
	if err := h.startStack(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		h.stopEmulator()
		_ = h.stack.Stop()
		_ = os.RemoveAll(filepath.Join(cfg.WorkDir, "emulator"))
	}()
	if err := h.deploy(ctx); err != nil {
		t.Fatal(err)
	}
	api, err := url.Parse(h.stack.ControlPlane.Config.Host)
	if err != nil {
		t.Fatal(err)
	}

	for _, mode := range []cutMode{cutStop, cutNetwork} {
		t.Run(string(mode), func(t *testing.T) { leaderCut(ctx, t, h, api.Host, mode) })
	}
	if t.Failed() {
		t.Logf("logs kept in %s", dir)
		return
	}
	_ = os.RemoveAll(dir)
}

type cutMode string

const (
	cutStop    cutMode = "stopped"     // SIGSTOP, then SIGCONT
	cutNetwork cutMode = "network-cut" // API server connections closed and refused
)

// cutReplica is a replica with its own ways to Vercel and the API server.
type cutReplica struct {
	*replica
	tap  *vercelTap
	link *apiLink
}

func leaderCut(ctx context.Context, t *testing.T, h *harness, apiServer string, mode cutMode) {
	c := h.stack.Client
	var replicas []*cutReplica
	superCtx, stopSupervisors := context.WithCancel(ctx)
	var superWG sync.WaitGroup
	defer func() {
		stopSupervisors()
		superWG.Wait()
		var wg sync.WaitGroup
		for _, r := range replicas {
			if p := r.current(); p != nil {
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
			}
			r.link.setCut(false)
			wg.Go(func() { r.stop(20 * time.Second) })
		}
		wg.Wait()
		for _, r := range replicas {
			r.tap.close()
			r.link.close()
		}
	}()
	rng := rand.New(rand.NewPCG(1, 1))
	var rngMu sync.Mutex
	for _, name := range []string{"a", "b"} {
		name = string(mode) + "-" + name
		tap, err := newVercelTap(h.stack.EmulatorURL)
		if err != nil {
			t.Fatal(err)
		}
		link, err := newAPILink(apiServer)
		if err != nil {
			t.Fatal(err)
		}
		kc := filepath.Join(h.cfg.WorkDir, "manager-"+name+".kubeconfig")
		if err := kubeconfigVia(filepath.Join(h.cfg.WorkDir, "manager.kubeconfig"), kc, apiServer, link.addr()); err != nil {
			t.Fatal(err)
		}
		env := []string{"KUBECONFIG=" + kc}
		for _, e := range h.managerEnv {
			if !strings.HasPrefix(e, "KUBECONFIG=") {
				env = append(env, e)
			}
		}
		r := &cutReplica{replica: &replica{name: name, h: h, args: []string{"--vercel-api-url=" + tap.url}, env: env}, tap: tap, link: link}
		replicas = append(replicas, r)
		p, err := r.start()
		if err != nil {
			t.Fatal(err)
		}
		if err := p.waitProbes(time.Minute); err != nil {
			t.Fatalf("manager %s: %v", name, err)
		}
		superWG.Go(func() { r.supervise(superCtx, rng, &rngMu) })
	}

	// The leader, and its identity in the Lease.
	var leader, standby *cutReplica
	deadline := time.Now().Add(time.Minute)
	for leader == nil {
		if time.Now().After(deadline) {
			t.Fatal("no replica became leader within a minute")
		}
		for i, r := range replicas {
			if h.isLeader(r.replica) {
				leader, standby = r, replicas[1-i]
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	lease := &coordinationv1.Lease{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: systemNamespace, Name: leaseName}, lease); err != nil {
		t.Fatal(err)
	}
	oldHolder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if oldHolder == "" {
		t.Fatal("the leader's Lease has no holder")
	}
	oldProcess := leader.current()
	endedAt := make(chan time.Time, 1)
	go func() {
		<-oldProcess.done
		endedAt <- time.Now()
	}()
	h.logf("[%s] leader is manager %s (%s)", mode, leader.name, oldHolder)

	// Sandboxes at rest, then creates, pauses and deletes in flight.
	ns := "chaos-cut-" + string(mode)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	newSandbox := func(name string) {
		t.Helper()
		sbx := &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		sbx.Spec.Source.Runtime = ptr.To(sandboxv1.Runtime("node22"))
		sbx.Spec.TimeoutSeconds = ptr.To[int64](600)
		if err := c.Create(ctx, sbx); err != nil {
			t.Fatal(err)
		}
	}
	setState := func(name string, state sandboxv1.SandboxState) {
		t.Helper()
		for {
			sbx := &sandboxv1.Sandbox{}
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, sbx); err != nil {
				t.Fatal(err)
			}
			sbx.Spec.State = state
			err := c.Update(ctx, sbx)
			if err == nil {
				return
			}
			if !apierrors.IsConflict(err) {
				t.Fatal(err)
			}
		}
	}
	var deleted []deletedObject
	del := func(name string) {
		t.Helper()
		sbx := &sandboxv1.Sandbox{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, sbx); err != nil {
			t.Fatal(err)
		}
		deleted = append(deleted, recordOf(sbx))
		if err := c.Delete(ctx, sbx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		newSandbox(fmt.Sprintf("rest-%d", i))
	}
	if !waitFor(ctx, t, time.Minute, "the first Sandboxes Ready", func() (bool, string) {
		list := &sandboxv1.SandboxList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, s := range list.Items {
			if meta.IsStatusConditionTrue(s.Status.Conditions, sandboxv1.ConditionReady) {
				ready++
			}
		}
		return ready == 4, fmt.Sprintf("%d/4 Ready", ready)
	}) {
		t.FailNow()
	}

	// The cut lands when Vercel has applied the next mutation of the
	// leader and before the leader reads the answer.
	type cutAt struct {
		at  time.Time
		req tapRequest
	}
	cutDone := make(chan cutAt, 1)
	leader.tap.arm(func(req tapRequest) {
		if mode == cutStop {
			_ = oldProcess.cmd.Process.Signal(syscall.SIGSTOP)
		} else {
			leader.link.setCut(true)
		}
		cutDone <- cutAt{at: time.Now(), req: req}
	})
	for i := range 4 {
		newSandbox(fmt.Sprintf("new-%d", i))
	}
	setState("rest-0", sandboxv1.SandboxStateStopped)
	setState("rest-1", sandboxv1.SandboxStateStopped)
	del("rest-2")
	var cut cutAt
	select {
	case cut = <-cutDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the leader made no Vercel mutation within 30s of the changes")
	}
	h.logf("[%s] leader %s cut off after Vercel answered %s %s", mode, leader.name, cut.req.method, cut.req.path)

	// The other replica takes over.
	var acquired time.Time
	if !waitFor(ctx, t, 30*time.Second, "the standby to take the Lease", func() (bool, string) {
		l := &coordinationv1.Lease{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: systemNamespace, Name: leaseName}, l); err != nil {
			return false, err.Error()
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		if holder == "" || holder == oldHolder || l.Spec.AcquireTime == nil {
			return false, "held by " + holder
		}
		acquired = l.Spec.AcquireTime.Time
		return true, ""
	}) {
		t.FailNow()
	}
	if !waitFor(ctx, t, 5*time.Second, "manager "+standby.name+" to log its acquisition", func() (bool, string) {
		return h.isLeader(standby.replica), "the Lease changed hands, but not to manager " + standby.name
	}) {
		t.FailNow()
	}
	takeover := acquired.Sub(cut.at)
	h.logf("[%s] manager %s took the Lease over %s after the cut", mode, standby.name, takeover.Round(time.Millisecond))

	// While the old leader is cut off: more changes it does not see.
	newSandbox("late-0")
	newSandbox("late-1")
	setState("rest-0", sandboxv1.SandboxStateRunning)
	del("rest-3")
	del("new-0")
	time.Sleep(time.Until(acquired.Add(4 * time.Second)))

	if mode == cutStop {
		_ = oldProcess.cmd.Process.Signal(syscall.SIGCONT)
	} else {
		leader.link.setCut(false)
	}
	h.logf("[%s] manager %s's old process resumed (stopped) or reconnected (network-cut)", mode, leader.name)

	// controller-runtime ends a leader that lost its Lease.
	var ended time.Time
	select {
	case ended = <-endedAt:
	case <-time.After(30 * time.Second):
		t.Errorf("the old leader's process was still running 30s after it got the API server back")
	}

	// Every object converges; nothing is duplicated or leaked. Clients
	// keep using their Sandboxes, as in the soak's convergence: a heartbeat
	// at once and every 20 s wakes a session that was stopped unrecorded.
	var v *verdict
	var lastBeat time.Time
	converged := waitFor(ctx, t, 2*time.Minute, "convergence", func() (bool, string) {
		if time.Since(lastBeat) >= 20*time.Second {
			h.heartbeatAll(ctx)
			lastBeat = time.Now()
		}
		cl, err := observe(ctx, c, h)
		if err != nil {
			return false, err.Error()
		}
		v = evaluate(cl, deleted, maxSessionMs(h.managerArgs))
		return v.ok(), fmt.Sprintf("%d/%d converged, not converged %v, duplicates %v, unowned %v %v, terminating %v",
			v.converged, v.objects, v.notConverged, v.duplicates, v.unownedSandboxes, v.unownedSnapshots, v.terminating)
	})

	late := leader.tap.mutationsSince(acquired)
	afterCut := leader.tap.mutationsSince(cut.at.Add(time.Millisecond))
	_, byNew := standby.tap.count()
	refused := countInFile(oldProcess.logPath, "leader election lease not held")
	h.logf("[%s] takeover %s after the cut; old leader: %d mutating Vercel requests after the cut, %d after the takeover, %d log lines of refused requests, process ended %s after the cut and %s after the takeover; new leader: %d mutating requests",
		mode, takeover.Round(time.Millisecond), len(afterCut), len(late), refused, ended.Sub(cut.at).Round(time.Millisecond),
		ended.Sub(acquired).Round(time.Millisecond), byNew)
	if len(late) > 0 {
		var lines []string
		for _, r := range late {
			lines = append(lines, r.String())
		}
		t.Errorf("the old leader sent %d mutating Vercel requests after manager %s held the Lease (acquired %s):\n%s",
			len(late), standby.name, acquired.Format("15:04:05.000"), strings.Join(lines, "\n"))
	}
	if !converged {
		t.Error("the objects did not converge (above) after the old leader came back")
	}
	if byNew == 0 {
		t.Error("the new leader sent no mutating Vercel request: the objects were not handed over")
	}
}

// waitFor polls cond every 250ms until it holds, and reports false with
// cond's last explanation (as a test error) after timeout.
func waitFor(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Errorf("waiting for %s: %s", what, why)
			return false
		}
		time.Sleep(250 * time.Millisecond)
	}
}
