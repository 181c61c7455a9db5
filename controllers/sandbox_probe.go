package controllers

// The readiness probe: once setup has succeeded in a running session,
// spec.readinessProbe decides Ready. The manager probes at periodSeconds — an
// HTTP GET on a port's public route, or a command run in the session — and
// counts failures in a row; the count lives in memory (a restart only starts
// it again), the result in the Ready condition.
//
// An exec probe runs detached, as setup commands do (sandbox_setup.go): a
// reconcile starts the command and returns, and later reconciles poll it
// until it exits or its timeout passes. No reconcile and no Vercel in-flight
// slot waits for a probe command, so a probe may take longer than a Vercel
// call (up to its timeoutSeconds, 60), and a slow probe delays nobody else.
// The command carries a marker (the probe's hash), so a manager that
// restarts while one runs finds and polls it instead of starting another.
// At most MaxProbesPerNamespace probe commands run at once in one namespace;
// a Sandbox whose probe is due waits for one of them to end.
//
// Vercel requests: an httpGet probe makes none (it goes to the public route);
// an exec probe makes one run-command per period and a few polls while it
// runs (after 250 ms, then twice as long each time up to 2 s), and one logs
// request when it fails, so periodSeconds bounds its traffic.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Probe defaults, as the CRD defaults them (an object written before the
// field existed has none).
const (
	defaultProbePeriod    = 5 * time.Second
	defaultProbeTimeout   = 2 * time.Second
	defaultProbeThreshold = 3
)

// DefaultMaxProbesPerNamespace is the default of --max-probes-per-namespace.
const DefaultMaxProbesPerNamespace = 8

// probeReasons are the Ready reasons of a running session that waits for, or
// failed, its readiness probe: status stands for it between polls, as for a
// Ready one.
var probeReasons = map[string]bool{sandboxv1.ReasonProbeNotReady: true, sandboxv1.ReasonProbeFailed: true}

// probeState is what the manager remembers of one Sandbox's probe.
type probeState struct {
	sessionID string
	// spec is the probe the state is about (JSON): a changed probe must
	// pass again before the session is Ready.
	spec string
	// passed: the probe passed once in this session.
	passed bool
	// failures in a row since the last pass.
	failures int32
	// next is when the next probe is due.
	next time.Time
	// run is the exec probe command running now; nil when none runs.
	run *probeRun
	// searched: the session's commands were searched for a probe command
	// that this manager did not record (started before a restart, or by a
	// run-command whose answer was lost). Until then none is started.
	searched bool
}

// probeRun is an exec probe command that runs in the session.
type probeRun struct {
	cmdID string
	// started is when it started; its timeout counts from then.
	started time.Time
	// poll is how long to wait before the next poll.
	poll time.Duration
}

// Exec probe polling: the first poll after probePollFirst (most probes have
// exited by then), then twice as long each time up to probePollMax. A
// command that has not exited probeGrace after its timeout (Vercel kills it
// at the timeout) counts as timed out, and is killed.
const (
	probePollFirst = 250 * time.Millisecond
	probePollMax   = setupPoll
	probeGrace     = 5 * time.Second
	// probeWaitPoll is how often a Sandbox whose probe waits for its
	// namespace's running probes to end looks again.
	probeWaitPoll = setupPoll
)

// probeReadiness turns the readiness of a running, set-up session (rd,
// Ready=True) into the one the readiness probe allows, probing when a probe
// is due. It returns the readiness and how soon to look again for the next
// probe or poll (0 without a probe). An error is a Vercel failure around an
// exec probe, not a probe result: Ready is left as it was.
func (r *SandboxReconciler) probeReadiness(ctx context.Context, sbx *sandboxv1.Sandbox, l lifecycle, rd readiness) (readiness, time.Duration, error) {
	key := client.ObjectKeyFromObject(sbx)
	p := sbx.Spec.ReadinessProbe
	id := l.obs.sessionID
	v, ok := r.probes.Load(key)
	old, _ := v.(probeState)
	if p == nil {
		// Remembered without a probe, so one added later must pass before
		// the session is Ready again.
		r.endProbeRun(ctx, key, old, id)
		r.probes.Store(key, probeState{sessionID: id})
		return rd, 0, nil
	}
	period, threshold := probePeriod(p), probeThreshold(p)
	spec, _ := json.Marshal(p)
	var ps probeState
	switch {
	case ok && old.sessionID == id && old.spec == string(spec):
		ps = old
	case ok && old.sessionID == id:
		// The probe changed: Ready waits for the new one. Its commands
		// carry a new marker, so none of them can run yet.
		r.endProbeRun(ctx, key, old, id)
		ps = probeState{sessionID: id, spec: string(spec), searched: true}
	default:
		// A new session, or a manager that restarted: a session Ready (or
		// failing its probe) before it still counts as having passed.
		r.endProbeRun(ctx, key, old, id)
		cur := meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionReady)
		ps = probeState{sessionID: id, spec: string(spec), passed: l.obs.sameSession && cur != nil &&
			(cur.Status == metav1.ConditionTrue || cur.Reason == sandboxv1.ReasonProbeFailed)}
	}
	now := r.now()
	if p.Exec != nil {
		return r.execProbeReadiness(ctx, sbx, ps, rd, now)
	}
	if now.Before(ps.next) {
		r.probes.Store(key, ps)
		return probeVerdict(sbx, ps, threshold, rd, ""), ps.next.Sub(now), nil
	}
	msg := httpProbe(ctx, sbx.Status.Routes, r.RouteBase, p.HTTPGet, probeTimeout(p))
	ps.next = r.now().Add(period)
	ps = r.probeResult(sbx, ps, threshold, msg)
	r.probes.Store(key, ps)
	return probeVerdict(sbx, ps, threshold, rd, msg), period, nil
}

