package emulator

import (
	"encoding/json"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Read-only test accessors for the network policy requests the emulator
// holds: the request as the client sent it (form A or B of
// docs/dev/vercel-sandbox-api.md §3.6), header values and forward URLs
// included, which the API never answers with (form C). They let a test see
// what the operator asked Vercel for.

// SessionPolicyRequest returns the network policy request session id runs
// with; a nil policy (none was ever sent) is allow-all. False when the
// session is unknown.
func (e *Emulator) SessionPolicyRequest(id string) (*vercel.NetworkPolicy, bool) {
	e.mu.Lock()
	defer e.unlock()
	s, ok := e.st.sessions[id]
	if !ok {
		return nil, false
	}
	return decodePolicyRequest(s.policy), true
}

// SandboxPolicyRequest returns the network policy request the named
// sandbox gives its next sessions (in the emulator's default project, else
// any); false when it is unknown.
func (e *Emulator) SandboxPolicyRequest(name string) (*vercel.NetworkPolicy, bool) {
	e.mu.Lock()
	defer e.unlock()
	if sb := e.st.sandbox(scope{e.opts.TeamID, e.opts.ProjectID}, name); sb != nil {
		return decodePolicyRequest(sb.policy), true
	}
	for _, sb := range e.st.allSandboxes() {
		if sb.name == name {
			return decodePolicyRequest(sb.policy), true
		}
	}
	return nil, false
}

func decodePolicyRequest(p *policySpec) *vercel.NetworkPolicy {
	if p == nil {
		return nil
	}
	var out vercel.NetworkPolicy
	if json.Unmarshal(p.raw, &out) != nil {
		return nil
	}
	return &out
}
