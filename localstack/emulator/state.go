package emulator

import (
	"container/heap"
	"crypto/sha256"
	"encoding/hex"
	"hash/fnv"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/emulator/sandboxruntime"
)

// scope is what named sandboxes are unique in: one project of one team.
type scope struct{ team, project string }

// store is the whole emulated state; every field is guarded by Emulator.mu.
type store struct {
	sandboxes map[scope]map[string]*sandboxRec
	sessions  map[string]*sessionRec
	snapshots map[string]*snapshotRec
	active    map[string]int // team → sessions not yet terminal
	timers    timerHeap
	seq       uint64
}

func newStore() *store {
	return &store{
		sandboxes: map[scope]map[string]*sandboxRec{},
		sessions:  map[string]*sessionRec{},
		snapshots: map[string]*snapshotRec{},
		active:    map[string]int{},
	}
}

func (st *store) nextSeq() uint64 { st.seq++; return st.seq }

func (st *store) sandbox(sc scope, name string) *sandboxRec {
	return st.sandboxes[sc][name]
}

func (st *store) allSandboxes() []*sandboxRec {
	var out []*sandboxRec
	for _, m := range st.sandboxes {
		for _, sb := range m {
			out = append(out, sb)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}

// sandboxRec is one named sandbox: its configuration (the defaults of future
// sessions) and its sessions.
type sandboxRec struct {
	scope        scope
	name         string
	seq          uint64
	persistent   bool
	vcpus        int64
	memory       int64
	timeout      int64
	runtime      string
	image        string
	architecture string
	region       string
	failover     []string
	networkID    string
	policy       *policySpec // nil = allow-all
	env          map[string]string
	ports        []int64
	tags         map[string]string
	snapExp      *int64
	keepLast     *vercel.KeepLastSnapshots // DeleteEvicted always set
	source       *vercel.Source            // recorded as sent (git/tarball)
	cwd          string

	current           *sessionRec
	sessions          []*sessionRec
	interactive       bool           // created or forked with "__interactive": sessions report interactivePort
	snaps             []*snapshotRec // created snapshots of this sandbox, oldest first
	currentSnapshotID string

	createdAt, updatedAt, statusUpdatedAt int64
	totalDuration, totalActiveCPU         int64
	totalEgress, totalIngress             int64
}

// sessionRec is one VM boot.
type sessionRec struct {
	id      string
	seq     uint64
	sb      *sandboxRec
	status  vercel.SessionStatus
	vcpus   int64
	memory  int64
	timeout int64
	region  string
	runtime string
	cwd     string
	policy  *policySpec
	env     map[string]string

	requestedAt, startedAt, requestedStopAt, stoppedAt int64
	abortedAt, duration, snapshottedAt                 int64
	createdAt, updatedAt                               int64
	sourceSnapshotID                                   string
	activeCPU                                          int64
	stoppedInfo                                        bool // activeCpuDurationMs/networkTransfer filled

	readyAt int64 // pending → running not before this (ms)
	booting bool  // filesystem still being prepared (restore, clone, download)
	readyCh chan struct{}
	doneCh  chan struct{} // closed when terminal
	inStop  bool          // a stop/snapshot job owns the session

	fs       *sandboxruntime.FS // nil until needed
	commands []*commandRec
	// output is what the session's commands may still keep of their output
	// together (Options.SessionOutputBytes); nil until the first command.
	output *sandboxruntime.OutputBudget
	// net is the session's network namespace and egress proxy
	// (egress_session.go); nil until the first command, or not enforced.
	net *sessionNet
	// egressBytes and ingressBytes are what its commands moved through the
	// egress proxy (networkTransfer).
	egressBytes, ingressBytes int64
}

func (s *sessionRec) deadline() int64 {
	if s.startedAt == 0 {
		return 0
	}
	return s.startedAt + s.timeout
}

// waitReady returns a channel closed once the session left "pending".
func (s *sessionRec) waitReady() <-chan struct{} {
	if s.readyCh == nil {
		s.readyCh = make(chan struct{})
		if s.status != vercel.SessionPending {
			close(s.readyCh)
		}
	}
	return s.readyCh
}

// waitDone returns a channel closed once the session is terminal.
func (s *sessionRec) waitDone() <-chan struct{} {
	if s.doneCh == nil {
		s.doneCh = make(chan struct{})
		if s.status.Terminal() {
			close(s.doneCh)
		}
	}
	return s.doneCh
}

// commandRec is one process of a session.
type commandRec struct {
	id          string
	name        string
	args        []string
	cwd         string
	sess        *sessionRec
	startedAt   int64
	finishedAt  int64
	exited      bool
	exitCode    int
	attachStdin bool
	proc        *sandboxruntime.Process
	interactive bool // a terminal of an interactive session: not listed
}

// snapshotRec is one snapshot.
type snapshotRec struct {
	id              string
	seq             uint64
	scope           scope
	sandboxName     string
	sourceSessionID string
	region          string
	status          vercel.SnapshotStatus
	sizeBytes       int64
	createdAt       int64
	updatedAt       int64
	lastUsedAt      int64
	expiration      int64 // ms after last use; 0 = never
	expiresAt       int64
	creationMethod  string
	parentID        string
	dir             string // "" when the session had no filesystem yet
	users           int    // restores in progress
	dirGone         bool
}

func (sn *snapshotRec) usable(now int64) bool {
	return sn.status == vercel.SnapshotCreated && (sn.expiresAt == 0 || sn.expiresAt > now)
}

// ---- timers ----

type timerKind uint8

const (
	timerStart timerKind = iota + 1
	timerTimeout
	timerSnapshotExpiry
)

type timerItem struct {
	at   int64
	kind timerKind
	id   string
}

type timerHeap []timerItem

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timerItem)) }
func (h *timerHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}
func (h *timerHeap) add(it timerItem) { heap.Push(h, it) }
func (h timerHeap) peek() (int64, bool) {
	if len(h) == 0 {
		return 0, false
	}
	return h[0].at, true
}

