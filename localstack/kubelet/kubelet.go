// Package kubelet plays a node's kubelet for the manager's pods on the local
// control plane, which has no nodes: it registers one Node, binds the pods
// its selector picks to it, runs each pod's first container as a local
// process (localstack/managerpod: the container's arguments and environment,
// its ServiceAccount's token, its Secret file), probes readiness and
// liveness as the kubelet would, and writes the pod status that the
// replicaset and deployment controllers turn into the Deployment's status.
// With it, `make deploy` followed by `kubectl rollout status` works against
// `make dev --deployed` as on a cluster (README, "Install on a cluster").
//
// Only what a local process cannot share with a pod is adapted (see
// managerpod); every container runs the same binary, whatever its image
// names, and a pod has one container.
package kubelet

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/getsentry/sandbox-controller/localstack/controlplane"
	"github.com/getsentry/sandbox-controller/localstack/managerpod"
)

// NodeName is the Node the kubelet registers and binds pods to.
const NodeName = "local"

// Options says which pods to run, and how.
type Options struct {
	// ControlPlane issues the pods' ServiceAccount tokens; Client (an
	// administrator) reads and writes pods, bindings and the Node.
	ControlPlane *controlplane.ControlPlane
	Client       client.Client
	// Binary is what every container runs (managerpod.Build, or the binary
	// of the image `make image` built).
	Binary string
	// Selector picks the pods to run; others stay Pending, as on a node
	// their scheduler never picks.
	Selector labels.Selector
	// ExtraArgs follow each container's arguments (for example
	// --vercel-api-url pointing at the emulator).
	ExtraArgs []string
	// Dir receives each pod's files and its container log,
	// <namespace>_<pod>.log.
	Dir string
	// Log receives a line per thing the kubelet does.
	Log io.Writer
	// Interval is how often pods are looked at and probed (default 1 s).
	Interval time.Duration
}

// Kubelet runs the selected pods until its context ends.
type Kubelet struct {
	opts Options
	pods map[string]*container // by namespace/name
	mu   sync.Mutex
}

// container is one pod's running container.
type container struct {
	uid      string
	proc     *managerpod.Process
	started  time.Time
	restarts int32
	// ready is the last readiness result; liveFailures the consecutive
	// liveness failures.
	ready        bool
	liveFailures int
	// restartAt is when an exited container runs again (back-off).
	restartAt time.Time
	lastExit  string
}

// New returns a kubelet; Run starts it.
func New(opts Options) *Kubelet {
	if opts.Interval == 0 {
		opts.Interval = time.Second
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	return &Kubelet{opts: opts, pods: map[string]*container{}}
}

// Run registers the Node and runs pods until ctx ends; then it stops every
// container (SIGTERM, then SIGKILL after the pod's grace period) and returns.
func (k *Kubelet) Run(ctx context.Context) error {
	if err := k.registerNode(ctx); err != nil {
		return err
	}
	defer k.stopAll()
	tick := time.NewTicker(k.opts.Interval)
	defer tick.Stop()
	lastHeartbeat := time.Now()
	for {
		if err := k.sync(ctx); err != nil && ctx.Err() == nil {
			k.logf("sync: %v", err)
		}
		// The node lifecycle controller is not run here, but a Node whose
		// heartbeat is old reads as dead to anyone who looks.
		if time.Since(lastHeartbeat) > 20*time.Second {
			if err := k.registerNode(ctx); err != nil && ctx.Err() == nil {
				k.logf("node heartbeat: %v", err)
			}
			lastHeartbeat = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (k *Kubelet) logf(format string, args ...any) {
	fmt.Fprintf(k.opts.Log, "kubelet: "+format+"\n", args...)
}

// registerNode creates the Node, or renews its Ready condition.
func (k *Kubelet) registerNode(ctx context.Context) error {
	node := &corev1.Node{}
	err := k.opts.Client.Get(ctx, client.ObjectKey{Name: NodeName}, node)
	if apierrors.IsNotFound(err) {
		node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: NodeName, Labels: map[string]string{
			corev1.LabelHostname: NodeName, corev1.LabelOSStable: "linux",
		}}}
		if err := k.opts.Client.Create(ctx, node); err != nil {
			return fmt.Errorf("register node %s: %w", NodeName, err)
		}
	} else if err != nil {
		return err
	}
	now := metav1.Now()
	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "localstack/kubelet runs the manager's pods as local processes", LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: NodeName}}
	return k.opts.Client.Status().Update(ctx, node)
}

