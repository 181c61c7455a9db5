// Package sandboxclient is the Go library for programs that use sandboxes
// through the operator (Junior, Box, kubectl sandbox): it declares
// Sandboxes, SandboxSnapshots and SandboxForks with the typed clientset
// (pkg/client) and waits for the controllers to act on them.
//
// Every wait watches the object (no polling) and ends in one of three ways:
// the state asked for, a *ConditionError carrying the reason and message of
// the condition that says the state will not come (a failed setup command, a
// name conflict in Vercel, a failed snapshot build), or the context's error
// together with the last status seen.
//
// The library writes only what a client owns: spec fields, the activity
// heartbeat annotation (a JSON merge patch, which never conflicts with the
// controllers' status writes) and deletes. Running commands and moving files
// in a sandbox is pkg/dataplane's job.
package sandboxclient
