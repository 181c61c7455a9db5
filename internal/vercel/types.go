package vercel

import (
	"bytes"
	"encoding/json"
)

// Wire types of the Vercel Sandbox REST API v2
// (docs/dev/vercel-sandbox-api.md §3). Field names and JSON tags are the
// contract: the emulator serves these same structs, and the contract tests
// decode them through the real client. Timestamps are integer milliseconds
// since the Unix epoch; durations are milliseconds; optional fields are omitted
// when unset.

// SessionStatus is the status of one VM boot
// (docs/dev/vercel-sandbox-api.md §4).
type SessionStatus string

const (
	SessionPending      SessionStatus = "pending"
	SessionRunning      SessionStatus = "running"
	SessionStopping     SessionStatus = "stopping"
	SessionStopped      SessionStatus = "stopped"
	SessionFailed       SessionStatus = "failed"
	SessionAborted      SessionStatus = "aborted"
	SessionSnapshotting SessionStatus = "snapshotting"
)

// Terminal reports whether a session in this status will never run again.
func (s SessionStatus) Terminal() bool {
	return s == SessionStopped || s == SessionFailed || s == SessionAborted
}

// Session is one VM boot of a named sandbox
// (docs/dev/vercel-sandbox-api.md §3.1).
type Session struct {
	ID                  string           `json:"id"`
	Memory              int64            `json:"memory"`
	VCPUs               int64            `json:"vcpus"`
	Region              string           `json:"region"`
	Runtime             string           `json:"runtime,omitempty"`
	Timeout             int64            `json:"timeout"`
	Status              SessionStatus    `json:"status"`
	RequestedAt         int64            `json:"requestedAt"`
	StartedAt           int64            `json:"startedAt,omitempty"`
	RequestedStopAt     int64            `json:"requestedStopAt,omitempty"`
	StoppedAt           int64            `json:"stoppedAt,omitempty"`
	AbortedAt           int64            `json:"abortedAt,omitempty"`
	Duration            int64            `json:"duration,omitempty"`
	SourceSnapshotID    string           `json:"sourceSnapshotId,omitempty"`
	SnapshottedAt       int64            `json:"snapshottedAt,omitempty"`
	CreatedAt           int64            `json:"createdAt"`
	UpdatedAt           int64            `json:"updatedAt"`
	Cwd                 string           `json:"cwd"`
	InteractivePort     int64            `json:"interactivePort,omitempty"`
	NetworkPolicy       *NetworkPolicy   `json:"networkPolicy,omitempty"`
	ActiveCPUDurationMs int64            `json:"activeCpuDurationMs,omitempty"`
	NetworkTransfer     *NetworkTransfer `json:"networkTransfer,omitempty"`
	ProjectID           string           `json:"projectId"`
	SourceSandboxName   string           `json:"sourceSandboxName"`
}

// NetworkTransfer counts bytes moved by a stopped session.
type NetworkTransfer struct {
	Ingress int64 `json:"ingress"`
	Egress  int64 `json:"egress"`
}

// Sandbox is a named sandbox: the long-lived entity whose sessions come and go
// (docs/dev/vercel-sandbox-api.md §3.2).
type Sandbox struct {
	Name                     string             `json:"name"`
	Persistent               bool               `json:"persistent"`
	CurrentSessionID         string             `json:"currentSessionId"`
	Status                   SessionStatus      `json:"status"`
	StatusUpdatedAt          int64              `json:"statusUpdatedAt"`
	CreatedAt                int64              `json:"createdAt"`
	UpdatedAt                int64              `json:"updatedAt"`
	CurrentSnapshotID        string             `json:"currentSnapshotId,omitempty"`
	Region                   string             `json:"region,omitempty"`
	FailoverRegions          []string           `json:"failoverRegions,omitempty"`
	NetworkID                string             `json:"networkId,omitempty"`
	VCPUs                    int64              `json:"vcpus,omitempty"`
	Memory                   int64              `json:"memory,omitempty"`
	Timeout                  int64              `json:"timeout,omitempty"`
	Runtime                  string             `json:"runtime,omitempty"`
	Image                    string             `json:"image,omitempty"`
	NetworkPolicy            *NetworkPolicy     `json:"networkPolicy,omitempty"`
	TotalEgressBytes         int64              `json:"totalEgressBytes,omitempty"`
	TotalIngressBytes        int64              `json:"totalIngressBytes,omitempty"`
	TotalActiveCPUDurationMs int64              `json:"totalActiveCpuDurationMs,omitempty"`
	TotalDurationMs          int64              `json:"totalDurationMs,omitempty"`
	ExpiresAt                int64              `json:"expiresAt,omitempty"`
	Cwd                      string             `json:"cwd,omitempty"`
	Tags                     map[string]string  `json:"tags,omitempty"`
	SnapshotExpiration       *int64             `json:"snapshotExpiration,omitempty"`
	KeepLastSnapshots        *KeepLastSnapshots `json:"keepLastSnapshots,omitempty"`
}

