package emulator

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Token rotation, the teams and projects that exist, and further credentials
// (Options.Credentials): what a client needs to be tested against when its
// credentials or ids are wrong, and what tenants of one manager need to be
// shown apart.

// Credential is a token the emulator accepts besides Options.Token, for its
// own teams and projects only: a request with it for another team answers
// 403, for another project 404, as Vercel answers a token of another team.
type Credential struct {
	// Token is the bearer token; required, and distinct from every other.
	Token string `json:"token"`
	// Teams the token may act on; required. The first is the team of
	// requests that name none.
	Teams []string `json:"teams"`
	// Projects that exist for the token; empty: any project.
	Projects []string `json:"projects,omitempty"`
}

// credential is a Credential whose token SetTeamToken may replace.
type credential struct {
	token    atomic.Pointer[string]
	teams    []string
	projects []string
}

func newCredentials(cs []Credential, mainToken string) ([]*credential, error) {
	out := make([]*credential, 0, len(cs))
	seen := map[string]bool{mainToken: mainToken != ""}
	for i, c := range cs {
		if c.Token == "" || len(c.Teams) == 0 {
			return nil, fmt.Errorf("emulator: Credentials[%d] needs a token and at least one team", i)
		}
		if seen[c.Token] {
			return nil, fmt.Errorf("emulator: Credentials[%d] reuses another credential's token", i)
		}
		seen[c.Token] = true
		cr := &credential{teams: slices.Clone(c.Teams), projects: slices.Clone(c.Projects)}
		tok := c.Token
		cr.token.Store(&tok)
		out = append(out, cr)
	}
	return out, nil
}

// SetToken replaces the bearer token clients must send, as revoking a Vercel
// token and issuing a new one does: from now on the old one answers 403.
func (e *Emulator) SetToken(token string) {
	e.rotated.Store(&token)
}

// SetTeamToken replaces the token of the credential (Options.Credentials)
// whose teams include team, as SetToken does for Options.Token.
func (e *Emulator) SetTeamToken(team, token string) error {
	for _, c := range e.creds {
		if slices.Contains(c.teams, team) {
			c.token.Store(&token)
			return nil
		}
	}
	return errors.New("emulator: no credential for team " + strconv.Quote(team))
}

// TeamToken is the current token of the credential whose teams include team.
func (e *Emulator) TeamToken(team string) string {
	for _, c := range e.creds {
		if slices.Contains(c.teams, team) {
			return *c.token.Load()
		}
	}
	return ""
}

// currentToken is the token clients must send: Options.Token (or the random
// one), until SetToken replaced it.
func (e *Emulator) currentToken() string {
	if t := e.rotated.Load(); t != nil {
		return *t
	}
	return e.token
}

// credentialFor is the credential whose token tok is, or nil. Every token is
// compared in constant time.
func (e *Emulator) credentialFor(tok string) *credential {
	var found *credential
	for _, c := range e.creds {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(*c.token.Load())) == 1 {
			found = c
		}
	}
	return found
}

// checkTeam refuses a token request for a team outside Options.Teams (or the
// credential's teams), as Vercel refuses a token that is not a member of the
// team.
func (e *Emulator) checkTeam(rc *reqCtx) *apiError {
	teams := e.opts.Teams
	if rc.cred != nil {
		teams = rc.cred.teams
	}
	if len(teams) == 0 || rc.oidc || slices.Contains(teams, rc.team) {
		return nil
	}
	return &apiError{status: 403, code: "forbidden", message: "Not authorized: you do not have access to the team " + strconv.Quote(rc.team) + "."}
}

// checkProject answers 404 not_found for a project outside
// Options.Projects (or the credential's projects). Vercel's answer to an
// unknown project has the same status and code as an unknown sandbox's
// (docs/dev/vercel-sandbox-api.md §7.2: "list with unknown project"); only
// the message differs, and the API does not document it, so clients must not
// rely on it.
func (e *Emulator) checkProject(rc *reqCtx, project string) *apiError {
	projects := e.opts.Projects
	if rc.cred != nil {
		projects = rc.cred.projects
	}
	if len(projects) == 0 || slices.Contains(projects, project) {
		return nil
	}
	return notFound("Project not found.")
}

// LiveSandboxesIn returns the named sandboxes not deleted of one team and
// project, oldest first: what tests of tenant isolation look at.
func (e *Emulator) LiveSandboxesIn(team, project string) []vercel.Sandbox {
	e.sweep()
	e.mu.Lock()
	defer e.unlock()
	var out []vercel.Sandbox
	for _, sb := range e.st.allSandboxes() {
		if sb.scope == (scope{team, project}) {
			out = append(out, e.renderSandbox(sb))
		}
	}
	return out
}
