// The time-to-first-command benchmark's SDK arm (test/perf/ttfc_sdk.go): one
// conversation per line read on stdin ("<id>"), each doing what an app using
// Vercel's official SDK directly does when a conversation needs a sandbox —
// Sandbox.create from the workspace snapshot, then runCommand and its output —
// and answering one JSON line per conversation on stdout. Conversations run
// concurrently, as in an app serving many users. The SDK comes from
// OFFICIAL_NODE_MODULES; its requests go to the emulator through
// vercel-to-emulator.mjs (NODE_OPTIONS=--import).
import { createRequire } from "node:module";
import path from "node:path";
import readline from "node:readline";

const require = createRequire(path.join(process.env.OFFICIAL_NODE_MODULES, "noop.js"));
const { Sandbox } = require("@vercel/sandbox");

const creds = { token: process.env.VERCEL_TOKEN, teamId: process.env.VERCEL_TEAM_ID, projectId: process.env.VERCEL_PROJECT_ID };
const snapshotId = process.env.TTFC_SNAPSHOT_ID;
const timeout = Number(process.env.TTFC_TIMEOUT_MS || "600000");

async function conversation(id) {
  const sandbox = await Sandbox.create({ ...creds, source: { type: "snapshot", snapshotId }, timeout });
  const cmd = await sandbox.runCommand("echo", ["ttfc"]);
  const stdout = await cmd.stdout();
  return { exitCode: cmd.exitCode, stdout };
}

const rl = readline.createInterface({ input: process.stdin });
rl.on("line", (line) => {
  const id = line.trim();
  if (!id) return;
  conversation(id).then(
    (r) => process.stdout.write(JSON.stringify({ id, ok: r.exitCode === 0, exitCode: r.exitCode, stdout: r.stdout }) + "\n"),
    (e) => process.stdout.write(JSON.stringify({ id, ok: false, error: String(e && e.stack || e) }) + "\n"),
  );
});
process.stdout.write(JSON.stringify({ ready: true }) + "\n");