// ---- ids and names ----

const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

func randString(n int, alphabet string) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rand.IntN(len(alphabet))]
	}
	return string(b)
}

func newSessionID() string  { return "sbx_" + randString(28, alnum) }
func newSnapshotID() string { return "snap_" + randString(28, alnum) }
func newCommandID() string  { return "cmd_" + randString(28, alnum) }

var (
	nameAdjectives = []string{"amber", "brave", "calm", "dapper", "eager", "fancy", "gentle", "happy", "icy", "jade", "keen", "lively", "mellow", "nimble", "olive", "proud", "quiet", "rapid", "silent", "tidy", "urban", "vivid", "witty", "young", "zesty"}
	nameAnimals    = []string{"ant", "bear", "cat", "dove", "eel", "fox", "gnu", "hawk", "ibis", "jay", "koala", "lynx", "mole", "newt", "owl", "puma", "quail", "ram", "seal", "toad", "urchin", "vole", "wolf", "yak", "zebra"}
)

// newSandboxName generates a name like "jade-rapid-jay-NgZfbj".
func newSandboxName() string {
	return nameAdjectives[rand.IntN(len(nameAdjectives))] + "-" +
		nameAdjectives[rand.IntN(len(nameAdjectives))] + "-" +
		nameAnimals[rand.IntN(len(nameAnimals))] + "-" + randString(6, alnum)
}

// pinImage returns a digest-pinned "{repository}@{manifestDigest}" form.
func pinImage(ref string) string {
	if ref == "" || strings.Contains(ref, "@sha256:") {
		return ref
	}
	repo := ref
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		repo = ref[:i]
	}
	sum := sha256.Sum256([]byte(ref))
	return repo + "@sha256:" + hex.EncodeToString(sum[:])
}

func routeFor(sessionID string, port int64) vercel.Route {
	h := fnv.New64a()
	h.Write([]byte(sessionID))
	h.Write([]byte{byte(port >> 8), byte(port)})
	sub := "sb-" + strconv.FormatUint(h.Sum64(), 36)
	return vercel.Route{URL: "https://" + sub + ".vercel.run", Subdomain: sub, Port: port}
}

func (e *Emulator) sessionDir(id string) string  { return filepath.Join(e.dataDir, "sessions", id) }
func (e *Emulator) snapshotDir(id string) string { return filepath.Join(e.dataDir, "snapshots", id) }

func (e *Emulator) nowMs() int64 { return ms(e.clock.Now()) }

func durMs(d time.Duration) int64 { return d.Milliseconds() }

// ---- rendering ----

