// What the live tests share: the editor's KubeConfig, the namespace, and a
// poll for states no helper waits for. The Go test test/clients/typescript_test.go
// starts the API server, the Vercel emulator and the manager and sets the
// environment (see sandbox.test.ts).
import assert from 'node:assert/strict';

import { KubeConfig } from '@kubernetes/client-node';

import { kubeConfigForToken } from '../src/index.js';

export const namespace = process.env.SANDBOX_TEST_NAMESPACE || 'default';

// The editor's KubeConfig: from a token as a serverless function builds it
// (docs/clients.md), or from KUBECONFIG.
export function kubeConfig(): KubeConfig {
  const { SANDBOX_TEST_SERVER: server, SANDBOX_TEST_CA_DATA: caData, SANDBOX_TEST_TOKEN: token, KUBECONFIG } = process.env;
  if (server && token) return kubeConfigForToken({ server, caData, token, namespace });
  if (!KUBECONFIG) {
    throw new Error(
      'Neither SANDBOX_TEST_SERVER and SANDBOX_TEST_TOKEN nor KUBECONFIG is set: run these tests through ' +
        '`go test ./test/clients/ -run TestTypeScript` (make test does), or against `make dev` with KUBECONFIG=$PWD/bin/dev/kubeconfig',
    );
  }
  const kc = new KubeConfig();
  kc.loadFromFile(KUBECONFIG);
  return kc;
}

export async function eventually<T>(what: string, timeoutMs: number, get: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await get();
    if (value !== undefined) return value;
    if (Date.now() > deadline) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
