// A serverless function as docs/clients.md describes it, run by
// test/clients/oidc_test.go: no kubeconfig, only the API server's URL and CA,
// and the platform's OIDC token, which it fetches per request through a
// TokenProvider. Here the local issuer's mint endpoint plays the platform
// (OIDC_MINT_URL; its CA is in NODE_EXTRA_CA_CERTS). It creates and reads a
// Sandbox in its namespace, is forbidden in another, and prints one JSON line
// with how many tokens it fetched and how many were distinct.
import assert from 'node:assert/strict';

import { KubernetesApiError, createSandbox, getSandbox, kubeConfigForToken } from '../../../clients/typescript/dist/index.js';

const { SANDBOX_TEST_SERVER, SANDBOX_TEST_CA_DATA, OIDC_MINT_URL, OIDC_ADMIN_TOKEN, OIDC_FUNCTION, NAMESPACE, OTHER_NAMESPACE } =
  process.env;
for (const [k, v] of Object.entries({ SANDBOX_TEST_SERVER, OIDC_MINT_URL, OIDC_ADMIN_TOKEN, OIDC_FUNCTION, NAMESPACE, OTHER_NAMESPACE })) {
  if (!v) throw new Error(`${k} is not set: run this through go test ./test/clients/ -run TestOIDC`);
}

const tokens = [];
async function currentToken() {
  const res = await fetch(OIDC_MINT_URL, {
    method: 'POST',
    headers: { Authorization: `Bearer ${OIDC_ADMIN_TOKEN}`, 'Content-Type': 'application/json' },
    body: OIDC_FUNCTION, // {"team": …, "project": …, "environment": …}
  });
  if (!res.ok) throw new Error(`mint: HTTP ${res.status}`);
  const { token } = await res.json();
  tokens.push(token);
  return token;
}

const kc = kubeConfigForToken({ server: SANDBOX_TEST_SERVER, caData: SANDBOX_TEST_CA_DATA, namespace: NAMESPACE, token: currentToken });
const name = 'oidc-function';
const spec = { source: { runtime: 'node24' }, timeoutSeconds: 600 };

const created = await createSandbox(kc, { metadata: { name }, spec });
assert.equal(created.metadata?.namespace, NAMESPACE);
const got = await getSandbox(kc, NAMESPACE, name);
assert.equal(got.metadata?.uid, created.metadata?.uid);

let forbiddenUser;
await assert.rejects(createSandbox(kc, { metadata: { name }, spec }, OTHER_NAMESPACE), (err) => {
  assert.ok(err instanceof KubernetesApiError, `want KubernetesApiError, got ${err}`);
  forbiddenUser = /User "([^"]+)"/.exec(err.message)?.[1];
  assert.equal(err.code, 403);
  assert.match(err.message, new RegExp(`cannot create resource "sandboxes" .* in the namespace "${OTHER_NAMESPACE}"`));
  return true;
});

// Three requests, so three tokens, each fetched for its own request.
console.log(JSON.stringify({ requests: 3, calls: tokens.length, distinct: new Set(tokens).size, forbiddenUser }));
