package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// Workload operations, as named in the report.
const (
	opCreateSandbox     = "create Sandbox"
	opCreateFromSnap    = "create Sandbox from snapshotRef"
	opChangeSpec        = "change Sandbox spec"
	opPause             = "pause (state Stopped)"
	opResume            = "resume (state Running)"
	opHeartbeat         = "heartbeat"
	opCapture           = "capture SandboxSnapshot"
	opRecipe            = "recipe SandboxSnapshot"
	opFork              = "create SandboxFork"
	opScale             = "scale SandboxFork"
	opDelete            = "delete object"
	opDeleteNamespace   = "delete namespace"
	opCreateNamespace   = "create namespace"
	opSkipped           = "skipped (constraint)"
	opRefused           = "refused by the API server"
	opFinalHeartbeats   = "final heartbeats"
	gitCredentialSecret = "git"
)

// deletedObject is an object the workload deleted (alone or with its
// namespace): it must end up gone from Kubernetes and from Vercel.
type deletedObject struct {
	kind, namespace, name string
	uid                   types.UID
	vercelName            string // Sandbox: status.vercelName when deleted
	snapshotID            string // SandboxSnapshot: status.snapshotID when deleted
}

func (d deletedObject) key() string { return d.kind + " " + d.namespace + "/" + d.name }

// nsState is what the workload created in one namespace.
type nsState struct {
	name      string
	sandboxes map[string]bool
	snapshots map[string]bool
	forks     map[string]bool
	pools     map[string]bool
	secrets   []string // each holds canary values under the keys below
}

// Keys of every workload Secret.
var secretKeys = []string{"token", "username", "password", "api-key"}

func (n *nsState) live() int {
	return len(n.sandboxes) + len(n.snapshots) + len(n.forks) + len(n.pools)
}

// workload drives the seeded random workload.
type workload struct {
	h   *harness
	c   client.Client
	rng *rand.Rand
	// poolOps and poolPicks are the pool operations' own streams
	// (workload_pool.go): poolOps decides at each step whether and which
	// pool operation runs, poolPicks makes that operation's choices.
	poolOps, poolPicks *rand.Rand

	nss     []*nsState
	nsSeq   int
	objSeq  int
	deleted []deletedObject
	ops     map[string]int
	total   int // operations done (skips and refusals excluded)
	refused []string
}

func newWorkload(h *harness, rng *rand.Rand) *workload {
	seed := uint64(h.cfg.Seed)
	return &workload{h: h, c: h.stack.Client, rng: rng, ops: map[string]int{},
		poolOps: rand.New(rand.NewPCG(seed, 4)), poolPicks: rand.New(rand.NewPCG(seed, 5))}
}

func (w *workload) count(op string) {
	w.ops[op]++
	if op != opSkipped && op != opRefused {
		w.total++
	}
}

// did counts a successful operation and logs it with its object.
func (w *workload) did(op, what string) {
	w.count(op)
	w.h.logf("workload: %s %s", op, what)
}

func (w *workload) liveObjects() int {
	n := 0
	for _, ns := range w.nss {
		n += ns.live()
	}
	return n
}

// setup creates the namespaces with their Secrets.
func (w *workload) setup(ctx context.Context) error {
	for range w.h.cfg.Namespaces {
		if err := w.createNamespace(ctx); err != nil {
			return err
		}
	}
	return nil
}

