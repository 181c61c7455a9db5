package controllers

// The readiness probe: once setup has succeeded in a running session,
// spec.readinessProbe decides Ready. The manager probes at periodSeconds — an
// HTTP GET on a port's public route, or a command run in the session — and
// counts failures in a row; the count lives in memory (a restart only starts
// it again), the result in the Ready condition.
//
// Vercel requests: an httpGet probe makes none (it goes to the public route);
// an exec probe makes one run-command and one wait per period, and one logs
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
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
}

// probeReadiness turns the readiness of a running, set-up session (rd,
// Ready=True) into the one the readiness probe allows, probing when a probe
// is due. It returns the readiness and how soon to look again for the next
// probe (0 without a probe). An error is a Vercel failure around an exec
// probe, not a probe result: Ready is left as it was.
func (r *SandboxReconciler) probeReadiness(ctx context.Context, sbx *sandboxv1.Sandbox, l lifecycle, rd readiness) (readiness, time.Duration, error) {
	key := client.ObjectKeyFromObject(sbx)
	p := sbx.Spec.ReadinessProbe
	id := l.obs.sessionID
	if p == nil {
		// Remembered without a probe, so one added later must pass before
		// the session is Ready again.
		r.probes.Store(key, probeState{sessionID: id})
		return rd, 0, nil
	}
	period, threshold := probePeriod(p), probeThreshold(p)
	spec, _ := json.Marshal(p)
	var ps probeState
	v, ok := r.probes.Load(key)
	switch {
	case ok && v.(probeState).sessionID == id && v.(probeState).spec == string(spec):
		ps = v.(probeState)
	case ok && v.(probeState).sessionID == id:
		// The probe changed: Ready waits for the new one.
		ps = probeState{sessionID: id, spec: string(spec)}
	default:
		// A new session, or a manager that restarted: a session Ready (or
		// failing its probe) before it still counts as having passed.
		cur := meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionReady)
		ps = probeState{sessionID: id, spec: string(spec), passed: l.obs.sameSession && cur != nil &&
			(cur.Status == metav1.ConditionTrue || cur.Reason == sandboxv1.ReasonProbeFailed)}
	}
	now := r.now()
	if now.Before(ps.next) {
		r.probes.Store(key, ps)
		return probeVerdict(sbx, ps, threshold, rd, ""), ps.next.Sub(now), nil
	}
	msg, err := r.probe(ctx, sbx, id, p)
	if err != nil {
		return rd, 0, err
	}
	ps.next = r.now().Add(period)
	if msg == "" {
		if ps.failures >= threshold && ps.passed {
			r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "ProbePassed", "Probe", "Readiness probe passed again in session %s", id)
		}
		ps.passed, ps.failures = true, 0
	} else {
		ps.failures++
		if ps.passed && ps.failures == threshold {
			r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, sandboxv1.ReasonProbeFailed, "Probe", "%s",
				truncate(fmt.Sprintf("Readiness probe failed %d times in a row: %s", ps.failures, msg), maxEventNote))
		}
	}
	r.probes.Store(key, ps)
	return probeVerdict(sbx, ps, threshold, rd, msg), period, nil
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

// probe runs the readiness probe once in session id; it returns "" when it
// passed, else why it failed, in words fit for status.
func (r *SandboxReconciler) probe(ctx context.Context, sbx *sandboxv1.Sandbox, id string, p *sandboxv1.ReadinessProbe) (string, error) {
	timeout := probeTimeout(p)
	if p.HTTPGet != nil {
		return httpProbe(ctx, sbx.Status.Routes, r.RouteBase, p.HTTPGet, timeout), nil
	}
	return r.execProbe(ctx, sbx, id, p.Exec, timeout)
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

// execProbe runs the probe's command in the session and waits for it, at most
// the probe's timeout (Vercel kills it then). A failure reports the exit
// code and the tail of the output, scrubbed of the Secret values the sandbox
// was given.
func (r *SandboxReconciler) execProbe(ctx context.Context, sbx *sandboxv1.Sandbox, id string, e *sandboxv1.ExecProbe, timeout time.Duration) (string, error) {
	what := e.Command
	req := vercel.RunCommandRequest{Command: e.Command, Args: e.Args, Env: map[string]string{}, Timeout: timeout.Milliseconds()}
	cmd, err := r.api(ctx).RunCommand(ctx, id, req)
	if err != nil {
		return "", fmt.Errorf("run readiness probe in session %s: %w", id, err)
	}
	// Vercel kills the command at the timeout; the wait allows a little
	// more for the answer to arrive.
	wctx, cancel := context.WithTimeout(ctx, timeout+5*time.Second)
	defer cancel()
	done, err := r.api(ctx).GetCommand(wctx, id, cmd.ID, true)
	switch {
	case wctx.Err() != nil && ctx.Err() == nil:
		return fmt.Sprintf("command %s timed out after %s", what, timeout), nil
	case err != nil:
		return "", fmt.Errorf("wait for readiness probe %s in session %s: %w", cmd.ID, id, err)
	case done.ExitCode == nil:
		return fmt.Sprintf("command %s timed out after %s", what, timeout), nil
	case *done.ExitCode == 0:
		return "", nil
	}
	values := r.knownSecrets(ctx, sbx)
	msg := fmt.Sprintf("command %s exited with code %d", what, *done.ExitCode)
	if tail, err := commandOutputTail(ctx, r.api(ctx), id, cmd.ID, values); err == nil && tail != "" {
		msg += ": " + truncateTail(tail)
	}
	return scrub(msg, values), nil
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
