package main

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	crleaderelection "sigs.k8s.io/controller-runtime/pkg/leaderelection"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/getsentry/sandbox-controller/internal/leaderfence"
)

// fencedLeaderElection builds the leader election Lease lock as
// controller-runtime would (same identity scheme, user agent, timeout and
// events), wrapped so that fence learns of every renewal, and then fences
// the manager's own Kubernetes writes (restConfig is changed; the lock keeps
// an unfenced copy, since it must renew while the fence is closed). The
// returned recorders must be bound to the manager once it exists: the
// lock's "became leader" events go through them. The leader writes labels on
// the Lease at every renewal.
func fencedLeaderElection(restConfig *rest.Config, f leaderElectionFlags, id string, labels map[string]string, fence *leaderfence.Fence) (resourcelock.Interface, *lateRecorders, error) {
	late := &lateRecorders{}
	lock, err := crleaderelection.NewResourceLock(rest.CopyConfig(restConfig), late, crleaderelection.Options{
		LeaderElection:          true,
		LeaderElectionID:        id,
		LeaderElectionNamespace: f.namespace,
		RenewDeadline:           f.renewDeadline,
		LeaderLabels:            labels,
	})
	if err != nil {
		return nil, nil, err
	}
	restConfig.Wrap(fence.KubernetesTransport)
	return fence.Lock(lock), late, nil
}

// lateRecorders is a recorder.Provider for the lock, which is built before
// the manager whose recorders it forwards to; events before bind are
// dropped (the lock records none before the manager starts).
type lateRecorders struct {
	mu  sync.Mutex
	mgr ctrl.Manager
}

func (l *lateRecorders) bind(mgr ctrl.Manager) {
	l.mu.Lock()
	l.mgr = mgr
	l.mu.Unlock()
}

func (l *lateRecorders) get() ctrl.Manager {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mgr
}

func (l *lateRecorders) GetEventRecorderFor(name string) record.EventRecorder {
	return lateRecord{l: l, name: name}
}

func (l *lateRecorders) GetEventRecorder(name string) recorder.EventRecorder {
	return lateEvents{l: l, name: name}
}

type lateRecord struct {
	l    *lateRecorders
	name string
}

func (r lateRecord) Event(object runtime.Object, eventtype, reason, message string) {
	if m := r.l.get(); m != nil {
		//lint:ignore SA1019 client-go's Lease lock records its events through the old API
		m.GetEventRecorderFor(r.name).Event(object, eventtype, reason, message)
	}
}

func (r lateRecord) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	if m := r.l.get(); m != nil {
		//lint:ignore SA1019 client-go's Lease lock records its events through the old API
		m.GetEventRecorderFor(r.name).Eventf(object, eventtype, reason, messageFmt, args...)
	}
}

func (r lateRecord) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	if m := r.l.get(); m != nil {
		//lint:ignore SA1019 client-go's Lease lock records its events through the old API
		m.GetEventRecorderFor(r.name).AnnotatedEventf(object, annotations, eventtype, reason, messageFmt, args...)
	}
}

type lateEvents struct {
	l    *lateRecorders
	name string
}

func (e lateEvents) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	if m := e.l.get(); m != nil {
		m.GetEventRecorder(e.name).Eventf(regarding, related, eventtype, reason, action, note, args...)
	}
}

func (e lateEvents) AnnotatedEventf(regarding, related runtime.Object, annotations map[string]string, eventtype, reason, action, note string, args ...any) {
	if m := e.l.get(); m != nil {
		m.GetEventRecorder(e.name).AnnotatedEventf(regarding, related, annotations, eventtype, reason, action, note, args...)
	}
}
