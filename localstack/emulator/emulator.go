// Package emulator serves a local, faithful emulation of the Vercel Sandbox
// REST API (v2, and the v3/v4 routes the SDKs use) over HTTP: routing, auth
// and scoping (server.go), the state machine of named sandboxes, sessions,
// commands and snapshots (state*.go, handlers_*.go), validation (validate.go,
// settings.go, policy.go), limits, fault injection (faults.go), counters, the
// clock and the /_emulator admin endpoints. What a session is on disk and how
// its commands run is package sandboxruntime; this package only calls its
// exported names. See docs/dev/emulator-internals.md.
//
// Interactive sessions (interactive.go) follow Vercel's CLI and SDK as
// docs/dev/interactive-sessions.md records them.
//
// The API it emulates is described in docs/dev/vercel-sandbox-api.md; where
// the emulator knowingly differs is docs/dev/emulator-gaps.md. Choices where
// the API document says [unknown] or [inferred]:
//
//   - Create/resume/fork answer the session "running" unless
//     Options.StartPending is set; operations on a pending session wait
//     (PendingOps "queue") or get 422 sandbox_pending ("reject").
//   - Stop answers the final "stopped" session; a snapshot answers 201 with
//     the session already "stopped". The transitional states
//     stopping/snapshotting are visible only while files are copied.
//   - A second stop answers 200 with the unchanged session (or 410,
//     Options.SecondStopStatus). A duplicate name is 400 bad_request (or 409).
//   - Commands killed by a session stop or timeout exit 137; a kill exits
//     128+signal (sandboxruntime). Killing a finished command answers it
//     unchanged. Open log/wait streams end with the final record.
//   - Command, file, snapshot, extend and network-policy calls — reads
//     included — on a dead session answer 410 sandbox_stopped; GET of the
//     session and stop do not.
//   - The concurrency limit answers 429 concurrency_limit_exceeded, without
//     Retry-After. Plan rate limits answer 429 rate_limited with Retry-After,
//     X-RateLimit-* headers and the `limit` object inside `error`.
//   - The emulator's token (compared in constant time) acts on ?teamId (or
//     ?slug, or Options.TeamID). OIDC tokens are accepted only with
//     Options.OIDCJWKS: a JWT whose RS256/ES256 signature verifies, scoped to
//     its owner_id/project_id (`exp` required, checked against wall time).
//     Requests without a project where docs/dev/vercel-sandbox-api.md §2.3
//     needs one answer 400. See docs/dev/emulator-security.md.
//   - Expired snapshots become status "deleted" (GET: 200 or 404,
//     Options.DeletedSnapshotGetStatus) and are not listed; deleted ones
//     neither. keepLastSnapshots counts all created snapshots of the sandbox.
//     Snapshot expiration: request, else keepLastSnapshots.expiration, else
//     snapshotExpiration, else 7 days (v3 route) or 30 days.
//   - A new session's filesystem: the snapshot it boots from; for a fork
//     whose source has no usable snapshot but a running session, a copy of
//     that session's live filesystem; else an empty one. Creating from a
//     snapshot does not make it the new sandbox's currentSnapshotId, but its
//     first snapshot gets it as parentId.
//   - git sources are cloned only for local paths/file:// URLs inside
//     Options.AllowedSourceDir when git exists; tarball sources (http(s) on
//     loopback, or a file:// URL or path inside Options.AllowedSourceDir) are
//     downloaded and extracted into /vercel/sandbox within
//     Options.SourceLimits. Otherwise, or in exec mode "none", the source is
//     only recorded (and a warning logged).
//   - mkdir is recursive unless "recursive": false (current OpenAPI).
//   - Mounts are validated; as the emulator has no drives, any mount answers
//     404 (drive not found). stdin writes answer 501: the runtime gives
//     commands an empty stdin.
//   - Route subdomains are "sb-" + a hash of session id and port. With
//     Options.ServeRoutes the route URLs point at the emulator, which
//     forwards them to the port on loopback (routes.go).
//   - Exec mode "none" never creates a session directory unless a file is
//     written; idle sandboxes cost no goroutine in any mode.
//   - Per-session bounds Vercel does not publish (Options.SessionOutputBytes,
//     MaxLiveCommands, MaxProcessesPerCommand): output beyond the session's
//     budget ends with one stderr notice; one command more than the live cap
//     answers 429 too_many_commands; a fork beyond the process limit fails
//     with EAGAIN inside the command.
package emulator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/emulator/sandboxruntime"
)

