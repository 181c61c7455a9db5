package controllers

// Whether Vercel accepts the manager's credentials and knows its team and
// project: checked at start and whenever Vercel rejects a request, reported
// on /readyz (check "vercel-credentials"), in two gauges and in the log. The
// objects themselves say so in Ready and Synced (errors.go).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

var (
	credentialsRejectedGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "sandbox_controller",
		Name:      "vercel_credentials_rejected",
		Help:      "1 while Vercel's last answer to the manager rejected its credentials (401 or 403), else 0.",
	})
	projectVerifiedGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "sandbox_controller",
		Name:      "vercel_project_verified",
		Help:      "1 once a read of the manager's Vercel team and project succeeded, 0 while they are unverified (wrong ids, rejected credentials, Vercel unreachable).",
	})
	registerCredentialGauges sync.Once
)

// errProjectUnverified is the readiness failure before the first check ended.
var errProjectUnverified = errors.New("the Vercel team and project are not verified yet")

func newVercelHealth() *VercelHealth {
	registerCredentialGauges.Do(func() {
		ctrlmetrics.Registry.MustRegister(credentialsRejectedGauge, projectVerifiedGauge)
	})
	projectVerifiedGauge.Set(0)
	return &VercelHealth{project: errProjectUnverified, gauges: true}
}

// rejectedNow reports whether Vercel's last answer rejected the credentials.
func (h *VercelHealth) rejectedNow() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rejected != 0
}

// observeCredentialsLocked records whether an answer rejected the
// credentials. Any other answer means they were accepted.
func (h *VercelHealth) observeCredentialsLocked(status int) {
	was := h.rejected != 0
	defer func() {
		if h.onCredentials != nil && was != (h.rejected != 0) {
			h.onCredentials()
		}
	}()
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		h.rejected = status
		if h.gauges {
			credentialsRejectedGauge.Set(1)
		}
	case status != 0:
		h.rejected = 0
		if h.gauges {
			credentialsRejectedGauge.Set(0)
		}
	}
}

// CheckCredentials is the "vercel-credentials" readiness check: it fails
// while Vercel rejects the credentials or the team and project are not
// verified. Its message never contains the token.
func (h *VercelHealth) CheckCredentials(*http.Request) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rejected != 0 {
		//lint:ignore ST1005 a sentence for /readyz, like the objects' conditions
		return fmt.Errorf("Vercel rejected the credentials (%d %s)", h.rejected, http.StatusText(h.rejected))
	}
	return h.project
}

func (h *VercelHealth) setProject(err error) {
	h.mu.Lock()
	h.project = err
	h.mu.Unlock()
	if !h.gauges {
		return
	}
	if err == nil {
		projectVerifiedGauge.Set(1)
	} else {
		projectVerifiedGauge.Set(0)
	}
}

func (h *VercelHealth) needsCheck() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.project != nil || h.rejected != 0
}

// projectVerifier checks the team and project at start, until a check
// succeeds, and again while Vercel rejects the credentials, so that readiness
// recovers once a rotated token works. It runs on every replica: a standby
// that would fail its first reconciles should not look ready either.
type projectVerifier struct {
	api    *vercel.Client
	health *VercelHealth
	// first and cap bound the delay between failed checks; idle is the
	// delay between looks at whether a check is needed.
	first, cap, idle time.Duration
}

func (v *projectVerifier) NeedLeaderElection() bool { return false }

func (v *projectVerifier) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("vercel-credentials")
	team, project := v.api.TeamID(), v.api.ProjectID()
	delay := v.first
	for {
		wait := v.idle
		if v.health.needsCheck() {
			err := v.api.VerifyProject(ctx)
			if ctx.Err() != nil {
				return nil
			}
			v.health.setProject(err)
			switch {
			case err == nil:
				log.Info("Verified the Vercel team and project", "team", team, "project", project)
				delay = v.first
			case vercel.IsProjectNotFound(err):
				log.Error(err, "Vercel does not know the project: deletes are not taken as done until it does; fix --vercel-project-id", "team", team, "project", project)
			case vercel.IsUnauthorized(err):
				log.Error(err, "Vercel rejected the credentials: fix the token (--vercel-token-file) or the team id (--vercel-team-id)", "team", team, "project", project)
			default:
				log.Error(err, "Could not verify the Vercel team and project; retrying", "team", team, "project", project)
			}
			if err != nil {
				wait, delay = delay, min(2*delay, v.cap)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}