// run performs operations until chaos ends. Halfway through, a namespace is
// deleted whatever the dice say, so that every run deletes one. Each operation
// runs under ctx, not chaos: one still in flight when the chaos phase ends
// finishes, rather than being cut off and counted as a refused declaration.
func (w *workload) run(ctx, chaos context.Context) {
	halfway := time.Now().Add(w.h.cfg.Duration / 2)
	for chaos.Err() == nil {
		if !halfway.IsZero() && time.Now().After(halfway) {
			halfway = time.Time{}
			if err := w.replaceNamespace(ctx, w.nss[w.rng.IntN(len(w.nss))]); err != nil && ctx.Err() == nil {
				w.h.logf("workload: %v", err)
			}
		}
		step, rng := w.step, w.rng
		if op := poolOp(w.poolOps.IntN(1000)); op != "" {
			step, rng = func(ctx context.Context) error { return w.poolStep(ctx, op) }, w.poolPicks
		}
		if err := step(ctx); err != nil && ctx.Err() == nil {
			w.h.logf("workload: %v", err)
		}
		d := w.h.cfg.OpInterval/2 + time.Duration(rng.Int64N(int64(w.h.cfg.OpInterval)+1))
		select {
		case <-chaos.Done():
		case <-time.After(d):
		}
	}
}

// step performs one random operation.
func (w *workload) step(ctx context.Context) error {
	ns := w.nss[w.rng.IntN(len(w.nss))]
	full := w.liveObjects() >= w.h.cfg.Objects
	if w.rng.IntN(1000) < 3 {
		return w.replaceNamespace(ctx, ns)
	}
	k := w.rng.IntN(100)
	switch {
	case k < 16:
		if full {
			return w.deleteObject(ctx, ns)
		}
		return w.createSandbox(ctx, ns, nil)
	case k < 20:
		if full {
			return w.deleteObject(ctx, ns)
		}
		snap := pick(w.rng, ns.snapshots)
		if snap == "" {
			return w.createSandbox(ctx, ns, nil)
		}
		return w.createSandbox(ctx, ns, &snap)
	case k < 32:
		return w.changeSpec(ctx, ns)
	case k < 39:
		return w.setState(ctx, ns, sandboxv1.SandboxStateStopped)
	case k < 46:
		return w.setState(ctx, ns, sandboxv1.SandboxStateRunning)
	case k < 56:
		return w.heartbeat(ctx, ns)
	case k < 62:
		if full {
			return w.deleteObject(ctx, ns)
		}
		return w.capture(ctx, ns)
	case k < 66:
		if full {
			return w.deleteObject(ctx, ns)
		}
		return w.recipe(ctx, ns)
	case k < 71:
		if full {
			return w.deleteObject(ctx, ns)
		}
		return w.fork(ctx, ns)
	case k < 77:
		return w.scale(ctx, ns)
	default:
		return w.deleteObject(ctx, ns)
	}
}

// pick returns a random key of m ("" when empty), in a seeded order.
func pick(rng *rand.Rand, m map[string]bool) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys[rng.IntN(len(keys))]
}

func (w *workload) name(prefix string) string {
	w.objSeq++
	return fmt.Sprintf("%s-%d", prefix, w.objSeq)
}

// createNamespace creates a namespace with three Secrets of canary values.
func (w *workload) createNamespace(ctx context.Context) error {
	w.nsSeq++
	ns := &nsState{name: fmt.Sprintf("chaos-%d", w.nsSeq), sandboxes: map[string]bool{}, snapshots: map[string]bool{}, forks: map[string]bool{}, pools: map[string]bool{}}
	if err := w.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.name}}); err != nil {
		return fmt.Errorf("create namespace %s: %w", ns.name, err)
	}
	for _, name := range []string{"app", "api", gitCredentialSecret} {
		data := map[string][]byte{}
		for _, k := range secretKeys {
			data[k] = []byte(w.h.canaries.next(w.rng))
		}
		if name == gitCredentialSecret && w.h.git != nil {
			w.h.git.allow(string(data["username"]), string(data["password"]))
		}
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.name, Name: name}, Data: data}
		if err := w.c.Create(ctx, sec); err != nil {
			return fmt.Errorf("create Secret %s/%s: %w", ns.name, name, err)
		}
		ns.secrets = append(ns.secrets, name)
	}
	w.nss = append(w.nss, ns)
	w.did(opCreateNamespace, ns.name)
	return nil
}

// secretRef is a random key of a random Secret of ns.
func (w *workload) secretRef(ns *nsState) sandboxv1.SecretKeySelector {
	return sandboxv1.SecretKeySelector{Name: ns.secrets[w.rng.IntN(len(ns.secrets))], Key: secretKeys[w.rng.IntN(len(secretKeys))]}
}

