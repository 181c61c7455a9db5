package emulator

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// testProfile has a distinct distribution per operation, so a delay
// measured on one operation cannot come from another's.
func testProfile(seed uint64) LatencyProfile {
	p := LatencyProfile{Name: "test", Seed: seed, Ops: map[LatencyOp]LatencyDist{}}
	for i, op := range LatencyOps() {
		m := time.Duration(1000+100*i) * time.Millisecond
		p.Ops[op] = LatencyDist{Median: m, P95: 2 * m}
	}
	return p
}

// async runs one request in the background; the channel gets its answer.
func (te *tenv) async(method, path string, body any) <-chan resp {
	ch := make(chan resp, 1)
	go func() { ch <- te.req(method, path, body) }()
	return ch
}

// delayedBy checks that a request started with async is held until the
// fake clock has advanced exactly want, and returns its answer.
func (te *tenv) delayedBy(what string, ch <-chan resp, want time.Duration) resp {
	te.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for te.e.LatencyWaiting() == 0 {
		select {
		case r := <-ch:
			te.t.Fatalf("%s: answered without a delay (%d %s)", what, r.status, r.body)
		default:
		}
		if time.Now().After(deadline) {
			te.t.Fatalf("%s: never waited for a delay", what)
		}
		time.Sleep(time.Millisecond)
	}
	te.clk.Advance(want - time.Millisecond)
	select {
	case r := <-ch:
		te.t.Fatalf("%s: answered %s before its delay of %s (%d %s)", what, want-time.Millisecond, want, r.status, r.body)
	case <-time.After(50 * time.Millisecond):
	}
	te.clk.Advance(time.Millisecond)
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		te.t.Fatalf("%s: still waiting after its delay of %s", what, want)
	}
	return resp{}
}

// immediate checks that a request answers without the clock moving.
func (te *tenv) immediate(what, method, path string, body any) resp {
	te.t.Helper()
	select {
	case r := <-te.async(method, path, body):
		return r
	case <-time.After(10 * time.Second):
		te.t.Fatalf("%s: held without a profile delay to wait for", what)
	}
	return resp{}
}

// TestLatencyProfileDelays drives every delayed operation on a fake clock:
// each answers exactly when the clock passes the delay the profile draws
// (predicted by a sampler with the same seed), and what is not delayed (a
// second command, a GET without resume, a resume of a running sandbox)
// answers at once.
func TestLatencyProfileDelays(t *testing.T) {
	p := testProfile(42)
	te := newEnv(t, Options{LatencyProfile: p})
	want := newLatencySampler(p)
	ok := func(what string, r resp, out any) {
		t.Helper()
		if r.status != 200 && r.status != 201 {
			t.Fatalf("%s: %d %s", what, r.status, r.body)
		}
		if out != nil {
			r.json(t, out)
		}
	}

	var sb vercel.SandboxResponse
	ok("create", te.delayedBy("create", te.async("POST", "/v3/sandboxes", map[string]any{"projectId": "prj_emulator", "name": "a"}), want.next(LatencyCreate)), &sb)
	sess := "/v2/sandboxes/sessions/" + sb.Session.ID
	ok("first command", te.delayedBy("first command", te.async("POST", sess+"/cmd", map[string]any{"command": "true"}), want.next(LatencyFirstCommand)), nil)
	ok("second command", te.immediate("second command", "POST", sess+"/cmd", map[string]any{"command": "true"}), nil)
	ok("resume of a running sandbox", te.immediate("resume of a running sandbox", "GET", "/v2/sandboxes/a"+prj+"&resume=true", nil), nil)

	var snap vercel.SnapshotResponse
	ok("snapshot", te.delayedBy("snapshot", te.async("POST", sess+"/snapshot", map[string]any{}), want.next(LatencySnapshot)), &snap)
	var from vercel.SandboxResponse
	ok("create from snapshot", te.delayedBy("create from snapshot", te.async("POST", "/v3/sandboxes", map[string]any{
		"projectId": "prj_emulator", "name": "b", "source": map[string]any{"type": "snapshot", "snapshotId": snap.Snapshot.ID},
	}), want.next(LatencyCreateFromSnapshot)), &from)
	ok("stop", te.delayedBy("stop", te.async("POST", "/v2/sandboxes/sessions/"+from.Session.ID+"/stop", nil), want.next(LatencyStop)), nil)
	ok("get", te.immediate("get", "GET", "/v2/sandboxes/b"+prj, nil), nil)
	var resumed sandboxAndSession
	ok("resume", te.delayedBy("resume", te.async("GET", "/v2/sandboxes/b"+prj+"&resume=true", nil), want.next(LatencyResume)), &resumed)
	if !resumed.Resumed {
		t.Fatalf("resume did not start a session: %+v", resumed)
	}
	ok("fork", te.delayedBy("fork", te.async("POST", "/v2/sandboxes/b/fork"+prj, map[string]any{}), want.next(LatencyFork)), nil)
	ok("list", te.immediate("list", "GET", "/v2/sandboxes?project=prj_emulator", nil), nil)

	// SetLatencyProfile with the zero profile removes the delays.
	te.e.SetLatencyProfile(LatencyProfile{})
	ok("create without profile", te.immediate("create without profile", "POST", "/v3/sandboxes", map[string]any{"projectId": "prj_emulator", "name": "c"}), nil)
}

