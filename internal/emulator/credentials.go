package emulator

import (
	"slices"
	"strconv"
)

// Token rotation and the teams and projects that exist: what a client needs
// to be tested against when its credentials or ids are wrong.

// SetToken replaces the bearer token clients must send, as revoking a Vercel
// token and issuing a new one does: from now on the old one answers 403.
func (e *Emulator) SetToken(token string) {
	e.rotated.Store(&token)
}

// currentToken is the token clients must send: Options.Token (or the random
// one), until SetToken replaced it.
func (e *Emulator) currentToken() string {
	if t := e.rotated.Load(); t != nil {
		return *t
	}
	return e.token
}

// checkTeam refuses a token request for a team outside Options.Teams, as
// Vercel refuses a token that is not a member of the team.
func (e *Emulator) checkTeam(rc *reqCtx) *apiError {
	if len(e.opts.Teams) == 0 || rc.oidc || slices.Contains(e.opts.Teams, rc.team) {
		return nil
	}
	return &apiError{status: 403, code: "forbidden", message: "Not authorized: you do not have access to the team " + strconv.Quote(rc.team) + "."}
}

// checkProject answers 404 not_found for a project outside
// Options.Projects. Vercel's answer to an unknown project has the same status
// and code as an unknown sandbox's (docs/dev/vercel-sandbox-api.md §7.2:
// "list with unknown project"); only the message differs, and the API does
// not document it, so clients must not rely on it.
func (e *Emulator) checkProject(project string) *apiError {
	if len(e.opts.Projects) == 0 || slices.Contains(e.opts.Projects, project) {
		return nil
	}
	return notFound("Project not found.")
}