// DefaultRegion is where Vercel runs a sandbox that names no region
// (docs/dev/vercel-sandbox-api.md §5.1).
const DefaultRegion = "iad1"

// KeepLastSnapshots bounds how many automatic snapshots a persistent sandbox keeps.
type KeepLastSnapshots struct {
	Count         int64  `json:"count"`
	Expiration    *int64 `json:"expiration,omitempty"`
	DeleteEvicted *bool  `json:"deleteEvicted,omitempty"`
}

// Route is the public URL of one exposed port
// (docs/dev/vercel-sandbox-api.md §3.3).
type Route struct {
	URL       string `json:"url"`
	Subdomain string `json:"subdomain"`
	Port      int64  `json:"port"`
	System    bool   `json:"system,omitempty"`
}

// Command is one process started in a session
// (docs/dev/vercel-sandbox-api.md §3.4). ExitCode is null until it exits.
type Command struct {
	ID         string   `json:"id"`
	Name       string   `json:"name"`
	Args       []string `json:"args"`
	Cwd        string   `json:"cwd"`
	SessionID  string   `json:"sessionId"`
	ExitCode   *int     `json:"exitCode"`
	DurationMs int64    `json:"durationMs,omitempty"`
	StartedAt  int64    `json:"startedAt"`
}

// SnapshotStatus is the status of a snapshot
// (docs/dev/vercel-sandbox-api.md §4).
type SnapshotStatus string

const (
	SnapshotCreated SnapshotStatus = "created"
	SnapshotDeleted SnapshotStatus = "deleted"
	SnapshotFailed  SnapshotStatus = "failed"
)

// Snapshot is a saved filesystem a session can boot from
// (docs/dev/vercel-sandbox-api.md §3.5).
type Snapshot struct {
	ID              string         `json:"id"`
	SourceSessionID string         `json:"sourceSessionId"`
	Region          string         `json:"region"`
	Regions         []string       `json:"regions,omitempty"`
	Status          SnapshotStatus `json:"status"`
	SizeBytes       int64          `json:"sizeBytes"`
	ExpiresAt       int64          `json:"expiresAt,omitempty"`
	CreatedAt       int64          `json:"createdAt"`
	UpdatedAt       int64          `json:"updatedAt"`
	LastUsedAt      int64          `json:"lastUsedAt"`
	CreationMethod  string         `json:"creationMethod,omitempty"`
	ParentID        string         `json:"parentId,omitempty"`
}

// Network policy modes (docs/dev/vercel-sandbox-api.md §3.6).
const (
	NetworkAllowAll = "allow-all"
	NetworkDenyAll  = "deny-all"
	NetworkCustom   = "custom"
)

// NetworkPolicy is the mode form used in requests, and the response form in
// which injection rules carry only header names, never values
// (docs/dev/vercel-sandbox-api.md §3.6 A and C).
type NetworkPolicy struct {
	Mode           string          `json:"mode,omitempty"`
	AllowedDomains []string        `json:"allowedDomains,omitempty"`
	AllowedCIDRs   []string        `json:"allowedCIDRs,omitempty"`
	DeniedCIDRs    []string        `json:"deniedCIDRs,omitempty"`
	InjectionRules []InjectionRule `json:"injectionRules,omitempty"`
	ForwardRules   []ForwardRule   `json:"forwardRules,omitempty"`

	// Allow and Subnets are the v2 allow/subnets request form
	// (docs/dev/vercel-sandbox-api.md §3.6 B), what SDK 3.5 sends for a
	// custom policy; a request sets them or Mode, never both. Answers are
	// always in the mode form (C), without them.
	Allow   *NetworkAllow   `json:"allow,omitempty"`
	Subnets *NetworkSubnets `json:"subnets,omitempty"`
}