// TestLatencyProfileNoneByDefault: without a profile, nothing waits for the
// clock (the zero Options, and the name "none").
func TestLatencyProfileNoneByDefault(t *testing.T) {
	none, err := LatencyProfileByName("none")
	if err != nil || !none.Empty() {
		t.Fatalf("none: %+v %v", none, err)
	}
	for _, opts := range []Options{{}, {LatencyProfile: none}} {
		te := newEnv(t, opts)
		var sb vercel.SandboxResponse
		te.immediate("create", "POST", "/v3/sandboxes", map[string]any{"projectId": "prj_emulator"}).json(t, &sb)
		sess := "/v2/sandboxes/sessions/" + sb.Session.ID
		if r := te.immediate("first command", "POST", sess+"/cmd", map[string]any{"command": "true"}); r.status != 200 {
			t.Fatalf("first command: %d %s", r.status, r.body)
		}
		if r := te.immediate("stop", "POST", sess+"/stop", nil); r.status != 200 {
			t.Fatalf("stop: %d %s", r.status, r.body)
		}
		if got := te.e.LatencyProfile(); !got.Empty() {
			t.Fatalf("profile in force: %+v", got)
		}
	}
}

// TestLatencyProfileRealClock measures a create and two commands on the
// real clock: the create and the first command take their delay, the second
// command does not.
func TestLatencyProfileRealClock(t *testing.T) {
	const create, first = 300 * time.Millisecond, 200 * time.Millisecond
	p := LatencyProfile{Seed: 1, Ops: map[LatencyOp]LatencyDist{
		LatencyCreate:       {Median: create, P95: create},
		LatencyFirstCommand: {Median: first, P95: first},
	}}
	te := newEnv(t, Options{LatencyProfile: p, Clock: realClock{}})
	timed := func(method, path string, body any) (resp, time.Duration) {
		start := time.Now()
		r := te.req(method, path, body)
		return r, time.Since(start)
	}
	r, took := timed("POST", "/v3/sandboxes", map[string]any{"projectId": "prj_emulator"})
	if r.status != 200 || took < create {
		t.Fatalf("create: %d in %s, want ≥ %s", r.status, took, create)
	}
	var sb vercel.SandboxResponse
	r.json(t, &sb)
	sess := "/v2/sandboxes/sessions/" + sb.Session.ID
	if r, took := timed("POST", sess+"/cmd", map[string]any{"command": "true"}); r.status != 200 || took < first {
		t.Fatalf("first command: %d in %s, want ≥ %s", r.status, took, first)
	}
	if r, took := timed("POST", sess+"/cmd", map[string]any{"command": "true"}); r.status != 200 || took >= first {
		t.Fatalf("second command: %d in %s, want < %s (not delayed)", r.status, took, first)
	}
}

// TestLatencyDistribution: the draws follow the log-normal of each
// operation (median and p95 within 5 % over 4,000 draws), are capped, and
// are the same for the same seed whatever other operations draw meanwhile.
func TestLatencyDistribution(t *testing.T) {
	p := VercelLatencyProfile()
	p.Seed = 7
	s := newLatencySampler(p)
	for _, op := range LatencyOps() {
		d := p.Ops[op]
		draws := make([]time.Duration, 4000)
		for i := range draws {
			draws[i] = s.next(op)
		}
		slices.Sort(draws)
		med, p95 := draws[len(draws)/2], draws[len(draws)*95/100]
		within := func(got, want time.Duration) bool {
			return math.Abs(float64(got-want)) <= 0.05*float64(want)
		}
		if !within(med, d.Median) || !within(p95, d.P95) {
			t.Errorf("%s: median %s p95 %s, want %s and %s", op, med, p95, d.Median, d.P95)
		}
		if draws[0] == draws[len(draws)-1] {
			t.Errorf("%s: every draw is %s: not a distribution", op, draws[0])
		}
		if top := draws[len(draws)-1]; top > maxOverMedian*d.Median {
			t.Errorf("%s: draw %s above the cap", op, top)
		}
	}

	a, b := newLatencySampler(p), newLatencySampler(p)
	for i := 0; i < 100; i++ {
		b.next(LatencyStop) // another operation's draws do not shift this one's
		if x, y := a.next(LatencyCreateFromSnapshot), b.next(LatencyCreateFromSnapshot); x != y {
			t.Fatalf("draw %d: %s and %s with the same seed", i, x, y)
		}
	}
	a = newLatencySampler(p)
	p.Seed = 8
	c := newLatencySampler(p)
	same := 0
	for i := 0; i < 100; i++ {
		if a.next(LatencyCreate) == c.next(LatencyCreate) {
			same++
		}
	}
	if same == 100 {
		t.Fatal("seeds 7 and 8 draw the same delays")
	}
}

func TestLatencyProfileByName(t *testing.T) {
	v, err := LatencyProfileByName("vercel")
	if err != nil || v.Name != "vercel" || len(v.Ops) != len(LatencyOps()) {
		t.Fatalf("vercel: %+v %v", v, err)
	}
	_, err = LatencyProfileByName("fast")
	if err == nil || !strings.Contains(err.Error(), `"fast"`) || !strings.Contains(err.Error(), "vercel") {
		t.Fatalf("unknown name: %v", err)
	}
}
