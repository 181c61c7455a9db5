// Loaded with `node --import` into Vercel's official `sandbox` CLI and SDK by
// the tests in this directory. Neither has a base-URL setting (the SDK's API
// client always uses https://vercel.com/api), so this sends their requests
// for Vercel's API to the emulator named by SANDBOX_EMULATOR_URL instead, and
// the CLI's health check of an interactive session (always
// https://<host of the session's URL>/health) to the emulator's /health.
// Everything else the programs do runs unchanged. Any other request to a
// Vercel host fails, so nothing reaches the real Vercel.
const target = process.env.SANDBOX_EMULATOR_URL;
if (!target) throw new Error("vercel-to-emulator.mjs: SANDBOX_EMULATOR_URL is not set");
const emulator = new URL(target);
const realFetch = globalThis.fetch;

function redirect(url) {
  const u = new URL(url);
  if (u.protocol === "https:" && u.hostname === "vercel.com" && u.pathname.startsWith("/api/")) {
    return new URL(u.pathname.slice("/api".length) + u.search, emulator).toString();
  }
  if (u.protocol === "https:" && u.hostname === emulator.hostname && u.pathname === "/health") {
    return new URL("/health", emulator).toString();
  }
  if (u.hostname === "vercel.com" || u.hostname.endsWith(".vercel.com") || u.hostname.endsWith(".vercel.run") || u.hostname.endsWith(".vercel.sh")) {
    throw new Error(`vercel-to-emulator.mjs: refusing a request to ${u.origin}`);
  }
  return url;
}

globalThis.fetch = (input, init) => {
  if (input instanceof Request) {
    return realFetch(new Request(redirect(input.url), input), init);
  }
  return realFetch(redirect(input instanceof URL ? input.toString() : input), init);
};