// NetworkAllow is the allow field of the form B: a list of domains, or a
// record of domains to their rules (Rules non-nil selects it; JSON object
// keys carry no order, the rules of one domain do).
type NetworkAllow struct {
	Domains []string
	Rules   map[string][]NetworkRule
}

// MarshalJSON writes the record form when Rules is set, else the list form
// (an empty list, never null, for an allowlist of no domain).
func (a NetworkAllow) MarshalJSON() ([]byte, error) {
	if a.Rules != nil {
		return json.Marshal(a.Rules)
	}
	if a.Domains == nil {
		return []byte("[]"), nil
	}
	return json.Marshal(a.Domains)
}

// UnmarshalJSON reads either form.
func (a *NetworkAllow) UnmarshalJSON(b []byte) error {
	*a = NetworkAllow{}
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		a.Rules = map[string][]NetworkRule{}
		return json.Unmarshal(b, &a.Rules)
	}
	return json.Unmarshal(b, &a.Domains)
}

// NetworkSubnets allows and denies CIDR ranges; deny wins over everything.
type NetworkSubnets struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// NetworkRule is one rule of a domain: an optional match and exactly one of
// Transform, ForwardURL, Response. Transform header values and ForwardURL
// are credentials: never log a rule.
type NetworkRule struct {
	Match      *NetworkMatch      `json:"match,omitempty"`
	Transform  []NetworkTransform `json:"transform,omitempty"`
	ForwardURL string             `json:"forwardURL,omitempty"`
	Response   *NetworkResponse   `json:"response,omitempty"`
}

// NetworkTransform sets headers on a matching request.
type NetworkTransform struct {
	Headers map[string]string `json:"headers,omitempty"`
}

// NetworkMatch selects requests: every dimension set must match; methods
// are ORed, header and query matchers ANDed.
type NetworkMatch struct {
	Path        *Matcher          `json:"path,omitempty"`
	Method      []string          `json:"method,omitempty"`
	QueryString []KeyValueMatcher `json:"queryString,omitempty"`
	Headers     []KeyValueMatcher `json:"headers,omitempty"`
}

// Matcher matches a value one way: exactly one field is set.
type Matcher struct {
	Exact      *string `json:"exact,omitempty"`
	StartsWith *string `json:"startsWith,omitempty"`
	Regex      *string `json:"regex,omitempty"`
}

// KeyValueMatcher matches a header or query-string entry.
type KeyValueMatcher struct {
	Key   *Matcher `json:"key,omitempty"`
	Value *Matcher `json:"value,omitempty"`
}

// NetworkResponse is an answer the proxy gives itself.
type NetworkResponse struct {
	StatusCode  int               `json:"statusCode"`
	Headers     map[string]string `json:"headers,omitempty"`
	Body        *string           `json:"body,omitempty"`
	ContentType string            `json:"contentType,omitempty"`
}

// InjectionRule adds headers to egress requests for a domain. Headers (request
// only) hold secret values; HeaderNames (response only) name them.
type InjectionRule struct {
	Domain      string            `json:"domain"`
	Headers     map[string]string `json:"headers,omitempty"`
	HeaderNames []string          `json:"headerNames,omitempty"`
	Match       json.RawMessage   `json:"match,omitempty"`
}

// ForwardRule appears only in responses.
type ForwardRule struct {
	Domain     string          `json:"domain"`
	ForwardURL string          `json:"forwardURL"`
	Match      json.RawMessage `json:"match,omitempty"`
}

// Pagination is the v2 cursor pagination block
// (docs/dev/vercel-sandbox-api.md §3.7); Next is null on the last page.
type Pagination struct {
	Count int64   `json:"count"`
	Next  *string `json:"next"`
}

// Source is where a new sandbox's filesystem comes from
// (docs/dev/vercel-sandbox-api.md §5.1).
type Source struct {
	Type       string `json:"type"` // git | tarball | snapshot
	URL        string `json:"url,omitempty"`
	Depth      int64  `json:"depth,omitempty"`
	Revision   string `json:"revision,omitempty"`
	Username   string `json:"username,omitempty"`
	Password   string `json:"password,omitempty"`
	SnapshotID string `json:"snapshotId,omitempty"`
}