// Options configures an Emulator. The zero value is usable.
type Options struct {
	// Token is the bearer token clients must send; "" = random, readable via Token().
	Token string
	// TeamID and ProjectID default to "team_emulator" and "prj_emulator". They
	// are the scope of requests that name no team / of Sandbox(name); requests
	// for other teams or projects see only what was created in that scope.
	TeamID, ProjectID string
	// Teams, when set, are the only teams the token may act on; a request
	// for another answers 403 forbidden. Empty: any team.
	Teams []string
	// Projects, when set, are the only projects that exist; a request that
	// names another answers 404 not_found "Project not found." Empty: any
	// project.
	Projects []string
	// Credentials are further tokens, each for its own teams and projects
	// (tenants of one manager in tests); Token and Teams/Projects apply to
	// Options.Token only.
	Credentials []Credential
	// Plan holds the limits; the zero Plan means PlanPro().
	Plan Plan
	// Clock is nil for the real clock; use NewFakeClock in tests.
	Clock Clock
	// DataDir holds all session and snapshot files; "" = a temporary
	// directory removed on Close.
	DataDir string
	// Exec is "" (auto), "namespace", "host" or "none".
	Exec string
	// StartPending > 0 makes new sessions start "pending"; they turn
	// "running" after this long on the clock.
	StartPending time.Duration
	// DuplicateNameStatus is the status of a create with a taken name: 400 (default) or 409.
	DuplicateNameStatus int
	// SecondStopStatus is the status of stopping a stopped session: 200
	// (default; the unchanged session) or 410 (sandbox_stopped).
	SecondStopStatus int
	// DeletedSnapshotGetStatus is the status of GET on a deleted or expired
	// snapshot: 200 (default; status "deleted") or 404.
	DeletedSnapshotGetStatus int
	// PendingOps says what commands, file operations and snapshots do on a
	// pending session: "queue" (default; wait until it runs) or "reject" (422).
	PendingOps string
	// Logger receives request and lifecycle logs; nil discards them.
	Logger *slog.Logger

	// InteractiveAnySession lets POST …/interactive open a terminal on any
	// running session. Whether Vercel serves a terminal on a sandbox that
	// was not created with `__interactive` is unknown, so by default the
	// emulator refuses it (400 bad_request): a client that works here then
	// also works if Vercel refuses.
	InteractiveAnySession bool

	// OIDCJWKS is a JSON Web Key Set (RS256 and ES256 keys). When set, OIDC
	// tokens (JWTs) whose signature verifies with one of its keys are accepted,
	// scoped to their owner_id/project_id; when nil only Token is accepted.
	OIDCJWKS []byte
	// OIDCIssuer, when set, is the `iss` claim OIDC tokens must carry.
	OIDCIssuer string
	// OIDCAudience is an `aud` OIDC tokens must carry. Unset with OIDCIssuer
	// set, it is Vercel's default audience of the issuer's team
	// (https://vercel.com/<team>, the issuer URL's last path element): a
	// token the team minted for another service (a custom audience) is
	// refused. Unset with no issuer, `aud` is not checked.
	OIDCAudience string
	// AllowedSourceDir is the only host directory whose files a create's
	// tarball source (a path or file:// URL) or git source (a local repository)
	// may name; "" = none. Tarball URLs over http(s) are fetched from loopback
	// addresses only.
	AllowedSourceDir string
	// SourceLimits caps what a tarball source may unpack (zero fields:
	// DefaultSourceLimits).
	SourceLimits sandboxruntime.TarLimits
	// MaxReadBytes caps the size of a file fs/read returns (0 = 256 MiB).
	MaxReadBytes int64
	// ServeRoutes makes the emulator serve the sandboxes' public routes:
	// each route's URL is <emulator URL>/_routes/<subdomain> (once Start has
	// given it a URL), and requests to it reach the port on loopback, where
	// the session's processes listen. Off, route URLs have Vercel's shape
	// (https://sb-….vercel.run) and lead nowhere.
	ServeRoutes bool
	// AllowHostRootSudo lets sudo commands run as the host's root when the
	// emulator runs as root and cannot give them a user namespace (exec mode
	// host, or namespace without user namespaces). Off, such commands are
	// refused with 403: sudo never means host root unless asked for.
	AllowHostRootSudo bool

	// The emulator runs tenants' commands on one shared machine; these bound
	// what one session can take of it (docs/dev/emulator-security.md).
	//
	// SessionOutputBytes is how much output all the commands of one session
	// keep together (0 = 256 MiB, negative = no budget besides the 64 MiB per
	// command). Beyond it a command's output ends with one stderr notice.
	SessionOutputBytes int64
	// MaxLiveCommands is how many commands of one session may run at once,
	// interactive shells included (0 = 32, negative = no cap). One more
	// answers 429 too_many_commands.
	MaxLiveCommands int
	// Egress configures the enforcement of network policies: on by default
	// where exec mode namespace can give each session its own network
	// (egress_session.go).
	Egress EgressOptions

	// MaxProcessesPerCommand bounds the processes and threads of one
	// command and everything it starts, however they detach (0 = 256,
	// negative = no limit): a fork beyond it fails with EAGAIN. With
	// MaxLiveCommands it bounds a session. Enforced where commands get a user
	// namespace (exec mode namespace as root); ExecDescription says when not.
	MaxProcessesPerCommand int

	// LatencyProfile delays the operations Vercel is slow at (latency.go);
	// the zero value (the default) delays nothing, so tests stay fast.
	LatencyProfile LatencyProfile
}