// sync does one round: binds new pods, starts, probes and restarts
// containers, finishes deleted pods, and writes what changed.
func (k *Kubelet) sync(ctx context.Context) error {
	list := &corev1.PodList{}
	if err := k.opts.Client.List(ctx, list, client.MatchingLabelsSelector{Selector: k.opts.Selector}); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i := range list.Items {
		pod := &list.Items[i]
		key := pod.Namespace + "/" + pod.Name
		seen[key] = true
		if err := k.syncPod(ctx, key, pod); err != nil && ctx.Err() == nil {
			k.logf("pod %s: %v", key, err)
		}
	}
	// A pod removed without a graceful deletion (force delete) loses its
	// container at once.
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, c := range k.pods {
		if !seen[key] {
			k.logf("pod %s is gone: killing its container", key)
			_ = c.proc.Stop(0)
			delete(k.pods, key)
		}
	}
	return nil
}

func (k *Kubelet) syncPod(ctx context.Context, key string, pod *corev1.Pod) error {
	k.mu.Lock()
	c := k.pods[key]
	if c != nil && c.uid != string(pod.UID) { // a new pod of the same name
		_ = c.proc.Stop(0)
		delete(k.pods, key)
		c = nil
	}
	k.mu.Unlock()

	switch {
	case !pod.DeletionTimestamp.IsZero():
		return k.finish(ctx, key, pod, c)
	case pod.Spec.NodeName == "":
		k.logf("binding pod %s to node %s", key, NodeName)
		return k.opts.Client.SubResource("binding").Create(ctx, pod, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
			Target:     corev1.ObjectReference{Kind: "Node", Name: NodeName},
		})
	case pod.Spec.NodeName != NodeName:
		return nil
	}
	if c == nil {
		var err error
		if c, err = k.start(ctx, key, pod, nil); err != nil {
			return k.writeStatus(ctx, pod, nil, err.Error())
		}
	}
	return k.writeStatus(ctx, pod, k.probe(ctx, key, pod, c), "")
}

