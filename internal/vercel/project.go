package vercel

import (
	"context"
	"errors"
	"fmt"
)

// ProjectNotFoundError says that Vercel does not know the client's project
// in its team: a list of the project answered 404. Vercel answers 404
// not_found both for an unknown project and for an unknown sandbox in a known
// one (docs/dev/vercel-sandbox-api.md §7.2), so only a read that names
// nothing but the project tells the two apart. It is deliberately not
// IsNotFound: with a wrong project id every delete answers 404, and taking
// that for "already deleted" would leak the real sandboxes.
type ProjectNotFoundError struct {
	TeamID, ProjectID string
	// Message is Vercel's answer to the list (the token scrubbed).
	Message string
}

func (e *ProjectNotFoundError) Error() string {
	return fmt.Sprintf("vercel: project %q not found in team %q (%s): check the project and team ids", e.ProjectID, e.TeamID, e.Message)
}

// IsProjectNotFound reports a *ProjectNotFoundError.
func IsProjectNotFound(err error) bool {
	var pe *ProjectNotFoundError
	return errors.As(err, &pe)
}

// VerifyProject makes the cheapest authenticated read of the project (a list
// of one sandbox). It returns nil when the credentials, team and project are
// good, a *ProjectNotFoundError when Vercel does not know the project, and
// the call's error otherwise (IsUnauthorized for a rejected token or team).
// Once it succeeded, a 404 on a delete is taken as "already gone".
func (c *Client) VerifyProject(ctx context.Context) error {
	_, err := c.ListSandboxes(ctx, ListSandboxesOptions{Limit: 1})
	if IsNotFound(err) {
		e, _ := asAPIError(err)
		return &ProjectNotFoundError{TeamID: c.teamID, ProjectID: c.projectID, Message: e.Message}
	}
	if err != nil {
		return err
	}
	c.projectOK.Store(true)
	return nil
}

// ProjectVerified reports whether VerifyProject (or a delete's check) has
// seen the project answer.
func (c *Client) ProjectVerified() bool { return c.projectOK.Load() }

// confirmNotFound decides what a 404 on a project-scoped delete means: the
// sandbox is gone (the 404 is returned as is) when the project is known to
// exist, else the project is verified first. A delete whose 404 cannot be
// confirmed fails with the verification's error, which is not IsNotFound.
func (c *Client) confirmNotFound(ctx context.Context, notFound error) error {
	if c.projectOK.Load() {
		return notFound
	}
	if err := c.VerifyProject(ctx); err != nil {
		return fmt.Errorf("%s answered 404, which cannot be taken as deleted before the project is verified: %w", EPDeleteSandbox, err)
	}
	return notFound
}