// Defaults of the per-session bounds (Options).
const (
	DefaultSessionOutputBytes     = 256 << 20
	DefaultMaxLiveCommands        = 32
	DefaultMaxProcessesPerCommand = 256
)

// DefaultSourceLimits are the caps of a tarball source: 100,000 entries,
// 1 GiB of content, 256 MiB per file.
func DefaultSourceLimits() sandboxruntime.TarLimits {
	return sandboxruntime.TarLimits{MaxEntries: 100_000, MaxBytes: 1 << 30, MaxFileBytes: 256 << 20}
}

// defaultMaxReadBytes is the default of Options.MaxReadBytes.
const defaultMaxReadBytes = 256 << 20

// Plan holds the limits the emulator enforces. For MaxRunning,
// RequestsPerMinute and DeletesPerSecond 0 means unlimited; the other fields
// fall back to the Pro values when 0.
type Plan struct {
	Name                      string
	MaxVCPUs                  int
	MaxSessionDuration        time.Duration
	MaxRunning                int
	RequestsPerMinute         int
	DeletesPerSecond          int
	MaxPorts                  int
	DefaultTimeout            time.Duration
	DefaultSnapshotExpiration time.Duration
}

// PlanPro returns the Pro plan limits (docs/dev/vercel-sandbox-api.md §8, 2026-08-04).
func PlanPro() Plan {
	return Plan{
		Name:                      "pro",
		MaxVCPUs:                  8,
		MaxSessionDuration:        24 * time.Hour,
		MaxRunning:                10000,
		RequestsPerMinute:         10000,
		DeletesPerSecond:          20,
		MaxPorts:                  15,
		DefaultTimeout:            5 * time.Minute,
		DefaultSnapshotExpiration: 30 * 24 * time.Hour,
	}
}