func (w *workload) timeout() *int64 {
	return ptr.To([]int64{60, 90, 120, 300, 600}[w.rng.IntN(5)])
}

// env is a random environment: plain values and values from Secrets.
func (w *workload) env(ns *nsState) []sandboxv1.EnvVar {
	var env []sandboxv1.EnvVar
	for i := range w.rng.IntN(4) {
		name := fmt.Sprintf("VAR_%d", i)
		if w.rng.IntN(2) == 0 {
			env = append(env, sandboxv1.EnvVar{Name: name, Value: ptr.To(fmt.Sprintf("plain-%d", w.rng.IntN(1000)))})
		} else {
			ref := w.secretRef(ns)
			env = append(env, sandboxv1.EnvVar{Name: name, ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: ref}})
		}
	}
	return env
}

// networkPolicy is a random policy, often injecting a header from a Secret.
func (w *workload) networkPolicy(ns *nsState) *sandboxv1.NetworkPolicy {
	inject := []sandboxv1.HeaderInjection{{Domain: "api.example.com", Headers: []sandboxv1.InjectedHeader{{
		Name: "Authorization", ValueFrom: sandboxv1.EnvVarSource{SecretKeyRef: w.secretRef(ns)},
	}}}}
	switch w.rng.IntN(5) {
	case 0:
		return nil
	case 1:
		return &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowAll, InjectHeaders: inject}
	case 2:
		return &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkDenyAll}
	case 3:
		return &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowlist, AllowedDomains: []string{"registry.npmjs.org"}, InjectHeaders: inject}
	default:
		return &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkDenyAll, InjectHeaders: inject}
	}
}

// createSandbox creates a Sandbox from a runtime or a git repository (with
// credentials from a Secret), or from snapshot when given.
func (w *workload) createSandbox(ctx context.Context, ns *nsState, snapshot *string) error {
	sbx := &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns.name, Name: w.name("sbx")}}
	op := opCreateSandbox
	switch {
	case snapshot != nil:
		op = opCreateFromSnap
		sbx.Spec.Source.SnapshotRef = &sandboxv1.LocalObjectReference{Name: *snapshot}
	case w.rng.IntN(4) == 0:
		sbx.Spec.Source.Git = &sandboxv1.GitSource{
			URL:         "https://git.example.invalid/org/repo.git",
			Credentials: &sandboxv1.GitCredentials{SecretName: gitCredentialSecret},
		}
	default:
		sbx.Spec.Source.Runtime = ptr.To(sandboxv1.Runtime([]string{"node22", "node24", "python3.13"}[w.rng.IntN(3)]))
	}
	sbx.Spec.TimeoutSeconds = w.timeout()
	sbx.Spec.Env = w.env(ns)
	sbx.Spec.NetworkPolicy = w.networkPolicy(ns)
	if w.rng.IntN(4) == 0 {
		sbx.Spec.Ports = []int32{3000}
	}
	if snapshot == nil && w.rng.IntN(3) == 0 {
		sbx.Spec.Setup = []sandboxv1.SetupCommand{{Name: "prepare", Command: "sh", Args: []string{"-c", "echo prepared > prepared.txt"}}}
	}
	if w.rng.IntN(8) == 0 {
		sbx.Spec.State = sandboxv1.SandboxStateStopped
	}
	if err := w.c.Create(ctx, sbx); err != nil {
		return w.refusal(op, sbx.Name, err)
	}
	ns.sandboxes[sbx.Name] = true
	w.did(op, ns.name+"/"+sbx.Name)
	return nil
}

func (w *workload) refusal(op, name string, err error) error {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		w.count(opSkipped)
		return nil
	}
	w.count(opRefused)
	w.refused = append(w.refused, fmt.Sprintf("%s %s: %v", op, name, err))
	return fmt.Errorf("%s %s: %w", op, name, err)
}

