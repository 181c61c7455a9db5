// How a program without a kubeconfig file (a serverless function) reaches the
// API server: a bearer token, the server's URL and its CA. docs/clients.md
// says where the token comes from (a ServiceAccount token from the
// TokenRequest API, or the platform's OIDC token that the API server's JWT
// authenticator trusts).
import { KubeConfig } from '@kubernetes/client-node';
import type { User } from '@kubernetes/client-node';

/**
 * Returns the current bearer token, e.g. `getVercelOidcToken` from
 * `@vercel/oidc`. It is called before every request, so it should be cheap
 * (return a cached token until shortly before it expires).
 */
export type TokenProvider = () => Promise<string>;

/** What kubeConfigForToken needs. */
export interface TokenAuth {
  /** The API server's URL, e.g. https://203.0.113.10:6443. */
  server: string;
  /**
   * The bearer token, or a function that returns the current one. It is sent
   * to the API server only; never log it.
   */
  token: string | TokenProvider;
  /**
   * The API server's CA certificate as a kubeconfig's
   * certificate-authority-data holds it (PEM, base64-encoded). Omit it only
   * when the server's certificate is signed by a publicly trusted CA.
   */
  caData?: string;
  /** The namespace helpers use when none is given (default "default"). */
  namespace?: string;
}

// The name of the kubeconfig auth provider that stands for a TokenProvider:
// client-node asks its authenticators for the Authorization header before
// each request, and ours asks the provider.
const PROVIDER = 'sandbox-controller-token-provider';

/**
 * A KubeConfig that authenticates with a bearer token.
 *
 * With a token string, build a new KubeConfig for each token (it is cheap):
 * tokens expire. With a TokenProvider, one KubeConfig serves for as long as
 * the provider does: it is called before every request (watches included),
 * so a short-lived token that rotates, such as a platform's OIDC token, is
 * always the current one. A provider that rejects, or resolves to an empty
 * string, fails the request with an Error that says so.
 */
export function kubeConfigForToken(auth: TokenAuth): KubeConfig {
  // As kubectl does, accept the URL with a trailing slash: client-node
  // appends request paths to it as they are.
  const server = auth.server.replace(/\/+$/, '');
  const user: User =
    typeof auth.token === 'function'
      ? { name: 'token', authProvider: { name: PROVIDER, config: {} } }
      : { name: 'token', token: auth.token };
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'sandbox-controller', server, caData: auth.caData, skipTLSVerify: false }],
    users: [user],
    contexts: [{ name: 'sandbox-controller', cluster: 'sandbox-controller', user: 'token', namespace: auth.namespace }],
    currentContext: 'sandbox-controller',
  });
  if (typeof auth.token === 'function') kc.addAuthenticator(providerAuthenticator(auth.token));
  return kc;
}

function providerAuthenticator(provider: TokenProvider) {
  return {
    isAuthProvider: (u: User) => u.authProvider?.name === PROVIDER,
    async applyAuthentication(_u: User, opts: { headers?: unknown }): Promise<void> {
      let token: unknown;
      try {
        token = await provider();
      } catch (err) {
        throw new Error(`the token provider failed: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      }
      if (typeof token !== 'string' || token === '') {
        throw new Error('the token provider returned no token (want a non-empty string)');
      }
      // client-node made opts.headers an object before asking us.
      (opts.headers as Record<string, string>).Authorization = `Bearer ${token}`;
    },
  };
}