// PlanHobby returns the Hobby plan limits (docs/dev/vercel-sandbox-api.md §8, 2026-08-04).
func PlanHobby() Plan {
	return Plan{
		Name:                      "hobby",
		MaxVCPUs:                  4,
		MaxSessionDuration:        45 * time.Minute,
		MaxRunning:                10,
		RequestsPerMinute:         1000,
		DeletesPerSecond:          20,
		MaxPorts:                  15,
		DefaultTimeout:            5 * time.Minute,
		DefaultSnapshotExpiration: 30 * 24 * time.Hour,
	}
}

func (p Plan) normalized() Plan {
	if p == (Plan{}) {
		return PlanPro()
	}
	pro := PlanPro()
	if p.Name == "" {
		p.Name = "custom"
	}
	if p.MaxVCPUs <= 0 {
		p.MaxVCPUs = pro.MaxVCPUs
	}
	if p.MaxSessionDuration <= 0 {
		p.MaxSessionDuration = pro.MaxSessionDuration
	}
	if p.MaxPorts <= 0 {
		p.MaxPorts = pro.MaxPorts
	}
	if p.DefaultTimeout <= 0 {
		p.DefaultTimeout = pro.DefaultTimeout
	}
	if p.DefaultSnapshotExpiration <= 0 {
		p.DefaultSnapshotExpiration = pro.DefaultSnapshotExpiration
	}
	return p
}

// Operation names, used by counters, faults and the client.
var opNames = []string{
	"createSandbox", "getSandbox", "listSandboxes", "updateSandbox", "deleteSandbox", "forkSandbox",
	"listSessions", "getSession", "stopSession", "extendTimeout", "updateNetworkPolicy",
	"runCommand", "listCommands", "getCommand", "killCommand", "commandLogs", "commandStdin",
	"writeFiles", "readFile", "mkdir",
	"createSnapshot", "getSnapshot", "listSnapshots", "deleteSnapshot", "snapshotTree",
	"interactive",
}

// Emulator is one emulated Vercel Sandbox API. Create it with New, serve
// Handler() (or call Start), and Close it when done.
type Emulator struct {
	opts    Options
	plan    Plan
	clock   Clock
	fake    *FakeClock
	log     *slog.Logger
	token   string
	rotated atomic.Pointer[string] // SetToken
	creds   []*credential          // Options.Credentials
	dataDir string
	tempDir bool
	runner  *sandboxruntime.Runner
	egress  egressState   // network policy enforcement (egress_session.go)
	oidc    *oidcVerifier // nil: OIDC tokens are refused
	faults  *Faults
	latency atomic.Pointer[latencySampler] // nil: no latency profile
	// latencyWaiting counts requests waiting for their profile delay.
	latencyWaiting atomic.Int64
	handler        http.Handler
	// interactive holds the tokens of interactive sessions (interactive.go).
	interactive interactiveGrants

	counters map[string]*atomic.Int64
	total    atomic.Int64
	lim      limiters

	mu        sync.Mutex
	st        *store
	usage     ledgerBook // usage.go
	trash     []func()
	closed    bool
	closing   chan struct{}
	kick      chan struct{}
	wg        sync.WaitGroup // command waiters and the sweeper
	cancelClk func()
	hookStop  func() // tests: runs at the start of a stop's slow part (set under mu)

	srvMu sync.Mutex
	srv   *http.Server
	url   string
}