// start runs the pod's container; prev, when set, is the container it
// replaces (a restart).
func (k *Kubelet) start(ctx context.Context, key string, pod *corev1.Pod, prev *container) (*container, error) {
	dir := filepath.Join(k.opts.Dir, pod.Namespace+"_"+pod.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	proc, err := managerpod.Run(ctx, dir, managerpod.Options{
		Name: key, Binary: k.opts.Binary, Pod: pod,
		ControlPlane: k.opts.ControlPlane, Client: k.opts.Client, ExtraArgs: k.opts.ExtraArgs,
		Output: logFile(filepath.Join(k.opts.Dir, pod.Namespace+"_"+pod.Name+".log")),
	})
	if err != nil {
		k.logf("pod %s: cannot start its container: %v", key, err)
		return nil, err
	}
	c := &container{uid: string(pod.UID), proc: proc, started: time.Now()}
	if prev != nil {
		c.restarts, c.lastExit = prev.restarts+1, prev.lastExit
	}
	k.mu.Lock()
	k.pods[key] = c
	k.mu.Unlock()
	k.logf("pod %s: started its container (restarts %d)", key, c.restarts)
	return c, nil
}

// probe updates readiness and liveness, and restarts a container that
// exited or failed its liveness probe failureThreshold times in a row, with
// the kubelet's back-off (10 s, doubling, at most 5 min). It returns the
// pod's container: c, or the one that replaced it.
func (k *Kubelet) probe(ctx context.Context, key string, pod *corev1.Pod, c *container) *container {
	ctr := pod.Spec.Containers[0]
	if c.proc.Exited() {
		if c.restartAt.IsZero() {
			c.lastExit = fmt.Sprint(c.proc.Err())
			backoff := min(10*time.Second<<min(c.restarts, 5), 5*time.Minute)
			c.restartAt, c.ready = time.Now().Add(backoff), false
			k.logf("pod %s: container exited (%s); restarting in %s", key, c.lastExit, backoff)
		}
		if time.Now().After(c.restartAt) {
			if next, err := k.start(ctx, key, pod, c); err == nil {
				return next
			}
		}
		return c
	}
	up := time.Since(c.started)
	if p := ctr.ReadinessProbe; p == nil || up >= time.Duration(p.InitialDelaySeconds)*time.Second {
		c.ready = c.proc.Ready()
	}
	if p := ctr.LivenessProbe; p != nil && up >= time.Duration(p.InitialDelaySeconds)*time.Second {
		if c.proc.Live() {
			c.liveFailures = 0
		} else if c.liveFailures++; c.liveFailures >= int(cmp.Or(p.FailureThreshold, 3)) {
			k.logf("pod %s: liveness probe failed %d times: killing the container", key, c.liveFailures)
			_ = c.proc.Stop(time.Duration(ptr.Deref(pod.Spec.TerminationGracePeriodSeconds, 30)) * time.Second)
			c.liveFailures = 0
		}
	}
	return c
}

// finish stops a deleted pod's container within its grace period and
// removes the pod, as the kubelet confirms a graceful deletion.
func (k *Kubelet) finish(ctx context.Context, key string, pod *corev1.Pod, c *container) error {
	if c != nil {
		grace := time.Duration(ptr.Deref(pod.DeletionGracePeriodSeconds, 30)) * time.Second
		k.logf("pod %s is being deleted: stopping its container (grace %s)", key, grace)
		if err := c.proc.Stop(grace); err != nil {
			k.logf("pod %s: %v", key, err)
		}
		k.mu.Lock()
		delete(k.pods, key)
		k.mu.Unlock()
	}
	err := k.opts.Client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
	return client.IgnoreNotFound(err)
}

// writeStatus writes the pod's status from its container; failed, when set,
// says why the container could not start.
func (k *Kubelet) writeStatus(ctx context.Context, pod *corev1.Pod, c *container, failed string) error {
	before := pod.DeepCopy()
	st := &pod.Status
	ctr := pod.Spec.Containers[0]
	cs := corev1.ContainerStatus{Name: ctr.Name, Image: ctr.Image, ImageID: ctr.Image}
	ready := false
	switch {
	case c == nil:
		st.Phase = corev1.PodPending
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: failed}
	case c.proc.Exited():
		st.Phase = corev1.PodRunning
		cs.RestartCount = c.restarts
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: c.lastExit}
	default:
		st.Phase = corev1.PodRunning
		ready = c.ready
		cs.RestartCount, cs.Ready, cs.Started = c.restarts, ready, ptr.To(true)
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.started.Truncate(time.Second))}
	}
	st.HostIP, st.PodIP = "127.0.0.1", "127.0.0.1"
	st.HostIPs, st.PodIPs = []corev1.HostIP{{IP: "127.0.0.1"}}, []corev1.PodIP{{IP: "127.0.0.1"}}
	if st.StartTime == nil {
		st.StartTime = ptr.To(metav1.Now())
	}
	st.ContainerStatuses = []corev1.ContainerStatus{cs}
	setCondition(st, corev1.PodScheduled, true)
	setCondition(st, corev1.PodInitialized, true)
	setCondition(st, corev1.ContainersReady, ready)
	setCondition(st, corev1.PodReady, ready)
	if equalStatus(before.Status, pod.Status) {
		return nil
	}
	if ready != podReady(before) {
		k.logf("pod %s/%s: Ready=%v", pod.Namespace, pod.Name, ready)
	}
	return k.opts.Client.Status().Update(ctx, pod)
}

func setCondition(st *corev1.PodStatus, t corev1.PodConditionType, ok bool) {
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
	}
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			if st.Conditions[i].Status != status {
				st.Conditions[i].Status, st.Conditions[i].LastTransitionTime = status, metav1.Now()
			}
			return
		}
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: status, LastTransitionTime: metav1.Now()})
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// equalStatus compares what writeStatus sets, ignoring timestamps that only
// the first write fixes.
func equalStatus(a, b corev1.PodStatus) bool {
	if a.Phase != b.Phase || len(a.Conditions) != len(b.Conditions) || len(a.ContainerStatuses) != len(b.ContainerStatuses) || a.PodIP != b.PodIP {
		return false
	}
	for i := range a.Conditions {
		if a.Conditions[i].Type != b.Conditions[i].Type || a.Conditions[i].Status != b.Conditions[i].Status {
			return false
		}
	}
	for i := range a.ContainerStatuses {
		x, y := a.ContainerStatuses[i], b.ContainerStatuses[i]
		if x.Ready != y.Ready || x.RestartCount != y.RestartCount || (x.State.Running == nil) != (y.State.Running == nil) ||
			(x.State.Waiting == nil) != (y.State.Waiting == nil) {
			return false
		}
	}
	return true
}

// stopAll stops every container, each within its pod's grace period, in
// parallel.
func (k *Kubelet) stopAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	var wg sync.WaitGroup
	for key, c := range k.pods {
		wg.Go(func() {
			if err := c.proc.Stop(30 * time.Second); err != nil {
				k.logf("pod %s: %v", key, err)
			}
		})
	}
	wg.Wait()
	k.pods = map[string]*container{}
}

// logFile opens path for a container's output (appended across restarts,
// as `kubectl logs --previous` would keep it); nil when it cannot.
func logFile(path string) io.Writer {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil
	}
	return f
}