func (e *Emulator) renderSandbox(sb *sandboxRec) vercel.Sandbox {
	out := vercel.Sandbox{
		Name:                     sb.name,
		Persistent:               sb.persistent,
		Status:                   vercel.SessionStopped,
		StatusUpdatedAt:          sb.statusUpdatedAt,
		CreatedAt:                sb.createdAt,
		UpdatedAt:                sb.updatedAt,
		CurrentSnapshotID:        sb.currentSnapshotID,
		Region:                   sb.region,
		FailoverRegions:          sb.failover,
		NetworkID:                sb.networkID,
		VCPUs:                    sb.vcpus,
		Memory:                   sb.memory,
		Timeout:                  sb.timeout,
		Runtime:                  sb.runtime,
		Image:                    sb.image,
		NetworkPolicy:            sb.policy.response(),
		TotalEgressBytes:         sb.totalEgress,
		TotalIngressBytes:        sb.totalIngress,
		TotalActiveCPUDurationMs: sb.totalActiveCPU,
		TotalDurationMs:          sb.totalDuration,
		Cwd:                      sb.cwd,
		Tags:                     sb.tags,
		SnapshotExpiration:       sb.snapExp,
		KeepLastSnapshots:        sb.keepLast,
	}
	if s := sb.current; s != nil {
		out.CurrentSessionID = s.id
		out.Status = s.status
		if s.status == vercel.SessionRunning {
			out.ExpiresAt = s.deadline()
		}
	}
	return out
}

func (e *Emulator) renderSession(s *sessionRec) vercel.Session {
	out := vercel.Session{
		ID:                s.id,
		Memory:            s.memory,
		VCPUs:             s.vcpus,
		Region:            s.region,
		Runtime:           s.runtime,
		Timeout:           s.timeout,
		Status:            s.status,
		RequestedAt:       s.requestedAt,
		StartedAt:         s.startedAt,
		RequestedStopAt:   s.requestedStopAt,
		StoppedAt:         s.stoppedAt,
		AbortedAt:         s.abortedAt,
		Duration:          s.duration,
		SourceSnapshotID:  s.sourceSnapshotID,
		SnapshottedAt:     s.snapshottedAt,
		CreatedAt:         s.createdAt,
		UpdatedAt:         s.updatedAt,
		Cwd:               s.cwd,
		NetworkPolicy:     s.policy.response(),
		ProjectID:         s.sb.scope.project,
		SourceSandboxName: s.sb.name,
	}
	if s.sb.interactive {
		out.InteractivePort = interactivePort
	}
	if s.stoppedInfo {
		out.ActiveCPUDurationMs = s.activeCPU
		out.NetworkTransfer = &vercel.NetworkTransfer{Egress: s.egressBytes, Ingress: s.ingressBytes}
	}
	return out
}

func (e *Emulator) renderRoutes(s *sessionRec) []vercel.Route {
	routes := make([]vercel.Route, 0, len(s.sb.ports))
	for _, p := range s.sb.ports {
		rt := routeFor(s.id, p)
		rt.URL = e.routeURL(rt)
		routes = append(routes, rt)
	}
	return routes
}

func renderSnapshot(sn *snapshotRec) vercel.Snapshot {
	return vercel.Snapshot{
		ID:              sn.id,
		SourceSessionID: sn.sourceSessionID,
		Region:          sn.region,
		Regions:         []string{sn.region},
		Status:          sn.status,
		SizeBytes:       sn.sizeBytes,
		ExpiresAt:       sn.expiresAt,
		CreatedAt:       sn.createdAt,
		UpdatedAt:       sn.updatedAt,
		LastUsedAt:      sn.lastUsedAt,
		CreationMethod:  sn.creationMethod,
		ParentID:        sn.parentID,
	}
}

func (e *Emulator) renderCommand(c *commandRec) vercel.Command {
	e.observeExit(c)
	args := c.args
	if args == nil {
		args = []string{}
	}
	out := vercel.Command{
		ID:        c.id,
		Name:      c.name,
		Args:      args,
		Cwd:       c.cwd,
		SessionID: c.sess.id,
		StartedAt: c.startedAt,
	}
	if c.exited {
		code := c.exitCode
		out.ExitCode = &code
		out.DurationMs = c.finishedAt - c.startedAt
	}
	return out
}

// observeExit records a command's exit if its process has ended but the
// waiter goroutine has not recorded it yet. Called with e.mu held.
func (e *Emulator) observeExit(c *commandRec) {
	if c.exited || c.proc == nil {
		return
	}
	if code, ok := c.proc.ExitCode(); ok {
		c.exited, c.exitCode, c.finishedAt = true, code, e.nowMs()
	}
}
