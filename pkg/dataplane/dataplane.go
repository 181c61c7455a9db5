// Package dataplane runs commands and moves files in the running session of
// a Sandbox, so a program goes from a Sandbox object to exec without knowing
// Vercel URLs or session ids. The operator owns the control plane (creating,
// pausing, deleting: pkg/sandboxclient); this package only speaks to the
// session the Sandbox's status names.
//
// Credentials come from the environment as the Vercel tools and `make dev`
// set them (VERCEL_TOKEN, VERCEL_TEAM_ID, VERCEL_PROJECT_ID, and
// VERCEL_API_URL for another endpoint such as the local emulator), or from a
// Config. Underneath is the operator's own Vercel client, with its deadlines,
// rate limiting and redaction of the token from every error.
package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/api/meta"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// The environment variables ConfigFromEnv reads.
const (
	EnvAPIURL    = "VERCEL_API_URL"
	EnvToken     = "VERCEL_TOKEN"
	EnvOIDCToken = "VERCEL_OIDC_TOKEN"
	EnvTeamID    = "VERCEL_TEAM_ID"
	EnvProjectID = "VERCEL_PROJECT_ID"
)

// Config says where the Vercel Sandbox API is and how to authenticate.
// Exactly one of Token and OIDCToken is needed. Printing a Config never
// prints a token.
type Config struct {
	// BaseURL is https://api.vercel.com when empty.
	BaseURL string
	// Token is a Vercel access token; it needs TeamID and ProjectID.
	Token string
	// OIDCToken is a Vercel OIDC token; it carries its team and project.
	OIDCToken string
	TeamID    string
	ProjectID string
}

// String describes the Config without its tokens.
func (c Config) String() string { return c.vercel().String() }

// GoString is String, so %#v does not print the tokens either.
func (c Config) GoString() string { return c.String() }

func (c Config) vercel() vercel.Config {
	return vercel.Config{BaseURL: c.BaseURL, Token: c.Token, OIDCToken: c.OIDCToken, TeamID: c.TeamID, ProjectID: c.ProjectID}
}

// ConfigFromEnv reads a Config from VERCEL_API_URL, VERCEL_TOKEN,
// VERCEL_OIDC_TOKEN, VERCEL_TEAM_ID and VERCEL_PROJECT_ID (the variables
// `make dev` prints for its emulator).
func ConfigFromEnv() Config {
	env := func(k string) string { return strings.TrimSpace(os.Getenv(k)) }
	return Config{
		BaseURL:   env(EnvAPIURL),
		Token:     env(EnvToken),
		OIDCToken: env(EnvOIDCToken),
		TeamID:    env(EnvTeamID),
		ProjectID: env(EnvProjectID),
	}
}

// Client reaches the sessions of one Vercel team and project. It is safe for
// concurrent use.
type Client struct {
	vc *vercel.Client
}

// New returns a Client for cfg.
func New(cfg Config) (*Client, error) {
	vc, err := vercel.New(cfg.vercel())
	if err != nil {
		return nil, fmt.Errorf("dataplane: %w", err)
	}
	return &Client{vc: vc}, nil
}

// NewFromEnv is New(ConfigFromEnv()).
func NewFromEnv() (*Client, error) { return New(ConfigFromEnv()) }

// ErrNotRunning is returned by Session for a Sandbox without a Ready session.
var ErrNotRunning = errors.New("sandbox has no running session")

// Session returns the running session of a Sandbox, read from its status
// (status.sessionID while Ready=True). Get the Sandbox fresh, e.g. from
// sandboxclient's WaitReady: a resumed Sandbox runs in a new session.
func (c *Client) Session(sbx *sandboxv1.Sandbox) (*Session, error) {
	if sbx.Status.SessionID == "" || !meta.IsStatusConditionTrue(sbx.Status.Conditions, sandboxv1.ConditionReady) {
		return nil, fmt.Errorf("sandbox %s/%s (phase %s): %w", sbx.Namespace, sbx.Name, sbx.Status.Phase, ErrNotRunning)
	}
	return c.SessionByID(sbx.Status.SessionID), nil
}

// SessionByID addresses a session by its Vercel id (sbx_…).
func (c *Client) SessionByID(id string) *Session { return &Session{vc: c.vc, id: id} }

// Session is one running Vercel session.
type Session struct {
	vc *vercel.Client
	id string
}

// ID is the Vercel session id.
func (s *Session) ID() string { return s.id }

// Command is a process to run in a session.
type Command struct {
	// Name is the executable, resolved through PATH (e.g. "npm").
	Name string
	// Args are its arguments.
	Args []string
	// Cwd is the working directory; /vercel/sandbox when empty.
	Cwd string
	// Env adds environment variables.
	Env map[string]string
	// Sudo runs it as root.
	Sudo bool
}

func (c Command) request() vercel.RunCommandRequest {
	return vercel.RunCommandRequest{Command: c.Name, Args: c.Args, Cwd: c.Cwd, Env: c.Env, Sudo: c.Sudo}
}