// New builds an emulator. It does not listen; use Handler or Start.
func New(opts Options) (*Emulator, error) {
	e := &Emulator{
		opts:    opts,
		plan:    opts.Plan.normalized(),
		clock:   opts.Clock,
		log:     opts.Logger,
		token:   opts.Token,
		faults:  newFaults(),
		closing: make(chan struct{}),
		kick:    make(chan struct{}, 1),
	}
	if e.opts.TeamID == "" {
		e.opts.TeamID = "team_emulator"
	}
	if e.opts.ProjectID == "" {
		e.opts.ProjectID = "prj_emulator"
	}
	for _, err := range []error{
		defaultOneOf("DuplicateNameStatus", &e.opts.DuplicateNameStatus, http.StatusBadRequest, http.StatusConflict),
		defaultOneOf("SecondStopStatus", &e.opts.SecondStopStatus, http.StatusOK, http.StatusGone),
		defaultOneOf("DeletedSnapshotGetStatus", &e.opts.DeletedSnapshotGetStatus, http.StatusOK, http.StatusNotFound),
		defaultOneOf("PendingOps", &e.opts.PendingOps, "queue", "reject"),
	} {
		if err != nil {
			return nil, err
		}
	}
	if opts.StartPending < 0 {
		return nil, errors.New("emulator: StartPending must not be negative")
	}
	if e.log == nil {
		e.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if e.token == "" {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		e.token = "emu_" + hex.EncodeToString(b)
	}
	creds, err := newCredentials(opts.Credentials, e.token)
	if err != nil {
		return nil, err
	}
	e.creds = creds
	switch opts.Exec {
	case "", "namespace", "host", "none":
	default:
		return nil, fmt.Errorf("emulator: Exec must be \"\", \"namespace\", \"host\" or \"none\", not %q", opts.Exec)
	}
	if opts.OIDCJWKS != nil {
		v, err := newOIDCVerifier(opts.OIDCJWKS, opts.OIDCIssuer, opts.OIDCAudience)
		if err != nil {
			return nil, fmt.Errorf("emulator: %w", err)
		}
		e.oidc = v
	}
	if opts.AllowedSourceDir != "" {
		abs, err := filepath.Abs(opts.AllowedSourceDir)
		if err == nil {
			abs, err = filepath.EvalSymlinks(abs)
		}
		if err != nil {
			return nil, fmt.Errorf("emulator: AllowedSourceDir: %w", err)
		}
		e.opts.AllowedSourceDir = abs
	}
	d := DefaultSourceLimits()
	if e.opts.SourceLimits.MaxEntries <= 0 {
		e.opts.SourceLimits.MaxEntries = d.MaxEntries
	}
	if e.opts.SourceLimits.MaxBytes <= 0 {
		e.opts.SourceLimits.MaxBytes = d.MaxBytes
	}
	if e.opts.SourceLimits.MaxFileBytes <= 0 {
		e.opts.SourceLimits.MaxFileBytes = min(d.MaxFileBytes, e.opts.SourceLimits.MaxBytes)
	}
	if e.opts.MaxReadBytes <= 0 {
		e.opts.MaxReadBytes = defaultMaxReadBytes
	}
	e.opts.SessionOutputBytes = orDefault(e.opts.SessionOutputBytes, DefaultSessionOutputBytes)
	e.opts.MaxLiveCommands = orDefault(e.opts.MaxLiveCommands, DefaultMaxLiveCommands)
	e.opts.MaxProcessesPerCommand = orDefault(e.opts.MaxProcessesPerCommand, DefaultMaxProcessesPerCommand)
	if err := e.initRunner(); err != nil {
		return nil, err
	}
	if opts.DataDir == "" {
		d, err := os.MkdirTemp("", "vercel-sandbox-emulator-")
		if err != nil {
			return nil, err
		}
		// Commands may run as an unprivileged user: it must reach its session.
		if err := os.Chmod(d, 0o755); err != nil {
			return nil, err
		}
		e.dataDir, e.tempDir = d, true
	} else {
		abs, err := filepath.Abs(opts.DataDir)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return nil, err
		}
		e.dataDir = abs
	}
	e.counters = make(map[string]*atomic.Int64, len(opNames))
	for _, op := range opNames {
		e.counters[op] = new(atomic.Int64)
	}
	e.st = newStore()
	if err := e.loadLedger(); err != nil {
		return nil, err
	}
	switch c := opts.Clock.(type) {
	case nil:
		e.clock = realClock{}
	case *FakeClock:
		e.fake = c
		e.cancelClk = c.onChange(e.sweep)
	}
	if e.fake == nil {
		// Real time: a background sweeper makes timeouts fire even when no
		// request arrives, so processes really end.
		e.wg.Add(1)
		go e.sweeper()
	}
	e.SetLatencyProfile(opts.LatencyProfile)
	e.handler = e.newRouter()
	return e, nil
}