// probeResult counts a probe's result (msg: "" when it passed, else why it
// failed) and emits the events of a probe that failed threshold times in a
// row, or passed again after that.
func (r *SandboxReconciler) probeResult(sbx *sandboxv1.Sandbox, ps probeState, threshold int32, msg string) probeState {
	if msg == "" {
		if ps.failures >= threshold && ps.passed {
			r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "ProbePassed", "Probe", "Readiness probe passed again in session %s", ps.sessionID)
		}
		ps.passed, ps.failures = true, 0
		return ps
	}
	ps.failures++
	if ps.passed && ps.failures == threshold {
		r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, sandboxv1.ReasonProbeFailed, "Probe", "%s",
			truncate(fmt.Sprintf("Readiness probe failed %d times in a row: %s", ps.failures, msg), maxEventNote))
	}
	return ps
}

// execProbeReadiness advances an exec probe by one step: it polls the
// running probe command, or starts one when a probe is due (and the
// namespace runs fewer than MaxProbesPerNamespace), and returns the
// readiness the probe allows and when to look again.
func (r *SandboxReconciler) execProbeReadiness(ctx context.Context, sbx *sandboxv1.Sandbox, ps probeState, rd readiness, now time.Time) (readiness, time.Duration, error) {
	key := client.ObjectKeyFromObject(sbx)
	// Whatever the step's outcome, the probe's state is kept for the next.
	defer func() { r.probes.Store(key, ps) }()
	p := sbx.Spec.ReadinessProbe
	if ps.run == nil && !now.Before(ps.next) && !ps.searched {
		if err := r.recoverProbeRun(ctx, key, &ps, probePeriod(p), probeTimeout(p), now); err != nil {
			return rd, 0, err
		}
	}
	switch {
	case ps.run != nil:
		return r.pollProbe(ctx, sbx, &ps, rd, now)
	case now.Before(ps.next):
		return probeVerdict(sbx, ps, probeThreshold(p), rd, ""), ps.next.Sub(now), nil
	}
	return r.startProbe(ctx, sbx, &ps, rd, now)
}

// recoverProbeRun looks, once, for a probe command that a manager before a
// restart started, or whose answer was lost, so that it is polled instead of
// a second one started.
func (r *SandboxReconciler) recoverProbeRun(ctx context.Context, key types.NamespacedName, ps *probeState, period, timeout time.Duration, now time.Time) error {
	run, err := r.findProbeCommand(ctx, ps.sessionID, probeMarker(ps.spec), period, now)
	if err != nil {
		return err
	}
	ps.searched, ps.run = true, run
	if run != nil {
		// It runs whatever the bound says; it counts toward it.
		r.probeSlots.take(key, run.started.Add(timeout+probeGrace))
	}
	return nil
}

