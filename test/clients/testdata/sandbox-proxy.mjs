// Run by TestOfficialSandboxProxy: an HTTPS server whose only handler is the
// official SDK's defineSandboxProxy (@vercel/sandbox/proxy), the handler a
// forwardURL broker written with the SDK uses. The inner handler answers
// with what the SDK gave it (the sanitized request and the sandbox's
// identity) as JSON, so the Go test sees what a broker would.
//
// One thing differs from production: the SDK accepts only tokens issued by
// https://oidc.vercel.com and fetches that issuer's keys with the global
// fetch (jose 6). The fetch shim below answers
// https://oidc.vercel.com/.well-known/jwks with the JWKS the test wrote to
// JWKS_FILE (the emulator's egress proxy's keys) and refuses every other
// fetch, so nothing reaches Vercel. The SDK's own code runs unchanged.
//
// Environment: OFFICIAL_NODE_MODULES, TLS_CERT and TLS_KEY (PEM files),
// JWKS_FILE. Prints "listening <port>" once it serves on 127.0.0.1; prints
// each refusal's reason to stderr (the reason only, never the request).
import { readFileSync } from "node:fs";
import https from "node:https";
import path from "node:path";
import { Readable } from "node:stream";
import { pathToFileURL } from "node:url";

const jwksURL = "https://oidc.vercel.com/.well-known/jwks";
// Read at each fetch: the test writes the file once the proxy exists, which
// is after this server has told it its port.
globalThis.fetch = async (input) => {
  const url = input instanceof Request ? input.url : String(input);
  if (url !== jwksURL) throw new Error(`sandbox-proxy.mjs: refusing a fetch of ${new URL(url).origin}`);
  const jwks = readFileSync(process.env.JWKS_FILE, "utf8");
  return new Response(jwks, { status: 200, headers: { "content-type": "application/json" } });
};

const proxyModule = path.join(process.env.OFFICIAL_NODE_MODULES, "@vercel", "sandbox", "dist", "proxy.js");
const { defineSandboxProxy } = await import(pathToFileURL(proxyModule).href);

const handle = defineSandboxProxy(
  async (request, meta) => {
    const body = await request.text();
    return Response.json({
      meta,
      url: request.url,
      method: request.method,
      headers: Object.fromEntries(request.headers),
      body,
    });
  },
  (_request, error) => {
    console.error(`refused: ${error.message}`);
    return new Response("Forbidden", { status: 403 });
  },
);

// toRequest is what a Node adapter (or a platform such as Vercel's) does:
// the request's own URL is https://<Host><path>.
function toRequest(req) {
  const headers = new Headers();
  for (const [k, v] of Object.entries(req.headers)) {
    if (typeof v === "string") headers.set(k, v);
  }
  const hasBody = req.method !== "GET" && req.method !== "HEAD";
  return new Request(`https://${req.headers.host}${req.url}`, {
    method: req.method,
    headers,
    body: hasBody ? Readable.toWeb(req) : undefined,
    duplex: "half",
  });
}

const server = https.createServer(
  { cert: readFileSync(process.env.TLS_CERT), key: readFileSync(process.env.TLS_KEY) },
  async (req, res) => {
    try {
      const response = await handle(toRequest(req));
      res.writeHead(response.status, Object.fromEntries(response.headers));
      res.end(Buffer.from(await response.arrayBuffer()));
    } catch (err) {
      console.error(`handler failed: ${err.message}`);
      res.writeHead(500).end();
    }
  },
);
server.listen(0, "127.0.0.1", () => console.log(`listening ${server.address().port}`));
