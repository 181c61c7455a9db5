package leaderfence

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// lock is a resourcelock.Interface whose writes succeed unless failing.
type lock struct {
	resourcelock.Interface
	failing bool
}

func (l *lock) Identity() string { return "me" }
func (l *lock) Update(context.Context, resourcelock.LeaderElectionRecord) error {
	if l.failing {
		return errors.New("unreachable")
	}
	return nil
}
func (l *lock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.Update(ctx, r)
}

type okTransport struct{ sent int }

func (o *okTransport) RoundTrip(*http.Request) (*http.Response, error) {
	o.sent++
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(""))}, nil
}

func TestFence(t *testing.T) {
	now := time.Unix(1000, 0)
	f := New(3 * time.Second)
	f.now = func() time.Time { return now }
	base := &lock{}
	l := f.Lock(base)
	kube := &okTransport{}
	kt := f.KubernetesTransport(kube)
	post := func() *http.Request { r, _ := http.NewRequest(http.MethodPost, "http://x/v2/sandboxes", nil); return r }
	get := func() *http.Request { r, _ := http.NewRequest(http.MethodGet, "http://x/v2/sandboxes", nil); return r }
	kubeWrite := func() error { _, err := kt.RoundTrip(post()); return err }

	// A standby: no Vercel mutation, reads and its own Kubernetes writes pass.
	if err := f.VercelGuard(post()); !errors.Is(err, ErrNotLeader) {
		t.Errorf("standby Vercel POST: %v, want ErrNotLeader", err)
	}
	if err := f.VercelGuard(get()); err != nil {
		t.Errorf("standby Vercel GET: %v", err)
	}
	if err := kubeWrite(); err != nil {
		t.Errorf("standby Kubernetes write: %v", err)
	}

	// Another replica's record does not elect this one.
	if err := l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "other"}); err != nil {
		t.Fatal(err)
	}
	if err := f.VercelGuard(post()); err == nil {
		t.Error("a write of another holder's record opened the fence")
	}

	// Elected: open until the renew deadline after the write started.
	if err := l.Create(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2900 * time.Millisecond)
	if err := f.VercelGuard(post()); err != nil {
		t.Errorf("2.9s after the renewal: %v", err)
	}
	if err := kubeWrite(); err != nil {
		t.Errorf("2.9s after the renewal, Kubernetes write: %v", err)
	}

	// A failed renewal does not count; past the deadline the fence closes.
	base.failing = true
	if err := l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"}); err == nil {
		t.Fatal("want the failing update")
	}
	now = now.Add(100 * time.Millisecond)
	if err := f.VercelGuard(post()); !errors.Is(err, ErrNotLeader) || !strings.Contains(err.Error(), "POST /v2/sandboxes") {
		t.Errorf("3s after the renewal: %v, want ErrNotLeader naming the request", err)
	}
	if err := f.VercelGuard(get()); err != nil {
		t.Errorf("reads stay allowed: %v", err)
	}
	sent := kube.sent
	if err := kubeWrite(); !errors.Is(err, ErrNotLeader) || kube.sent != sent {
		t.Errorf("Kubernetes write past the deadline: %v (sent %d more)", err, kube.sent-sent)
	}

	// A successful renewal reopens it.
	base.failing = false
	if err := l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"}); err != nil {
		t.Fatal(err)
	}
	if err := f.VercelGuard(post()); err != nil {
		t.Errorf("after a new renewal: %v", err)
	}
}
