package perf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/getsentry/sandbox-controller/controllers"
)

// requestRecorder sits in front of the emulator's handler and, while on,
// keeps the arrival times of the requests that address a sandbox by name,
// so that the steady-state rate can be computed per object.
type requestRecorder struct {
	mu     sync.Mutex
	on     bool
	byName map[string][]time.Time
	// shards, while on, maps each Vercel sandbox named by a request from a
	// shard's client (user agent shardUserAgent(i)) to the shards that
	// called for it.
	shardsOn bool
	shards   map[string]map[int]bool
	// inFlight is the number of requests the emulator is serving.
	inFlight atomic.Int64
}

// shardUserAgent tags the requests of the sharded arm's shard i.
func shardUserAgent(i int) string { return fmt.Sprintf("sandbox-controller-bench-shard-%d", i) }

func newRequestRecorder() *requestRecorder { return &requestRecorder{byName: map[string][]time.Time{}} }

// start begins recording, forgetting anything recorded before.
func (r *requestRecorder) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = true
	r.byName = map[string][]time.Time{}
}

// startShards begins recording which shard calls for which sandbox.
func (r *requestRecorder) startShards() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shardsOn = true
	r.shards = map[string]map[int]bool{}
}

// checkShards stops recording shards and returns, per shard, the sandboxes
// it called Vercel for, and the number of sandboxes called for by more than
// one shard or by another shard than that of their namespace.
func (r *requestRecorder) checkShards(count int, namespaces []string) (perShard []int, violations int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shardsOn = false
	perShard = make([]int, count)
	for name, by := range r.shards {
		owner := -1
		for _, ns := range namespaces {
			if strings.HasPrefix(name, ns+"-") {
				owner = controllers.ShardOf(ns, count)
			}
		}
		for s := range by {
			perShard[s]++
		}
		if len(by) != 1 || !by[owner] {
			violations++
		}
	}
	return perShard, violations
}

// recordShard notes the sandbox a sharded-arm request names (path or
// create body).
func (r *requestRecorder) recordShard(req *http.Request) {
	var shard int
	if _, err := fmt.Sscanf(req.UserAgent(), "sandbox-controller-bench-shard-%d", &shard); err != nil {
		return
	}
	var name string
	p := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(p) >= 3 && p[1] == "sandboxes" && p[2] != "sessions" && p[2] != "snapshots":
		name = p[2]
	case len(p) == 2 && p[1] == "sandboxes" && req.Method == http.MethodPost:
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		var create struct{ Name string }
		if json.Unmarshal(body, &create) != nil {
			return
		}
		name = create.Name
	}
	if name == "" {
		return
	}
	if r.shards[name] == nil {
		r.shards[name] = map[int]bool{}
	}
	r.shards[name][shard] = true
}

func (r *requestRecorder) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		if r.shardsOn {
			r.recordShard(req)
		}
		if r.on {
			// /v2/sandboxes/<name>: the name-addressed read, update and delete.
			if p := strings.Split(strings.Trim(req.URL.Path, "/"), "/"); len(p) == 3 && p[1] == "sandboxes" {
				r.byName[p[2]] = append(r.byName[p[2]], time.Now())
			}
		}
		r.mu.Unlock()
		r.inFlight.Add(1)
		defer r.inFlight.Add(-1)
		next.ServeHTTP(w, req)
	})
}

// ratePerObject returns the mean number of name-addressed requests per object
// per poll interval (and per hour), from the spacing of each object's
// requests since the recorder was turned on.
func (r *requestRecorder) ratePerObject(poll time.Duration) (perPoll, perHour float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var sum float64
	var objs int
	for _, ts := range r.byName {
		if len(ts) < 2 {
			continue
		}
		span := ts[len(ts)-1].Sub(ts[0])
		if span <= 0 {
			continue
		}
		sum += float64(len(ts)-1) / span.Seconds()
		objs++
	}
	if objs == 0 {
		return 0, 0
	}
	perSecond := sum / float64(objs)
	return perSecond * poll.Seconds(), perSecond * 3600
}

// syncBuffer is a bytes.Buffer safe for concurrent writers and readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// cpuSnapshot reads the CPU seconds of this process and the control plane.
func (h *harness) cpuSnapshot() map[string]float64 {
	out := map[string]float64{}
	if _, c, err := procUsage("self"); err == nil {
		out["harness"] = c
	}
	for name, pid := range h.cpPIDs {
		if _, c, err := procUsage(pid); err == nil {
			out[name] = c
		}
	}
	return out
}

func cpuDelta(a, b map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range b {
		out[k] = v - a[k]
	}
	return out
}