// Run runs cmd, copies its output to stdout and stderr as it arrives (either
// may be nil to discard it), and returns its exit code. err is about
// running it (the session stopped, a network failure), never about the exit
// code.
func (s *Session) Run(ctx context.Context, cmd Command, stdout, stderr io.Writer) (exitCode int, err error) {
	req := cmd.request()
	req.Logs = true
	st, err := s.vc.RunCommandStream(ctx, s.id, req)
	if err != nil {
		return -1, fmt.Errorf("run %s: %w", cmd.Name, err)
	}
	defer st.Close()
	for {
		rec, err := st.Next()
		if err == io.EOF {
			return *st.Command().ExitCode, nil
		}
		if err != nil {
			return -1, fmt.Errorf("run %s: %w", cmd.Name, err)
		}
		if err := copyRecord(rec, stdout, stderr); err != nil {
			return -1, fmt.Errorf("run %s: %w", cmd.Name, err)
		}
	}
}

func copyRecord(rec vercel.Record, stdout, stderr io.Writer) error {
	w := stdout
	switch rec.Stream {
	case vercel.StreamStdout:
	case vercel.StreamStderr:
		w = stderr
	default:
		return nil
	}
	if w == nil || rec.Data == "" {
		return nil
	}
	_, err := io.WriteString(w, rec.Data)
	return err
}

// Start starts cmd without waiting for it and returns its command id, for
// Wait, Logs and Kill.
func (s *Session) Start(ctx context.Context, cmd Command) (string, error) {
	c, err := s.vc.RunCommand(ctx, s.id, cmd.request())
	if err != nil {
		return "", fmt.Errorf("start %s: %w", cmd.Name, err)
	}
	return c.ID, nil
}

// Wait waits for a command to exit and returns its exit code.
func (s *Session) Wait(ctx context.Context, cmdID string) (int, error) {
	for {
		c, err := s.vc.GetCommand(ctx, s.id, cmdID, true)
		switch {
		case err == nil && c.ExitCode != nil:
			return *c.ExitCode, nil
		case err == nil, vercel.IsTimeout(err) && ctx.Err() == nil:
			// One wait is bounded by the client's call timeout; a long
			// command takes several.
			continue
		default:
			return -1, fmt.Errorf("wait for command %s: %w", cmdID, err)
		}
	}
}

// Logs copies a command's output from its start to stdout and stderr (either
// may be nil), following it until the command exits.
func (s *Session) Logs(ctx context.Context, cmdID string, stdout, stderr io.Writer) error {
	ls, err := s.vc.CommandLogs(ctx, s.id, cmdID)
	if err != nil {
		return fmt.Errorf("logs of command %s: %w", cmdID, err)
	}
	defer ls.Close()
	for {
		rec, err := ls.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("logs of command %s: %w", cmdID, err)
		}
		if err := copyRecord(rec, stdout, stderr); err != nil {
			return fmt.Errorf("logs of command %s: %w", cmdID, err)
		}
	}
}

// Kill sends a signal (e.g. syscall.SIGTERM) to a running command.
func (s *Session) Kill(ctx context.Context, cmdID string, sig syscall.Signal) error {
	if _, err := s.vc.KillCommand(ctx, s.id, cmdID, int(sig)); err != nil {
		return fmt.Errorf("kill command %s: %w", cmdID, err)
	}
	return nil
}

// File is one file for WriteFiles. A relative Path is under /vercel/sandbox;
// Mode 0 means 0644.
type File struct {
	Path    string
	Content []byte
	Mode    os.FileMode
}

// WriteFiles writes files into the session in one upload, creating parent
// directories and replacing existing files.
func (s *Session) WriteFiles(ctx context.Context, files ...File) error {
	vf := make([]vercel.File, len(files))
	for i, f := range files {
		vf[i] = vercel.File{Path: f.Path, Content: f.Content, Mode: int64(f.Mode.Perm())}
	}
	if err := s.vc.WriteFiles(ctx, s.id, vf); err != nil {
		return fmt.Errorf("write files: %w", err)
	}
	return nil
}

// ReadFile returns a file's content. A relative path is under
// /vercel/sandbox. A missing file is an error for which IsNotFound is true.
func (s *Session) ReadFile(ctx context.Context, path string) ([]byte, error) {
	b, err := s.vc.ReadFile(ctx, s.id, path, "")
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}

// Mkdir creates a directory and its missing parents.
func (s *Session) Mkdir(ctx context.Context, path string) error {
	if err := s.vc.Mkdir(ctx, s.id, path, "", true); err != nil {
		return fmt.Errorf("mkdir %s: %w", path, err)
	}
	return nil
}

// IsNotFound says whether err means that what was addressed does not exist
// (a file, a command, a session).
func IsNotFound(err error) bool { return vercel.IsNotFound(err) }

// IsSessionStopped says whether err means that the session stopped (paused,
// idle, or snapshotted): get the Sandbox again, resume or heartbeat it, and
// use its new session.
func IsSessionStopped(err error) bool { return vercel.IsGone(err) || vercel.IsSessionStopped(err) }
