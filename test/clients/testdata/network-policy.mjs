// Run by TestOfficialSDKNetworkPolicy: Vercel's official SDK sets a
// sandbox's network policy (Sandbox.create, then updateNetworkPolicy with
// match/transform, a trailing response rule and forwardURL, then
// "deny-all"), and after each step runs curl inside the sandbox with
// runCommand. Prints one JSON object with the policies the SDK returned and
// what each curl printed; the Go test checks it against what its upstreams
// saw. The package comes from OFFICIAL_NODE_MODULES.
//
// Environment: VERCEL_TOKEN, VERCEL_TEAM_ID, VERCEL_PROJECT_ID,
// SANDBOX_NAME, CANARY (the value the transform rule sets as authorization:
// it goes to the API in the policy and must come back from nowhere, so this
// script never prints it), BROKER_URL (the forwardURL).
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.OFFICIAL_NODE_MODULES, "noop.js"));
const { Sandbox } = require("@vercel/sandbox");

const creds = { token: process.env.VERCEL_TOKEN, teamId: process.env.VERCEL_TEAM_ID, projectId: process.env.VERCEL_PROJECT_ID };
const canary = process.env.CANARY;
if (!canary || !process.env.BROKER_URL) throw new Error("network-policy.mjs: CANARY and BROKER_URL must be set");

const out = {};
const sandbox = await Sandbox.create({
  ...creds,
  name: process.env.SANDBOX_NAME,
  timeout: 5 * 60 * 1000,
  networkPolicy: { allow: ["other.example.com"] },
});

// curl prints the body, then a last line "<status> <CONNECT status> <x-policy header>".
async function curl(label, ...args) {
  const cmd = await sandbox.runCommand("curl", [
    "-sS", "--max-time", "10", "-w", "\n%{http_code} %{http_connect} %header{x-policy}", ...args,
  ]);
  const stdout = await cmd.stdout();
  const stderr = await cmd.stderr();
  const lines = stdout.split("\n");
  const [status, connect, policyHeader = ""] = lines.pop().split(" ");
  return { label, exitCode: cmd.exitCode, body: lines.join("\n"), status, connect, policyHeader, stderr: stderr.trim() };
}

try {
  out.created = sandbox.networkPolicy;
  out.before = [
    await curl("api POST /v1", "-X", "POST", "https://api.example.com/v1/issues"),
    // A domain without rules is a raw tunnel: curl meets the upstream's own
    // certificate, Go's test certificate, which the sandbox does not trust.
    await curl("other GET", "--insecure", "https://other.example.com/"),
  ];

  out.updated = await sandbox.updateNetworkPolicy({
    allow: {
      "api.example.com": [
        {
          match: { method: ["POST"], path: { startsWith: "/v1/" } },
          transform: [{ headers: { authorization: canary } }],
        },
        {
          response: { statusCode: 403, headers: { "x-policy": "trailing-rule" }, body: "denied by the response rule", contentType: "text/plain" },
        },
      ],
      "git.example.com": [{ forwardURL: process.env.BROKER_URL }],
    },
  });
  out.after = [
    // The sandbox's own authorization must be replaced by the transform's.
    await curl("api POST /v1", "-X", "POST", "-H", "authorization: Bearer placeholder", "https://api.example.com/v1/issues"),
    await curl("api GET /v1", "https://api.example.com/v1/issues"),
    await curl("api POST /v2", "-X", "POST", "https://api.example.com/v2/issues"),
    await curl("git POST", "-X", "POST", "https://git.example.com/repos/x/pulls?state=open"),
    await curl("other GET", "https://other.example.com/"),
    await curl("other GET http", "http://other.example.com/"),
  ];

  out.denyAll = await sandbox.updateNetworkPolicy("deny-all");
  out.denied = [
    await curl("api POST /v1", "-X", "POST", "https://api.example.com/v1/issues"),
    await curl("git POST", "-X", "POST", "https://git.example.com/repos/x/pulls"),
    await curl("api GET http", "http://api.example.com/"),
  ];
} finally {
  await sandbox.delete();
}
console.log(JSON.stringify(out));