// initRunner creates the runner of e.opts.Exec and decides whether network
// policies are enforced with it.
func (e *Emulator) initRunner() error {
	r, err := sandboxruntime.NewRunner(sandboxruntime.Mode(e.opts.Exec), sandboxruntime.RunnerOptions{
		AllowHostRootSudo: e.opts.AllowHostRootSudo,
		MaxProcesses:      max(0, e.opts.MaxProcessesPerCommand),
	})
	if err != nil {
		return fmt.Errorf("emulator: exec mode %q: %w", e.opts.Exec, err)
	}
	e.runner = r
	return e.initEgress()
}

// defaultOneOf sets the option *v to def when it is unset and checks that it
// is def or alt.
func defaultOneOf[T comparable](name string, v *T, def, alt T) error {
	var unset T
	if *v == unset {
		*v = def
	}
	if *v != def && *v != alt {
		return fmt.Errorf("emulator: %s must be %#v or %#v, not %#v", name, def, alt, *v)
	}
	return nil
}

// Handler serves the API (and the /_emulator admin endpoints).
func (e *Emulator) Handler() http.Handler { return e.handler }

// Start listens on addr ("" = 127.0.0.1:0) and serves Handler in the
// background. It returns the base URL (e.g. "http://127.0.0.1:41234").
func (e *Emulator) Start(addr string) (string, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	e.srvMu.Lock()
	defer e.srvMu.Unlock()
	if e.srv != nil {
		return "", errors.New("emulator: already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	e.srv = &http.Server{Handler: e.handler, ReadHeaderTimeout: 30 * time.Second}
	e.url = "http://" + ln.Addr().String()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		if err := e.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error("emulator: serve", "err", err)
		}
	}()
	return e.url, nil
}

// URL is the base URL after Start ("" before).
func (e *Emulator) URL() string {
	e.srvMu.Lock()
	defer e.srvMu.Unlock()
	return e.url
}

// Token is the bearer token clients must send.
func (e *Emulator) Token() string { return e.currentToken() }

// Clock is the emulator's clock.
func (e *Emulator) Clock() Clock { return e.clock }

// Faults is the fault-injection table.
func (e *Emulator) Faults() *Faults { return e.faults }

// ExecMode is the effective command execution mode ("namespace", "host" or "none").
func (e *Emulator) ExecMode() string { return string(e.runner.Mode()) }

// ExecDescription is a one-line description of how commands run, their
// network included.
func (e *Emulator) ExecDescription() string {
	return e.runner.Describe() + "; network policies " + e.EgressDescription()
}

// ScriptExit makes command `name` exit with code in exec mode "none"
// (other commands exit 0 there).
func (e *Emulator) ScriptExit(name string, code int) { e.runner.SetScriptedExit(name, code) }

// DataDir is where session and snapshot files live.
func (e *Emulator) DataDir() string { return e.dataDir }

