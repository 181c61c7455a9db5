// A webhook receiver as docs/clients.md tells a user to write one: it
// verifies every delivery with the standardwebhooks npm package (Svix's
// reference implementation of https://www.standardwebhooks.com), not with
// this repository's code, and is configured with the secret the docs give:
// "whsec_" followed by the base64 of the signing Secret's value.
//
// For each delivery it also checks that the package refuses the same
// delivery with one byte of the body changed, and with a timestamp ten
// minutes old, and prints one JSON line with the results; then answers 204.
//
// Environment: SWH_NODE_MODULES (where the package is installed),
// WEBHOOK_SECRET, PORT (127.0.0.1:PORT is listened on).
import { createRequire } from "node:module";
import http from "node:http";
import path from "node:path";

const require = createRequire(path.join(process.env.SWH_NODE_MODULES, "noop.js"));
const { Webhook } = require("standardwebhooks");

const wh = new Webhook(process.env.WEBHOOK_SECRET);

function refusal(body, headers) {
  try {
    wh.verify(body, headers);
    return "";
  } catch (err) {
    return `${err.name}: ${err.message}`;
  }
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    const headers = {
      "webhook-id": req.headers["webhook-id"],
      "webhook-timestamp": req.headers["webhook-timestamp"],
      "webhook-signature": req.headers["webhook-signature"],
    };
    const line = { webhookID: headers["webhook-id"], contentType: req.headers["content-type"] };
    try {
      line.event = wh.verify(body, headers);
      line.verified = true;
    } catch (err) {
      line.verified = false;
      line.error = `${err.name}: ${err.message}`;
    }
    const tampered = Buffer.from(body);
    tampered[tampered.length - 2] ^= 1;
    line.tamperedRefusal = refusal(tampered, headers);
    const old = String(Math.floor(Date.now() / 1000) - 600);
    line.oldRefusal = refusal(body, { ...headers, "webhook-timestamp": old });
    process.stdout.write(JSON.stringify(line) + "\n");
    res.writeHead(line.verified ? 204 : 401);
    res.end();
  });
});

server.listen(Number(process.env.PORT), "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ listening: server.address().port }) + "\n");
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