// pollProbe polls the running probe command: while it runs within its
// timeout it is polled less and less often; once it exits, or runs past its
// timeout (then it is killed), its result counts.
func (r *SandboxReconciler) pollProbe(ctx context.Context, sbx *sandboxv1.Sandbox, ps *probeState, rd readiness, now time.Time) (readiness, time.Duration, error) {
	key := client.ObjectKeyFromObject(sbx)
	p := sbx.Spec.ReadinessProbe
	period, threshold, timeout := probePeriod(p), probeThreshold(p), probeTimeout(p)
	id, run := ps.sessionID, ps.run
	var msg string
	cmd, err := r.api(ctx).GetCommand(ctx, id, run.cmdID, false)
	switch {
	case vercel.IsNotFound(err) || vercel.IsGone(err):
		// The session went, and its command with it: the next
		// observation sees to the session.
		r.probeSlots.release(key)
		ps.run, ps.searched = nil, false
		return probeVerdict(sbx, *ps, threshold, rd, ""), minRequeue, nil
	case err != nil:
		return rd, 0, fmt.Errorf("poll readiness probe %s in session %s: %w", run.cmdID, id, err)
	case cmd.ExitCode == nil && now.Before(run.started.Add(timeout+probeGrace)):
		wait := min(run.poll, max(run.started.Add(timeout+probeGrace).Sub(now), minRequeue))
		run.poll = min(2*run.poll, probePollMax)
		return probeVerdict(sbx, *ps, threshold, rd, ""), wait, nil
	case cmd.ExitCode == nil:
		// Vercel should have killed it at its timeout; make sure.
		if _, err := r.api(ctx).KillCommand(ctx, id, run.cmdID, 9); err != nil && !vercel.IsNotFound(err) && !vercel.IsGone(err) {
			logf.FromContext(ctx).Info("Could not kill a readiness probe past its timeout", "session", id, "command", run.cmdID, "error", err.Error())
		}
		msg = fmt.Sprintf("command %s timed out after %s", p.Exec.Command, timeout)
	default:
		msg = r.execProbeMessage(ctx, sbx, id, p.Exec, cmd, timeout)
	}
	r.probeSlots.release(key)
	ps.run = nil
	ps.next = run.started.Add(period)
	*ps = r.probeResult(sbx, *ps, threshold, msg)
	return probeVerdict(sbx, *ps, threshold, rd, msg), max(ps.next.Sub(now), minRequeue), nil
}

// startProbe starts a probe command, unless the namespace already runs
// MaxProbesPerNamespace of them: then the probe waits, and says so while it
// has not failed yet.
func (r *SandboxReconciler) startProbe(ctx context.Context, sbx *sandboxv1.Sandbox, ps *probeState, rd readiness, now time.Time) (readiness, time.Duration, error) {
	key := client.ObjectKeyFromObject(sbx)
	p := sbx.Spec.ReadinessProbe
	threshold, timeout := probeThreshold(p), probeTimeout(p)
	limit := r.MaxProbesPerNamespace
	if limit <= 0 {
		limit = DefaultMaxProbesPerNamespace
	}
	if !r.probeSlots.acquire(key, now.Add(timeout+probeGrace), now, limit) {
		v := probeVerdict(sbx, *ps, threshold, rd, "")
		if v.reason == sandboxv1.ReasonProbeNotReady && ps.failures == 0 {
			v.message = fmt.Sprintf("Waiting for the readiness probe: %d probe commands run in namespace %s now, the most the manager runs at once in one namespace", limit, sbx.Namespace)
		}
		return v, probeWaitPoll, nil
	}
	cmd, err := r.api(ctx).RunCommand(ctx, ps.sessionID, probeRequest(p.Exec, timeout, probeMarker(ps.spec)))
	if err != nil {
		r.probeSlots.release(key)
		// The command may have started with its answer lost: look for
		// it before starting another.
		ps.searched = false
		return rd, 0, fmt.Errorf("run readiness probe in session %s: %w", ps.sessionID, err)
	}
	ps.run = &probeRun{cmdID: cmd.ID, started: now, poll: min(probePollFirst, timeout)}
	again := ps.run.poll
	ps.run.poll *= 2
	return probeVerdict(sbx, *ps, threshold, rd, ""), again, nil
}

// endProbeRun lets go of the probe command st records: it is killed when it
// still runs in session id (a changed or removed probe), and no longer
// counts toward its namespace's running probes.
func (r *SandboxReconciler) endProbeRun(ctx context.Context, key types.NamespacedName, st probeState, id string) {
	if st.run == nil {
		return
	}
	r.probeSlots.release(key)
	if st.sessionID != id {
		return // it ended with its session
	}
	if _, err := r.api(ctx).KillCommand(ctx, id, st.run.cmdID, 9); err != nil && !vercel.IsNotFound(err) && !vercel.IsGone(err) {
		logf.FromContext(ctx).Info("Could not kill a readiness probe that is no longer wanted", "session", id, "command", st.run.cmdID, "error", err.Error())
	}
}

// forgetProbe forgets the probe of an object that is gone.
func (r *SandboxReconciler) forgetProbe(key types.NamespacedName) {
	r.probes.Delete(key)
	r.probeSlots.release(key)
}