// Close stops the server, ends every process and removes temporary data.
func (e *Emulator) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.closing)
	e.mu.Unlock()
	if e.cancelClk != nil {
		e.cancelClk()
	}
	// Kill every process first, so open log/wait streams end.
	e.mu.Lock()
	var procs []*sandboxruntime.Process
	nets := map[string]*sessionNet{}
	for _, s := range e.st.sessions {
		for _, c := range s.commands {
			if c.proc != nil && !c.exited {
				procs = append(procs, c.proc)
			}
		}
		if s.net != nil {
			nets[s.id], s.net = s.net, nil
		}
	}
	e.mu.Unlock()
	for _, p := range procs {
		p.Terminate()
	}
	for id, n := range nets {
		n.close(e, id)
	}
	var errs []error
	e.srvMu.Lock()
	srv := e.srv
	e.srvMu.Unlock()
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		cancel()
	}
	e.wg.Wait()
	e.emptyTrash()
	if e.tempDir {
		if err := os.RemoveAll(e.dataDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RequestCount is the number of requests of op received ("" = all).
func (e *Emulator) RequestCount(op string) int64 {
	if op == "" {
		return e.total.Load()
	}
	if c, ok := e.counters[op]; ok {
		return c.Load()
	}
	return 0
}

// Counts returns every per-operation counter plus "total".
func (e *Emulator) Counts() map[string]int64 {
	m := make(map[string]int64, len(e.counters)+1)
	for op, c := range e.counters {
		m[op] = c.Load()
	}
	m["total"] = e.total.Load()
	return m
}

// ResetCounts zeroes every counter.
func (e *Emulator) ResetCounts() {
	for _, c := range e.counters {
		c.Store(0)
	}
	e.total.Store(0)
}

// LiveSandboxes returns every named sandbox not deleted (all scopes),
// oldest first.
func (e *Emulator) LiveSandboxes() []vercel.Sandbox {
	e.sweep()
	e.mu.Lock()
	defer e.unlock()
	all := e.st.allSandboxes()
	out := make([]vercel.Sandbox, 0, len(all))
	for _, sb := range all {
		out = append(out, e.renderSandbox(sb))
	}
	return out
}

// Sandbox returns the named sandbox, looked up in the default scope first,
// then in any scope.
func (e *Emulator) Sandbox(name string) (vercel.Sandbox, bool) {
	e.sweep()
	e.mu.Lock()
	defer e.unlock()
	if sb := e.st.sandbox(scope{e.opts.TeamID, e.opts.ProjectID}, name); sb != nil {
		return e.renderSandbox(sb), true
	}
	for _, sb := range e.st.allSandboxes() {
		if sb.name == name {
			return e.renderSandbox(sb), true
		}
	}
	return vercel.Sandbox{}, false
}

// Sessions returns every session of every live sandbox, oldest first.
func (e *Emulator) Sessions() []vercel.Session {
	e.sweep()
	e.mu.Lock()
	defer e.unlock()
	ss := make([]*sessionRec, 0, len(e.st.sessions))
	for _, s := range e.st.sessions {
		ss = append(ss, s)
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].seq < ss[j].seq })
	out := make([]vercel.Session, 0, len(ss))
	for _, s := range ss {
		out = append(out, e.renderSession(s))
	}
	return out
}

// Snapshots returns every snapshot ever taken, including deleted and
// expired ones (status "deleted"), oldest first.
func (e *Emulator) Snapshots() []vercel.Snapshot {
	e.sweep()
	e.mu.Lock()
	defer e.unlock()
	ss := make([]*snapshotRec, 0, len(e.st.snapshots))
	for _, s := range e.st.snapshots {
		ss = append(ss, s)
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].seq < ss[j].seq })
	out := make([]vercel.Snapshot, 0, len(ss))
	for _, s := range ss {
		out = append(out, renderSnapshot(s))
	}
	return out
}

// unlock releases e.mu and then runs the deferred file removals queued
// while it was held.
func (e *Emulator) unlock() {
	t := e.trash
	e.trash = nil
	e.mu.Unlock()
	for _, fn := range t {
		fn()
	}
}

func (e *Emulator) emptyTrash() {
	e.mu.Lock()
	e.unlock()
}

// sweeper runs the lazy sweep periodically under the real clock.
func (e *Emulator) sweeper() {
	defer e.wg.Done()
	t := time.NewTimer(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-e.closing:
			return
		case <-t.C:
		case <-e.kick:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		e.sweep()
		d := 250 * time.Millisecond
		e.mu.Lock()
		if next, ok := e.st.timers.peek(); ok {
			if wait := time.Duration(next-ms(e.clock.Now())) * time.Millisecond; wait < d {
				d = max(wait, time.Millisecond)
			}
		}
		e.mu.Unlock()
		t.Reset(d)
	}
}

func (e *Emulator) kickSweeper() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// orDefault returns def for 0, -1 for a negative v (no bound), else v.
func orDefault[T int | int64](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return -1
	}
	return v
}