// Source types.
const (
	SourceGit      = "git"
	SourceTarball  = "tarball"
	SourceSnapshot = "snapshot"
)

// Resources sizes a session. Memory, when sent, must equal VCPUs*2048.
type Resources struct {
	VCPUs  int64 `json:"vcpus,omitempty"`
	Memory int64 `json:"memory,omitempty"`
}

// CreateSandboxRequest is the body of POST /v3/sandboxes (or /v2 with Runtime;
// docs/dev/vercel-sandbox-api.md §5.1). ProjectID is filled in by the client
// from its configuration when empty.
type CreateSandboxRequest struct {
	Name               string             `json:"name,omitempty"`
	ProjectID          string             `json:"projectId,omitempty"`
	Source             *Source            `json:"source,omitempty"`
	Runtime            string             `json:"runtime,omitempty"`
	Image              string             `json:"image,omitempty"`
	Resources          *Resources         `json:"resources,omitempty"`
	Ports              []int64            `json:"ports,omitempty"`
	Timeout            int64              `json:"timeout,omitempty"`
	Env                map[string]string  `json:"env,omitempty"`
	Persistent         *bool              `json:"persistent,omitempty"`
	NetworkPolicy      *NetworkPolicy     `json:"networkPolicy,omitempty"`
	Tags               map[string]string  `json:"tags,omitempty"`
	SnapshotExpiration *int64             `json:"snapshotExpiration,omitempty"`
	KeepLastSnapshots  *KeepLastSnapshots `json:"keepLastSnapshots,omitempty"`
	Region             string             `json:"region,omitempty"`
	FailoverRegions    []string           `json:"failoverRegions,omitempty"`
	// Interactive is the SDK's private parameter __interactive, which Vercel's
	// CLI always sends: the sessions serve interactive terminals and report
	// interactivePort (docs/dev/interactive-sessions.md).
	Interactive bool `json:"__interactive,omitempty"`
}

// ForkSandboxRequest is the body of POST /v2/sandboxes/{name}/fork
// (docs/dev/vercel-sandbox-api.md §5.6): the create fields minus source and
// runtime; every field set overrides the source's.
type ForkSandboxRequest struct {
	Name               string             `json:"name,omitempty"`
	Resources          *Resources         `json:"resources,omitempty"`
	Ports              []int64            `json:"ports,omitempty"`
	Timeout            int64              `json:"timeout,omitempty"`
	Env                map[string]string  `json:"env,omitempty"`
	Persistent         *bool              `json:"persistent,omitempty"`
	NetworkPolicy      *NetworkPolicy     `json:"networkPolicy,omitempty"`
	Tags               map[string]string  `json:"tags,omitempty"`
	SnapshotExpiration *int64             `json:"snapshotExpiration,omitempty"`
	KeepLastSnapshots  *KeepLastSnapshots `json:"keepLastSnapshots,omitempty"`
	Region             string             `json:"region,omitempty"`
	// Interactive is the SDK's private parameter __interactive, which Vercel's
	// CLI always sends: the sessions serve interactive terminals and report
	// interactivePort (docs/dev/interactive-sessions.md).
	Interactive bool `json:"__interactive,omitempty"`
}

// UpdateSandboxRequest is the body of PATCH /v2/sandboxes/{name}
// (docs/dev/vercel-sandbox-api.md §5.4); only the fields set change, and they
// apply to future sessions.
//
// Env, Ports and Tags use omitzero, not omitempty: nil leaves them unchanged,
// while an empty non-nil map or slice is sent as {} / [] and clears them, as
// the API defines ("`{}` clears", "ports not listed are de-registered").
type UpdateSandboxRequest struct {
	Resources          *Resources         `json:"resources,omitempty"`
	Timeout            int64              `json:"timeout,omitempty"`
	Persistent         *bool              `json:"persistent,omitempty"`
	SnapshotExpiration *int64             `json:"snapshotExpiration,omitempty"`
	KeepLastSnapshots  *KeepLastSnapshots `json:"keepLastSnapshots,omitempty"`
	NetworkPolicy      *NetworkPolicy     `json:"networkPolicy,omitempty"`
	Env                map[string]string  `json:"env,omitzero"`
	Ports              []int64            `json:"ports,omitzero"`
	CurrentSnapshotID  string             `json:"currentSnapshotId,omitempty"`
	Tags               map[string]string  `json:"tags,omitzero"`
	// Region and FailoverRegions apply to the next session.
	Region          string   `json:"region,omitempty"`
	FailoverRegions []string `json:"failoverRegions,omitzero"`
}

