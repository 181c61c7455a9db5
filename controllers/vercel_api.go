package controllers

import (
	"context"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// SandboxAPI is the part of the Vercel Sandbox API the controllers use.
// internal/vercel.Client implements it over HTTP; tests run that real client
// against the emulator, so this interface exists only to keep the controllers'
// dependency small and explicit.
type SandboxAPI interface {
	CreateSandbox(ctx context.Context, req vercel.CreateSandboxRequest) (*vercel.SandboxResponse, error)
	GetSandbox(ctx context.Context, name string, resume bool) (*vercel.SandboxResponse, error)
	UpdateSandbox(ctx context.Context, name string, req vercel.UpdateSandboxRequest, resume bool) (*vercel.SandboxResponse, error)
	DeleteSandbox(ctx context.Context, name string, deleteOrphanSnapshots bool) (*vercel.Sandbox, error)
	UpdateNetworkPolicy(ctx context.Context, sessionID string, p vercel.NetworkPolicy) (*vercel.Session, error)
	StopSession(ctx context.Context, sessionID string) (*vercel.StopSessionResponse, error)
	ExtendTimeout(ctx context.Context, sessionID string, d time.Duration) (*vercel.Session, error)
	RunCommand(ctx context.Context, sessionID string, req vercel.RunCommandRequest) (*vercel.Command, error)
	GetCommand(ctx context.Context, sessionID, cmdID string, wait bool) (*vercel.Command, error)
	ListCommands(ctx context.Context, sessionID string) ([]vercel.Command, error)
	KillCommand(ctx context.Context, sessionID, cmdID string, signal int) (*vercel.Command, error)
	CommandLogs(ctx context.Context, sessionID, cmdID string) (*vercel.LogStream, error)

	// Snapshots (SandboxSnapshot controller).
	CreateSnapshot(ctx context.Context, sessionID string, expiration *time.Duration) (*vercel.SnapshotResponse, error)
	GetSnapshot(ctx context.Context, id string) (*vercel.Snapshot, error)
	DeleteSnapshot(ctx context.Context, id string) (*vercel.Snapshot, error)
	ListAllSnapshots(ctx context.Context, opts vercel.ListSnapshotsOptions) ([]vercel.Snapshot, error)
	// ListSnapshots reads one page: a Sandbox's status.history.
	ListSnapshots(ctx context.Context, opts vercel.ListSnapshotsOptions) (*vercel.ListSnapshotsResponse, error)

	// GetSession finds the sandbox a snapshot's session belonged to
	// (ownership checks before a snapshot is deleted).
	GetSession(ctx context.Context, id string) (*vercel.SessionResponse, error)
}
