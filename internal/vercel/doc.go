// Package vercel is the Go client of the Vercel Sandbox REST API (v2): it
// turns each endpoint into one typed method, and every failure into a typed
// error the controllers can branch on.
//
// The contract it speaks is the project's API specification,
// docs/dev/vercel-sandbox-api.md; comments cite its sections by number. The
// same wire types (types.go) are served by localstack/emulator, and
// contract_test.go drives this client against that emulator over loopback, so
// the wire format is exercised on every test run.
//
// What the client does beyond encoding requests, and why:
//
//   - Retries are deliberately narrow. The official SDK re-sends every request,
//     including creates and command runs, which duplicates work when a request
//     committed but its answer was lost (docs/dev/vercel-sandbox-api.md §7.5).
//     This client retries only calls that are safe to repeat (reads, stop,
//     kill, delete) and a create that carries a name, whose duplicate-name
//     answer after a retry is adopted by reading the sandbox back.
//   - A 429 with a short Retry-After is waited out; a long one is returned at
//     once with RetryAfter set, so a reconciler can requeue instead of blocking
//     a worker.
//   - A 429 slows every Client of the credential (throttle.go): a Retry-After
//     holds back all its requests, and a 429 without one — Vercel's answer at
//     the concurrency limit — starts an exponential backoff (1 s doubling to
//     30 s) after which one request probes. Held-back calls fail at once,
//     unsent, with a 429 whose RetryAfter says when to come back. Deletes,
//     stops and session extensions are never held back: they are what frees
//     capacity, and a successful delete or stop lets the next create probe at
//     once. They also carry internal/httplimit's priority mark, so they may
//     use its reserved in-flight slots instead of queueing behind creates.
//   - Requests pass through a token bucket shared by every Client built for the
//     same credential, because Vercel's control-plane limit is per team, not
//     per client object.
//   - Every call has a deadline (Config.CallTimeout, 30 s), its retries
//     included, so a stalled peer never holds a caller or an in-flight slot
//     for long. Streams (command output, file reads) may stay open for hours:
//     only their start is bounded by it, and then each read by
//     Config.StreamIdleTimeout (no byte for a minute ends the stream).
//   - The bearer token never appears in String/%v output or in error messages.
package vercel
