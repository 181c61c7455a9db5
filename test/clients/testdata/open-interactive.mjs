// Run by TestOfficialSDKInteractive: creates a sandbox with Vercel's official
// SDK (as the CLI does, with the private parameter __interactive), opens an
// interactive session with openInteractive, and speaks the CLI's protocol over
// the WebSocket with the `ws` package the CLI uses. Prints what it saw; the Go
// test checks it. The packages come from OFFICIAL_NODE_MODULES.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.OFFICIAL_NODE_MODULES, "noop.js"));
const { Sandbox } = require("@vercel/sandbox");
const WebSocket = require("ws");

const [key, value] = process.env.SANDBOX_TAG.split("=");
const creds = { token: process.env.VERCEL_TOKEN, teamId: process.env.VERCEL_TEAM_ID, projectId: process.env.VERCEL_PROJECT_ID };
const sandbox = await Sandbox.create({ ...creds, name: process.env.SANDBOX_NAME, tags: { [key]: value }, __interactive: true });
try {
  if (!sandbox.interactivePort) throw new Error("the session reports no interactivePort");
  console.log("interactivePort ok");
  const { url, token } = await sandbox.openInteractive();
  const ws = new WebSocket(`${url}?token=${encodeURIComponent(token)}`);
  await new Promise((resolve, reject) => { ws.once("open", resolve); ws.once("error", reject); });
  let output = "";
  let exitCode;
  const closed = new Promise((resolve) => ws.once("close", resolve));
  const seen = (re) => new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out waiting for ${re}; output: ${JSON.stringify(output)}`)), 30000);
    const check = () => { if (re.test(output)) { clearTimeout(timer); ws.off("message", check); resolve(); } };
    ws.on("message", check);
    check();
  });
  ws.on("message", (data, isBinary) => {
    if (isBinary) { output += data.toString(); return; }
    const msg = JSON.parse(data.toString());
    if (msg.type === "exit") exitCode = msg.code;
  });
  ws.send(JSON.stringify({ type: "start", command: "sh", args: [], env: ["TERM=xterm-256color", "PS1=$ "], cwd: "/vercel/sandbox", cols: 80, rows: 24 }));
  ws.send(Buffer.from("echo answer=$((6*7))\r"));
  await seen(/answer=42/);
  console.log("output: answer=42");
  ws.send(JSON.stringify({ type: "resize", cols: 120, rows: 50 }));
  ws.send(Buffer.from("stty size\r"));
  await seen(/50 120/);
  console.log("resized: 50 120");
  ws.send(Buffer.from("exit 6\r"));
  await closed;
  console.log(`exit code: ${exitCode}`);
} finally {
  await sandbox.delete();
}
