// Package vercel is the Go client of the Vercel Sandbox REST API (v2): it
// turns each endpoint into one typed method, and every failure into a typed
// error the controllers can branch on.
//
// The contract it speaks is the project's API specification,
// docs/dev/vercel-sandbox-api.md; comments cite its sections by number. The
// same wire types (types.go) are served by internal/emulator, and
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
//   - Requests pass through a token bucket shared by every Client built for the
//     same credential, because Vercel's control-plane limit is per team, not
//     per client object.
//   - Streaming calls (command output, wait-for-exit) may stay open for hours:
//     nothing sets a read deadline; the caller's context bounds every call.
//   - The bearer token never appears in String/%v output or in error messages.
package vercel
