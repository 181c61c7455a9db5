// Run by TestOfficialSDKUsers: Vercel's official SDK creates a user and a
// group in a persistent sandbox with its own createUser, createGroup and
// addUserToGroup, runs commands as that user (asUser, which wraps them in
// `sudo -u USER --`), writes and reads a file in the user's home, and checks
// the user survives a stop and resume (the session's snapshot). Prints one
// JSON object with what each call returned.
//
// Environment: VERCEL_TOKEN, VERCEL_TEAM_ID, VERCEL_PROJECT_ID, SANDBOX_NAME.
// The package comes from OFFICIAL_NODE_MODULES.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.OFFICIAL_NODE_MODULES, "noop.js"));
const { Sandbox } = require("@vercel/sandbox");

const creds = { token: process.env.VERCEL_TOKEN, teamId: process.env.VERCEL_TEAM_ID, projectId: process.env.VERCEL_PROJECT_ID };
const sandbox = await Sandbox.create({ ...creds, name: process.env.SANDBOX_NAME, persistent: true, timeout: 5 * 60 * 1000 });

const run = async (user, cmd, args) => {
  const c = await user.runCommand(cmd, args);
  return { exitCode: c.exitCode, stdout: await c.stdout(), stderr: await c.stderr() };
};

const alice = await sandbox.createUser("alice");
const group = await sandbox.createGroup("devs");
await sandbox.addUserToGroup("alice", "devs");
const ids = await run(alice, "sh", ["-c", 'id -un; id -gn; id -Gn; echo "$HOME"; pwd']);
await alice.writeFiles([{ path: "hello.txt", content: Buffer.from("hi alice") }]);
const read = (await alice.readFileToBuffer({ path: "hello.txt" }))?.toString() ?? null;
const owner = await run(sandbox, "stat", ["-c", "%U:%G", "/home/alice/hello.txt"]);
const root = await run(sandbox.asUser("root"), "id", ["-un"]);
let again = null;
try {
  await sandbox.createUser("alice");
} catch (err) {
  again = err.name;
}

await sandbox.stop();
const resumed = await run(sandbox.asUser("alice"), "id", ["-un"]);

await sandbox.delete();
console.log(JSON.stringify({ ids, group, read, owner: owner.stdout, root: root.stdout, again, resumed }));
