// kubeConfigForToken with a TokenProvider asks it for a token before every
// request. The Go tests run this file with two tokens of the API server:
// SANDBOX_TEST_TOKEN, of an identity bound to the editor role in
// SANDBOX_TEST_NAMESPACE, and SANDBOX_TEST_UNBOUND_TOKEN, of one that is not
// bound there. test/clients/typescript_test.go gives ServiceAccount tokens,
// test/clients/oidc_test.go OIDC tokens of two functions. A provider that
// hands them out in turn shows each request used the token of its own call:
// the API server answers each as the identity of that token.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { KubernetesApiError, getSandbox, kubeConfigForToken } from '../src/index.js';

const namespace = process.env.SANDBOX_TEST_NAMESPACE || 'default';

function env() {
  const { SANDBOX_TEST_SERVER: server, SANDBOX_TEST_CA_DATA: caData } = process.env;
  const { SANDBOX_TEST_TOKEN: bound, SANDBOX_TEST_UNBOUND_TOKEN: unbound } = process.env;
  if (!server || !bound || !unbound) return undefined;
  return { server, caData, bound, unbound };
}

const skipped = 'SANDBOX_TEST_SERVER, SANDBOX_TEST_TOKEN and SANDBOX_TEST_UNBOUND_TOKEN are not set (the Go tests set them)';

test('a token provider is called on every request, and its token is the one sent', async (t) => {
  const e = env();
  if (!e) {
    t.skip(skipped);
    return;
  }
  const handedOut = [e.bound, e.unbound, e.bound];
  let calls = 0;
  const kc = kubeConfigForToken({
    server: e.server,
    caData: e.caData,
    namespace,
    token: async () => handedOut[calls++],
  });
  const name = 'ts-token-provider-absent';
  // The bound identity may get Sandboxes: this one does not exist.
  await assert.rejects(getSandbox(kc, namespace, name), (err) => {
    assert.ok(err instanceof KubernetesApiError, `want KubernetesApiError, got ${err}`);
    assert.equal(err.code, 404);
    return true;
  });
  assert.equal(calls, 1);
  // The second token's identity is not bound: the same request is forbidden.
  await assert.rejects(getSandbox(kc, namespace, name), (err) => {
    assert.ok(err instanceof KubernetesApiError, `want KubernetesApiError, got ${err}`);
    assert.equal(err.code, 403);
    assert.match(err.message, /cannot get resource "sandboxes"/);
    return true;
  });
  assert.equal(calls, 2);
  // And the third is the first one again, not a cached second.
  await assert.rejects(getSandbox(kc, namespace, name), (err) => {
    assert.ok(err instanceof KubernetesApiError);
    assert.equal(err.code, 404);
    return true;
  });
  assert.equal(calls, 3);
});

test('a token provider that fails fails the request with its reason', async (t) => {
  const e = env();
  if (!e) {
    t.skip(skipped);
    return;
  }
  const failing = kubeConfigForToken({
    server: e.server,
    caData: e.caData,
    token: async () => {
      throw new Error('the platform gave no token');
    },
  });
  await assert.rejects(getSandbox(failing, namespace, 'any'), /the token provider failed: the platform gave no token/);
  const empty = kubeConfigForToken({ server: e.server, caData: e.caData, token: async () => '' });
  await assert.rejects(getSandbox(empty, namespace, 'any'), /the token provider returned no token/);
});