// findProbeCommand finds the newest command of the session that runs the
// probe marker names, when it still runs or started less than a period ago:
// a manager that restarted, or lost the answer to a run-command, polls it
// instead of starting a second probe within the period.
func (r *SandboxReconciler) findProbeCommand(ctx context.Context, id, marker string, period time.Duration, now time.Time) (*probeRun, error) {
	cmds, err := r.api(ctx).ListCommands(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("list commands of session %s: %w", id, err)
	}
	for _, c := range cmds { // newest first
		if !isSetupCommand(c, marker) {
			continue
		}
		started := time.UnixMilli(c.StartedAt)
		if c.StartedAt == 0 || started.After(now) {
			started = now
		}
		if c.ExitCode == nil || now.Sub(started) < period {
			return &probeRun{cmdID: c.ID, started: started, poll: probePollFirst}, nil
		}
		return nil, nil
	}
	return nil, nil
}

// probeMarker names the probe commands of one readiness probe (spec: its
// JSON) in the session's command list.
func probeMarker(spec string) string {
	return "sandbox-probe:" + shortHash(spec, 16)
}

// probeRequest is the run-command request of an exec probe: started as a
// setup command is (setupRequest), with the marker as $0, and killed by
// Vercel at the probe's timeout.
func probeRequest(e *sandboxv1.ExecProbe, timeout time.Duration, marker string) vercel.RunCommandRequest {
	secs := int32(max(timeout/time.Second, 1))
	return setupRequest(sandboxv1.SetupCommand{Command: e.Command, Args: e.Args, TimeoutSeconds: &secs}, marker)
}

// probeVerdict is the readiness a probe state allows. msg is the last
// probe's failure ("" when it passed or no probe ran now): without one, a
// Ready=False verdict keeps the message status has.
func probeVerdict(sbx *sandboxv1.Sandbox, ps probeState, threshold int32, rd readiness, msg string) readiness {
	reason := ""
	switch {
	case !ps.passed:
		reason = sandboxv1.ReasonProbeNotReady
	case ps.failures >= threshold:
		reason = sandboxv1.ReasonProbeFailed
	default:
		return rd
	}
	if msg == "" {
		cur := meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionReady)
		if cur != nil && cur.Reason == reason {
			msg = cur.Message
		} else {
			msg = "Waiting for the readiness probe"
		}
	} else if reason == sandboxv1.ReasonProbeFailed {
		msg = fmt.Sprintf("Readiness probe failed %d times in a row: %s", ps.failures, msg)
	} else {
		msg = "Readiness probe has not passed yet: " + msg
	}
	return readiness{sandboxv1.SandboxRunning, metav1.ConditionFalse, reason, msg}
}

// probeHTTPClient sends httpGet probes. Redirects are not followed: a 3xx
// passes, as in Kubernetes, and the manager never requests a URL the route
// did not name.
var probeHTTPClient = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Transport: &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     time.Minute,
	},
}

// httpProbe sends GET path to the route of the probe's port.
func httpProbe(ctx context.Context, routes []sandboxv1.SandboxRoute, routeBase string, g *sandboxv1.HTTPGetProbe, timeout time.Duration) string {
	base := ""
	for _, rt := range routes {
		if rt.Port == g.Port {
			base = rt.URL
		}
	}
	if base == "" {
		return fmt.Sprintf("port %d has no route in status.routes", g.Port)
	}
	if !isRouteURL(base, routeBase) {
		// status can be written by others than the manager: never let it aim
		// the manager's requests at an address of their choosing.
		return fmt.Sprintf("the route of port %d in status.routes is not a Vercel route; it is not requested", g.Port)
	}
	path := g.Path
	if path == "" {
		path = "/"
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+path, nil)
	if err != nil {
		return fmt.Sprintf("HTTP GET %s on port %d: %v", path, g.Port, err)
	}
	req.Header.Set("User-Agent", "sandbox-controller-probe")
	resp, err := probeHTTPClient.Do(req)
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return fmt.Sprintf("HTTP GET %s on port %d timed out after %s", path, g.Port, timeout)
	}
	if err != nil {
		return fmt.Sprintf("HTTP GET %s on port %d: %v", path, g.Port, err)
	}
	// Drained (a little) so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Sprintf("HTTP GET %s on port %d returned %s", path, g.Port, resp.Status)
	}
	return ""
}

