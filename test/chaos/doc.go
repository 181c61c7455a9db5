// Package chaos is the chaos soak of issue 15 (`make chaos`, and a short
// seeded run in `make test`): the real manager binary runs as two
// leader-elected replicas, authenticated as the ServiceAccount and RBAC that
// `make deploy` installs, against a local control plane and the Vercel
// emulator. While a seeded random workload creates, changes, pauses, resumes,
// captures, forks, scales and deletes objects in several namespaces, a random
// replica is SIGKILLed every few seconds and restarted, and the emulator
// injects faults (429 with and without Retry-After, 5xx, commit-then-fail,
// dropped responses, latency spikes, a concurrency limit and black holes).
// Then the faults are lifted, the harness waits (bounded) for the objects to
// converge, and Run reports one table (report.go) whose targets say whether
// the operator stayed correct: see docs/dev/chaos.md.
package chaos