// updateSandbox applies mutate to a fresh copy, retrying conflicts.
// runSource resumes src when it is paused: a capture or a fork from a
// paused Sandbox would wait until it runs again.
func (w *workload) runSource(ctx context.Context, ns, src string) error {
	ok, err := w.updateSandbox(ctx, ns, src, func(s *sandboxv1.Sandbox) bool {
		if s.Spec.State != sandboxv1.SandboxStateStopped {
			return false
		}
		s.Spec.State = sandboxv1.SandboxStateRunning
		return true
	})
	if err != nil {
		return err
	}
	if ok {
		w.did(opResume, ns+"/"+src)
	}
	return nil
}

func (w *workload) updateSandbox(ctx context.Context, ns, name string, mutate func(*sandboxv1.Sandbox) bool) (bool, error) {
	changed := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sbx := &sandboxv1.Sandbox{}
		if err := w.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, sbx); err != nil {
			return err
		}
		if !sbx.DeletionTimestamp.IsZero() || !mutate(sbx) {
			changed = false
			return nil
		}
		changed = true
		return w.c.Update(ctx, sbx)
	})
	return changed, err
}

func (w *workload) changeSpec(ctx context.Context, ns *nsState) error {
	name := pick(w.rng, ns.sandboxes)
	if name == "" {
		return w.createSandbox(ctx, ns, nil)
	}
	what := w.rng.IntN(4)
	timeout, env, np := w.timeout(), w.env(ns), w.networkPolicy(ns)
	ok, err := w.updateSandbox(ctx, ns.name, name, func(s *sandboxv1.Sandbox) bool {
		switch what {
		case 0:
			s.Spec.TimeoutSeconds = timeout
		case 1:
			s.Spec.Env = env
		case 2:
			s.Spec.NetworkPolicy = np
		default:
			if len(s.Spec.Ports) == 0 {
				s.Spec.Ports = []int32{8080}
			} else {
				s.Spec.Ports = nil
			}
		}
		return true
	})
	if err != nil {
		return w.refusal(opChangeSpec, name, err)
	}
	if ok {
		w.did(opChangeSpec, ns.name+"/"+name)
	}
	return nil
}

// setState pauses or resumes a Sandbox. A Sandbox is not paused while a
// capture of it is still to be taken: the capture would wait for it to run
// again, a declaration that cannot converge (see docs/dev/chaos.md).
func (w *workload) setState(ctx context.Context, ns *nsState, state sandboxv1.SandboxState) error {
	name := pick(w.rng, ns.sandboxes)
	if name == "" {
		return nil
	}
	op := opResume
	if state == sandboxv1.SandboxStateStopped {
		op = opPause
		if busy, err := w.captureNeeds(ctx, ns.name, name); err != nil || busy {
			w.count(opSkipped)
			return err
		}
	}
	ok, err := w.updateSandbox(ctx, ns.name, name, func(s *sandboxv1.Sandbox) bool {
		if s.Spec.State == state || (state == sandboxv1.SandboxStateRunning && s.Spec.State == "") {
			return false
		}
		s.Spec.State = state
		return true
	})
	if err != nil {
		return w.refusal(op, name, err)
	}
	if ok {
		w.did(op, ns.name+"/"+name)
	}
	return nil
}

// captureNeeds reports whether a SandboxSnapshot or SandboxFork of ns still
// has to capture Sandbox name.
func (w *workload) captureNeeds(ctx context.Context, ns, name string) (bool, error) {
	snaps := &sandboxv1.SandboxSnapshotList{}
	if err := w.c.List(ctx, snaps, client.InNamespace(ns)); err != nil {
		return false, err
	}
	for _, s := range snaps.Items {
		if ref := s.Spec.Source.SandboxRef; ref != nil && ref.Name == name && !s.Status.ReadyToUse && s.Status.SnapshotID == "" {
			return true, nil
		}
	}
	forks := &sandboxv1.SandboxForkList{}
	if err := w.c.List(ctx, forks, client.InNamespace(ns)); err != nil {
		return false, err
	}
	for _, f := range forks.Items {
		if ref := f.Spec.Source.SandboxRef; ref != nil && ref.Name == name {
			capture := &sandboxv1.SandboxSnapshot{}
			err := w.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: f.Name + "-capture"}, capture)
			if apierrors.IsNotFound(err) || (err == nil && !capture.Status.ReadyToUse && capture.Status.SnapshotID == "") {
				return true, nil
			}
			if err != nil {
				return false, err
			}
		}
	}
	return false, nil
}

