// Package egress is the emulator's stand-in for Vercel's sandbox firewall:
// one HTTP forward proxy per session that enforces the session's current
// network policy (docs/dev/vercel-sandbox-api.md §3.6) on every request.
//
// # Model
//
// The emulator gives each session's processes their own network namespace
// whose only way out is this proxy, and points HTTP_PROXY/HTTPS_PROXY at it.
// The proxy asks the Session for its Policy on every request (and on every
// request inside a kept-alive connection it reads), so a policy update
// applies to the next request.
//
//   - allow-all: every destination, except the private-address rule below.
//   - deny-all: every request and CONNECT is answered 403 by the proxy with a
//     short text saying the sandbox's network policy blocks the host.
//   - custom (form A mode custom/default-deny, or form B): a host is allowed
//     when an allowed domain matches it. "*" stands for one label, except as
//     the first label, where it stands for one or more labels (Vercel's CLI
//     docs): "*.example.com" matches a.example.com and a.b.example.com but not
//     example.com; "*" alone matches every name (not IP literals). When
//     several domains match, the most specific one's rules apply (more
//     labels, then fewer wildcards). An address (an IP literal, or what a name
//     resolves to) in subnets.allow is allowed whatever its name; an address
//     in subnets.deny is refused whatever allowed it. Anything else: 403.
//     Form A "default-allow", whose meaning Vercel does not document, is read
//     as custom with unmatched hosts allowed.
//   - Private destinations: loopback, private, link-local, CGNAT and
//     unspecified addresses (by literal or DNS answer) are refused unless
//     Options.Hosts maps the name or AllowPrivateDestinations is set. On
//     Vercel those addresses are Vercel's; here they are the developer's
//     etcd and emulator.
//
// The address is chosen from the same DNS answer the policy checked, so a
// name cannot pass the check with one address and be dialled at another.
//
// # L7 rules
//
// A domain with rules (form B transform/forwardURL/response, form A
// injectionRules) is read by the proxy: for CONNECT it terminates TLS with a
// leaf minted from its own CA (CACertPEM, which the sandbox trusts; the key
// stays in memory) for the CONNECT host, offering only HTTP/1.1; plain
// http:// requests are read as they come. Each request runs the domain's
// rules in declaration order and the first whose match accepts it acts:
//
//   - transform sets its headers on the upstream request, replacing any value
//     the sandbox sent under those names, so the sandbox can neither pre-set
//     nor read the secret;
//   - response answers from the proxy (status, headers, body, content type);
//   - forwardURL sends the request to the forward URL's path followed by the
//     original path and query, with the headers the SDK's defineSandboxProxy
//     reads (vercel-forwarded-host/-scheme/-port/-path, the path including
//     the query) and vercel-sandbox-oidc-token: a fresh RS256 JWT (iss =
//     Options.Issuer, aud = the forward URL's origin and path without a
//     trailing slash, team_id, project_id, sandbox_id, sandbox_name, five
//     minutes of validity) verifiable with JWKS().
//
// No matching rule: the request goes to the destination unchanged. A domain
// without rules is never read: CONNECT becomes a raw tunnel. Upstream TLS is
// verified against the system roots and Options.UpstreamRoots.
//
// # What it proves, and how it differs from Vercel
//
// With the proxy the emulator can show, with real processes and real TLS,
// that a credential put behind a transform reaches the upstream and never
// the sandbox, that deny-all and allowlists block, that match and response
// rules split a domain, and that a forwardURL broker can verify which
// sandbox called it. It is not Vercel's firewall:
//
//   - Vercel's firewall is transparent (it sees every packet); this is an
//     explicit proxy found through HTTP_PROXY/HTTPS_PROXY. A program that
//     ignores those variables reaches nothing here (the namespace has no
//     other route), where on Vercel its traffic would be filtered the same.
//     Only HTTP and TLS-over-CONNECT are carried: no raw TCP to other
//     protocols, no UDP, no DNS from the sandbox (the proxy resolves).
//   - TLS is terminated only for domains with rules; Vercel's exact choice is
//     not documented. SNI must name the CONNECT host.
//   - Paths with "." or ".." segments are refused (400) on domains with
//     rules, so a path rule cannot be sidestepped by an upstream that
//     normalizes them; Vercel's behaviour is not documented.
//   - Regex matchers are Go RE2, unanchored (partial match).
//   - Requests the proxy reads meet a policy update at once. A raw tunnel
//     cannot be read per request: it is checked again when data next flows
//     after an update and closed (before forwarding that data) if the new
//     policy refuses it or wants its requests read; the client reconnects.
//   - Forward URLs must be https (Compile refuses others, naming the field).
//   - Forward tokens are signed by a per-proxy key with iss = the emulator,
//     not oidc.vercel.com; the SDK's handler accepts only Vercel's issuer, so
//     verifying them takes a handler whose issuer can be pointed here.
//
// Usage: Options.OnTransfer receives each client connection's bytes (egress
// from the sandbox, ingress to it, on the wire) when it closes.
package egress