// execProbeMessage is the result of an exec probe command that exited: ""
// when it passed, else its exit code and the tail of its output, scrubbed of
// the Secret values the sandbox was given. A command that Vercel killed at
// the probe's timeout timed out.
func (r *SandboxReconciler) execProbeMessage(ctx context.Context, sbx *sandboxv1.Sandbox, id string, e *sandboxv1.ExecProbe, cmd *vercel.Command, timeout time.Duration) string {
	what := e.Command
	switch {
	case *cmd.ExitCode == 0:
		return ""
	case cmd.DurationMs >= timeout.Milliseconds():
		return fmt.Sprintf("command %s timed out after %s", what, timeout)
	}
	values := r.knownSecrets(ctx, sbx)
	msg := fmt.Sprintf("command %s exited with code %d", what, *cmd.ExitCode)
	if tail, err := commandOutputTail(ctx, r.api(ctx), id, cmd.ID, values); err == nil && tail != "" {
		msg += ": " + truncateTail(tail)
	}
	return scrub(msg, values)
}

// probeTailBytes bounds the output a probe failure quotes: status carries it
// in the Ready message, where a short tail says enough.
const probeTailBytes = 512

func truncateTail(s string) string {
	if len(s) > probeTailBytes {
		return "..." + s[len(s)-probeTailBytes:]
	}
	return s
}

// knownSecrets are the Secret values a command in the sandbox may have seen:
// the current ones and those sent to Vercel before a rotation.
func (r *SandboxReconciler) knownSecrets(ctx context.Context, sbx *sandboxv1.Sandbox) []string {
	secrets := &secretReader{reader: r.APIReader, namespace: sbx.Namespace}
	_, _ = buildConfig(ctx, secrets, &sbx.Spec)
	_ = buildSource(ctx, secrets, &sbx.Spec.Source, &vercel.CreateSandboxRequest{})
	return r.sentSecrets.with(sbx.UID, secrets.values)
}

func probePeriod(p *sandboxv1.ReadinessProbe) time.Duration {
	if p.PeriodSeconds != nil && *p.PeriodSeconds > 0 {
		return time.Duration(*p.PeriodSeconds) * time.Second
	}
	return defaultProbePeriod
}

func probeTimeout(p *sandboxv1.ReadinessProbe) time.Duration {
	if p.TimeoutSeconds != nil && *p.TimeoutSeconds > 0 {
		return time.Duration(*p.TimeoutSeconds) * time.Second
	}
	return defaultProbeTimeout
}

func probeThreshold(p *sandboxv1.ReadinessProbe) int32 {
	if p.FailureThreshold != nil && *p.FailureThreshold > 0 {
		return *p.FailureThreshold
	}
	return defaultProbeThreshold
}

// isRouteURL reports whether raw can be a sandbox route: https on a
// subdomain of vercel.run (Vercel's route domain), or under
// routeBase + "/_routes/" (the emulator's), with no user info, query or
// dot segments.
func isRouteURL(raw, routeBase string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.Contains(u.Path, "..") {
		return false
	}
	if u.Scheme == "https" && u.Port() == "" && strings.HasSuffix(u.Hostname(), ".vercel.run") {
		return true
	}
	if routeBase == "" {
		return false
	}
	return strings.HasPrefix(raw, strings.TrimSuffix(routeBase, "/")+"/_routes/")
}

// probeSlots counts the exec probe commands running in each namespace, to
// bound them (MaxProbesPerNamespace). Each entry holds until its command's
// timeout (plus grace) has passed, by when Vercel has killed it: an entry
// that nobody releases (its session stopped meanwhile) expires then.
type probeSlots struct {
	mu   sync.Mutex
	held map[string]map[types.NamespacedName]time.Time // namespace -> object -> until
}

// acquire takes a slot of key's namespace until until, when fewer than limit
// are held at now (or key holds one already); it reports whether it did.
func (s *probeSlots) acquire(key types.NamespacedName, until, now time.Time, limit int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.held[key.Namespace]
	for k, u := range ns {
		if !now.Before(u) {
			delete(ns, k)
		}
	}
	if _, ok := ns[key]; !ok && len(ns) >= limit {
		return false
	}
	s.takeLocked(key, until)
	return true
}

// take takes a slot whatever the bound: for a probe command that runs
// already.
func (s *probeSlots) take(key types.NamespacedName, until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.takeLocked(key, until)
}

func (s *probeSlots) takeLocked(key types.NamespacedName, until time.Time) {
	if s.held == nil {
		s.held = map[string]map[types.NamespacedName]time.Time{}
	}
	if s.held[key.Namespace] == nil {
		s.held[key.Namespace] = map[types.NamespacedName]time.Time{}
	}
	s.held[key.Namespace][key] = until
}

func (s *probeSlots) release(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ns := s.held[key.Namespace]; ns != nil {
		delete(ns, key)
		if len(ns) == 0 {
			delete(s.held, key.Namespace)
		}
	}
}