// heartbeat sets the last-activity annotation of a random Sandbox of ns,
// fork children included.
func (w *workload) heartbeat(ctx context.Context, ns *nsState) error {
	list := &sandboxv1.SandboxList{}
	if err := w.c.List(ctx, list, client.InNamespace(ns.name)); err != nil {
		return err
	}
	if len(list.Items) == 0 {
		return nil
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	sbx := &list.Items[w.rng.IntN(len(list.Items))]
	if err := heartbeatSandbox(ctx, w.c, sbx); err != nil {
		return w.refusal(opHeartbeat, sbx.Name, err)
	}
	w.did(opHeartbeat, ns.name+"/"+sbx.Name)
	return nil
}

// heartbeatSandbox records client activity now on sbx.
func heartbeatSandbox(ctx context.Context, c client.Client, sbx *sandboxv1.Sandbox) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, sandboxv1.AnnotationLastActivity, time.Now().UTC().Format(time.RFC3339))
	return c.Patch(ctx, sbx, client.RawPatch(types.MergePatchType, []byte(patch)))
}

func (w *workload) capture(ctx context.Context, ns *nsState) error {
	src := pick(w.rng, ns.sandboxes)
	if src == "" {
		return w.createSandbox(ctx, ns, nil)
	}
	snap := &sandboxv1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.name, Name: w.name("snap")},
		Spec: sandboxv1.SandboxSnapshotSpec{
			Source:            sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: src}},
			KeepSourceRunning: w.rng.IntN(2) == 0,
		},
	}
	// Capturing a Sandbox that is paused would wait until it runs again.
	if err := w.runSource(ctx, ns.name, src); err != nil {
		return w.refusal(opCapture, snap.Name, err)
	}
	if err := w.c.Create(ctx, snap); err != nil {
		return w.refusal(opCapture, snap.Name, err)
	}
	ns.snapshots[snap.Name] = true
	w.did(opCapture, ns.name+"/"+snap.Name+" of "+src)
	return nil
}

// recipe creates a recipe snapshot, one of a few variants so that builds
// are shared; one variant clones a local repository with credentials from a
// Secret.
func (w *workload) recipe(ctx context.Context, ns *nsState) error {
	v := w.rng.IntN(4)
	r := &sandboxv1.SnapshotRecipe{
		Runtime: ptr.To(sandboxv1.Runtime("node24")),
		Env:     []sandboxv1.RecipeEnvVar{{Name: "VARIANT", Value: fmt.Sprint(v)}},
		Setup: []sandboxv1.RecipeCommand{
			{Name: "build", Command: "sh", Args: []string{"-c", fmt.Sprintf("echo variant %d > built.txt", v)}},
		},
	}
	if v == 3 && w.h.git != nil {
		r.Repositories = []sandboxv1.RecipeRepository{{
			URL: w.h.git.url, Path: "repo",
			Credentials: &sandboxv1.GitCredentials{SecretName: gitCredentialSecret},
		}}
	}
	snap := &sandboxv1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.name, Name: w.name("recipe")},
		Spec:       sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{Recipe: r}},
	}
	if err := w.c.Create(ctx, snap); err != nil {
		return w.refusal(opRecipe, snap.Name, err)
	}
	ns.snapshots[snap.Name] = true
	w.did(opRecipe, fmt.Sprintf("%s/%s variant %d", ns.name, snap.Name, v))
	return nil
}

// summary lists the operations done by kind.
func (w *workload) summary() []countRow { return sortedCounts(w.ops) }