// SandboxResponse answers create, get, patch and fork
// (docs/dev/vercel-sandbox-api.md §5.1–5.6).
type SandboxResponse struct {
	Sandbox Sandbox  `json:"sandbox"`
	Session *Session `json:"session,omitempty"`
	Routes  []Route  `json:"routes"`
	Resumed bool     `json:"resumed,omitempty"`
}

// ListSandboxesResponse answers GET /v2/sandboxes.
type ListSandboxesResponse struct {
	Sandboxes  []Sandbox  `json:"sandboxes"`
	Pagination Pagination `json:"pagination"`
}

// SessionResponse answers GET /v2/sandboxes/sessions/{id}.
type SessionResponse struct {
	Session Session `json:"session"`
	Routes  []Route `json:"routes"`
}

// ListSessionsResponse answers GET /v2/sandboxes/sessions.
type ListSessionsResponse struct {
	Sessions   []Session  `json:"sessions"`
	Pagination Pagination `json:"pagination"`
}

// StopSessionResponse answers a stop; Sandbox and Snapshot are set when a
// persistent sandbox was snapshotted automatically.
type StopSessionResponse struct {
	Session  Session   `json:"session"`
	Sandbox  *Sandbox  `json:"sandbox,omitempty"`
	Snapshot *Snapshot `json:"snapshot,omitempty"`
}

// RunCommandRequest is the body of POST …/cmd
// (docs/dev/vercel-sandbox-api.md §5.8).
type RunCommandRequest struct {
	Command     string            `json:"command"`
	Args        []string          `json:"args"`
	Cwd         string            `json:"cwd,omitempty"`
	Env         map[string]string `json:"env"`
	Sudo        bool              `json:"sudo,omitempty"`
	Wait        bool              `json:"wait,omitempty"`
	Logs        bool              `json:"logs,omitempty"`
	Timeout     int64             `json:"timeout,omitempty"`
	AttachStdin bool              `json:"attachStdin,omitempty"`
}

// CommandResponse wraps one command.
type CommandResponse struct {
	Command Command `json:"command"`
}

// ListCommandsResponse answers GET …/cmd, newest first.
type ListCommandsResponse struct {
	Commands []Command `json:"commands"`
}

// StreamRecord is one NDJSON record as it travels: a command status record
// ({"command":…}) or a log/error record ({"stream":…,"data":…}).
type StreamRecord struct {
	Command *Command        `json:"command,omitempty"`
	Stream  string          `json:"stream,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// ReadFileRequest is the body of POST …/fs/read.
type ReadFileRequest struct {
	Path string `json:"path"`
	Cwd  string `json:"cwd,omitempty"`
}

// MkdirRequest is the body of POST …/fs/mkdir.
type MkdirRequest struct {
	Path      string `json:"path"`
	Cwd       string `json:"cwd,omitempty"`
	Recursive *bool  `json:"recursive,omitempty"`
}

// ExtendTimeoutRequest is the body of POST …/extend-timeout; Duration is ms to add.
type ExtendTimeoutRequest struct {
	Duration int64 `json:"duration"`
}

// KillCommandRequest is the body of POST …/cmd/{id}/kill.
type KillCommandRequest struct {
	Signal int `json:"signal"`
}

// CreateSnapshotRequest is the optional body of POST …/snapshot; Expiration in
// ms, 0 = never.
type CreateSnapshotRequest struct {
	Expiration *int64 `json:"expiration,omitempty"`
}

// SnapshotResponse wraps one snapshot; Session is set on create.
type SnapshotResponse struct {
	Snapshot Snapshot `json:"snapshot"`
	Session  *Session `json:"session,omitempty"`
}

// ListSnapshotsResponse answers GET /v2/sandboxes/snapshots.
type ListSnapshotsResponse struct {
	Snapshots  []Snapshot `json:"snapshots"`
	Pagination Pagination `json:"pagination"`
}

// ErrorEnvelope is the error body of every non-2xx answer
// (docs/dev/vercel-sandbox-api.md §7.1).
type ErrorEnvelope struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody is the inner error object.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}
