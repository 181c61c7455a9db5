// Run by TestOfficialSDKSnapshotTree: Vercel's official SDK builds a
// snapshot lineage on a persistent sandbox (three stops, each a snapshot;
// a command between them resumes it as the SDK does on its own) and reads it
// with Snapshot.tree in both directions, one node per page, through the
// SDK's own paginator (toArray). Prints one JSON object: the snapshot ids of
// the stops in order, and what each walk returned.
//
// Environment: VERCEL_TOKEN, VERCEL_TEAM_ID, VERCEL_PROJECT_ID, SANDBOX_NAME.
// The package comes from OFFICIAL_NODE_MODULES.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.OFFICIAL_NODE_MODULES, "noop.js"));
const { Sandbox, Snapshot } = require("@vercel/sandbox");

const creds = { token: process.env.VERCEL_TOKEN, teamId: process.env.VERCEL_TEAM_ID, projectId: process.env.VERCEL_PROJECT_ID };
const sandbox = await Sandbox.create({ ...creds, name: process.env.SANDBOX_NAME, persistent: true, timeout: 5 * 60 * 1000 });

const stops = [];
for (let i = 0; i < 3; i++) {
  const cmd = await sandbox.runCommand("sh", ["-c", `echo ${i} > /tmp/step`]);
  if (cmd.exitCode !== 0) throw new Error(`command ${i} exited ${cmd.exitCode}`);
  const stopped = await sandbox.stop();
  if (!stopped.snapshot) throw new Error(`stop ${i} of a persistent sandbox returned no snapshot`);
  stops.push(stopped.snapshot.id);
}

const walk = async (snapshotId, sortOrder) => {
  const result = await Snapshot.tree({ ...creds, snapshotId, sortOrder, limit: 1 });
  const nodes = await result.toArray();
  return { anchor: result.anchor?.snapshot.id ?? null, nodes: nodes.map((n) => n.snapshot.id) };
};

const out = {
  stops,
  current: sandbox.currentSnapshotId ?? null,
  ancestors: await walk(stops[2], "desc"),
  descendants: await walk(stops[0], "asc"),
};
await sandbox.delete();
console.log(JSON.stringify(out));
