package perf

import (
	"bytes"
	"net/http"
	"strings"
	"sync"
	"time"
)

// requestRecorder sits in front of the emulator's handler and, while on,
// keeps the arrival times of the requests that address a sandbox by name,
// so that the steady-state rate can be computed per object.
type requestRecorder struct {
	mu     sync.Mutex
	on     bool
	byName map[string][]time.Time
}

func newRequestRecorder() *requestRecorder { return &requestRecorder{byName: map[string][]time.Time{}} }

// start begins recording, forgetting anything recorded before.
func (r *requestRecorder) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = true
	r.byName = map[string][]time.Time{}
}

func (r *requestRecorder) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		if r.on {
			// /v2/sandboxes/<name>: the name-addressed read, update and delete.
			if p := strings.Split(strings.Trim(req.URL.Path, "/"), "/"); len(p) == 3 && p[1] == "sandboxes" {
				r.byName[p[2]] = append(r.byName[p[2]], time.Now())
			}
		}
		r.mu.Unlock()
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
