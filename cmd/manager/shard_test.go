package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/localstack"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

// TestShardsOwnDisjointObjectsAndHandOver runs three manager binaries against
// one API server and one emulator: two replicas of shard 0 and one of shard
// 1 (--shards=2), each reaching Vercel through its own recording proxy.
// Sandboxes and captures in namespaces of both shards become Ready, and the
// proxies' logs show every Vercel sandbox, session and snapshot touched by
// one shard only — the one its namespace hashes to — through creation,
// polling and deletion. Then shard 0's leader is killed (SIGKILL: it releases
// nothing) and the other replica of shard 0 takes its Lease and reconciles a
// new Sandbox of that shard.
func TestShardsOwnDisjointObjectsAndHandOver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	stack, kubeconfig := startStack(ctx, t, emulator.Options{})
	c := stack.Client

	target, _ := url.Parse(stack.EmulatorURL)
	start := func(name string, shard int) *shardReplica {
		r := &shardReplica{name: name, shard: shard}
		rp := httputil.NewSingleHostReverseProxy(target)
		r.proxy = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			body, _ := io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(body))
			r.record(req, body)
			rp.ServeHTTP(w, req)
		}))
		t.Cleanup(r.proxy.Close)
		r.cmd = exec.CommandContext(ctx, os.Args[0],
			"--kubeconfig="+kubeconfig,
			"--metrics-bind-address=0",
			"--health-probe-bind-address=0",
			"--vercel-api-url="+r.proxy.URL,
			"--vercel-team-id="+localstack.TeamID,
			"--vercel-project-id="+localstack.ProjectID,
			"--cluster-id=shard-test",
			"--poll-interval=3s",
			"--backoff-cap=2s",
			"--leader-elect",
			"--leader-election-namespace=default",
			"--leader-election-lease-duration=4s",
			"--leader-election-renew-deadline=3s",
			"--leader-election-retry-period=1s",
			"--shards=2",
			fmt.Sprintf("--shard-index=%d", shard),
		)
		r.cmd.Env = append(filteredEnv("VERCEL_TOKEN"), "RUN_MANAGER_MAIN=1", "VERCEL_TOKEN="+stack.Emulator.Token())
		r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			r.kill()
			if t.Failed() {
				t.Logf("%s output:\n%s", r.name, r.out.String())
			}
		})
		return r
	}
	replicas := []*shardReplica{start("shard0-a", 0), start("shard0-b", 0), start("shard1", 1)}

	// Two namespaces of each shard, two Sandboxes in each, and one capture
	// per namespace of its first Sandbox.
	var namespaces [2][]string
	for i := 0; len(namespaces[0]) < 2 || len(namespaces[1]) < 2; i++ {
		ns := fmt.Sprintf("team-%d", i)
		if s := controllers.ShardOf(ns, 2); len(namespaces[s]) < 2 {
			namespaces[s] = append(namespaces[s], ns)
		}
	}
	nsShard := map[string]int{}
	node := sandboxv1.Runtime("node24")
	newSandbox := func(ns, name string) {
		t.Helper()
		sbx := &sandboxv1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Runtime: &node}},
		}
		if err := c.Create(ctx, sbx); err != nil {
			t.Fatal(err)
		}
	}
	for s, list := range namespaces {
		for _, ns := range list {
			nsShard[ns] = s
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			newSandbox(ns, "a")
			newSandbox(ns, "b")
			snap := &sandboxv1.SandboxSnapshot{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "capture"},
				Spec: sandboxv1.SandboxSnapshotSpec{
					Source:            sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: "a"}},
					KeepSourceRunning: true,
				},
			}
			if err := c.Create(ctx, snap); err != nil {
				t.Fatal(err)
			}
		}
	}
	for ns := range nsShard {
		for _, name := range []string{"a", "b"} {
			waitReady(t, ctx, c, types.NamespacedName{Namespace: ns, Name: name}, &sandboxv1.Sandbox{})
		}
		waitReady(t, ctx, c, types.NamespacedName{Namespace: ns, Name: "capture"}, &sandboxv1.SandboxSnapshot{})
	}
	// A few polls (--poll-interval=3s) go by: steady state must stay split too.
	time.Sleep(5 * time.Second)

	for s := range 2 {
		lease := &coordinationv1.Lease{}
		name := controllers.LeaderElectionID(controllers.Shard{Index: s, Count: 2})
		if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: name}, lease); err != nil {
			t.Errorf("shard %d's Lease %s: %v", s, name, err)
		}
	}
	checkDisjoint(t, replicas, nsShard)

	// Exactly one replica of shard 0 leads: the one that called Vercel.
	var leader, standby *shardReplica
	switch a, b := replicas[0].objects(), replicas[1].objects(); {
	case len(a) > 0 && len(b) == 0:
		leader, standby = replicas[0], replicas[1]
	case len(b) > 0 && len(a) == 0:
		leader, standby = replicas[1], replicas[0]
	default:
		t.Fatalf("shard 0's replicas both or neither called Vercel for objects: %s %v, %s %v", replicas[0].name, a, replicas[1].name, b)
	}
	leader.kill()
	killedAt := time.Now()
	ns0 := namespaces[0][0]
	newSandbox(ns0, "after-failover")
	waitReady(t, ctx, c, types.NamespacedName{Namespace: ns0, Name: "after-failover"}, &sandboxv1.Sandbox{})
	t.Logf("%s killed; %s reconciled a new Sandbox of shard 0 %s later", leader.name, standby.name, time.Since(killedAt).Round(100*time.Millisecond))
	if !standby.touchedPrefix(ns0 + "-after-failover-") {
		t.Errorf("the new Sandbox's Vercel calls did not come from %s, the remaining replica of shard 0", standby.name)
	}

	// Deleting everything: each shard deletes its own.
	for ns := range nsShard {
		for _, o := range []client.Object{&sandboxv1.SandboxSnapshot{}, &sandboxv1.Sandbox{}} {
			if err := c.DeleteAllOf(ctx, o, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, 90*time.Second, "every Sandbox and Vercel sandbox to be deleted", func() bool {
		list := &sandboxv1.SandboxList{}
		if err := c.List(ctx, list); err != nil || len(list.Items) > 0 {
			return false
		}
		return len(stack.Emulator.LiveSandboxes()) == 0
	})
	checkDisjoint(t, replicas, nsShard)
}

// shardReplica is one manager process and the log of its Vercel requests.
type shardReplica struct {
	name  string
	shard int
	proxy *httptest.Server
	cmd   *exec.Cmd
	out   syncBuffer

	mu sync.Mutex
	// touched holds the Vercel objects requests named: "sandbox:<name>",
	// "session:<id>", "snapshot:<id>".
	touched map[string]int
	once    sync.Once
}

// record notes the Vercel object a request is about, from its path or, for
// a create, its body.
func (r *shardReplica) record(req *http.Request, body []byte) {
	var key string
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[1] == "sandboxes" && parts[2] == "sessions" && len(parts) >= 4:
		key = "session:" + parts[3]
	case len(parts) >= 4 && parts[1] == "sandboxes" && parts[2] == "snapshots":
		key = "snapshot:" + parts[3]
	case len(parts) >= 3 && parts[1] == "sandboxes" && parts[2] != "sessions" && parts[2] != "snapshots":
		name, _ := url.PathUnescape(parts[2])
		key = "sandbox:" + name
	case len(parts) == 2 && parts[1] == "sandboxes" && req.Method == http.MethodPost:
		var create struct{ Name string }
		if json.Unmarshal(body, &create) == nil && create.Name != "" {
			key = "sandbox:" + create.Name
		}
	}
	if key == "" {
		return // lists, the project check
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.touched == nil {
		r.touched = map[string]int{}
	}
	r.touched[key]++
}

func (r *shardReplica) objects() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.touched))
	for k := range r.touched {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (r *shardReplica) touchedPrefix(prefix string) bool {
	for _, k := range r.objects() {
		if strings.HasPrefix(k, "sandbox:"+prefix) {
			return true
		}
	}
	return false
}

func (r *shardReplica) kill() {
	r.once.Do(func() {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	})
}

// checkDisjoint: every Vercel object was touched by one shard only, and
// every sandbox by the shard its namespace hashes to.
func checkDisjoint(t *testing.T, replicas []*shardReplica, nsShard map[string]int) {
	t.Helper()
	byShard := map[string]map[int]bool{}
	sandboxes := 0
	for _, r := range replicas {
		for _, k := range r.objects() {
			if byShard[k] == nil {
				byShard[k] = map[int]bool{}
			}
			byShard[k][r.shard] = true
			if !strings.HasPrefix(k, "sandbox:") {
				continue
			}
			sandboxes++
			owner := -1
			for ns, s := range nsShard {
				if strings.HasPrefix(k, "sandbox:"+ns+"-") {
					owner = s
				}
			}
			if owner != r.shard {
				t.Errorf("%s (shard %d) called Vercel for %s, whose namespace is shard %d's", r.name, r.shard, k, owner)
			}
		}
	}
	for k, shards := range byShard {
		if len(shards) != 1 {
			t.Errorf("%s was touched by shards %v", k, shards)
		}
	}
	if sandboxes == 0 || len(byShard) < 8 {
		t.Errorf("only %d Vercel objects seen (%d sandboxes): the proxies recorded nothing useful", len(byShard), sandboxes)
	}
}

// waitReady waits until the object's Ready condition is True.
func waitReady(t *testing.T, ctx context.Context, c client.Client, key types.NamespacedName, o client.Object) {
	t.Helper()
	waitFor(t, 60*time.Second, fmt.Sprintf("%T %s to be Ready", o, key), func() bool {
		if err := c.Get(ctx, key, o); err != nil {
			return false
		}
		var conds []metav1.Condition
		switch o := o.(type) {
		case *sandboxv1.Sandbox:
			conds = o.Status.Conditions
		case *sandboxv1.SandboxSnapshot:
			conds = o.Status.Conditions
		}
		return meta.IsStatusConditionTrue(conds, sandboxv1.ConditionReady)
	})
}
