// How a program without a kubeconfig file (a serverless function) reaches the
// API server: a bearer token, the server's URL and its CA. docs/clients.md
// says where the token comes from (a ServiceAccount token from the
// TokenRequest API, or the platform's OIDC token that the API server's JWT
// authenticator trusts).
import { KubeConfig } from '@kubernetes/client-node';

/** What kubeConfigForToken needs. */
export interface TokenAuth {
  /** The API server's URL, e.g. https://203.0.113.10:6443. */
  server: string;
  /** The bearer token. It is sent to the API server only; never log it. */
  token: string;
  /**
   * The API server's CA certificate as a kubeconfig's
   * certificate-authority-data holds it (PEM, base64-encoded). Omit it only
   * when the server's certificate is signed by a publicly trusted CA.
   */
  caData?: string;
  /** The namespace helpers use when none is given (default "default"). */
  namespace?: string;
}

/**
 * A KubeConfig that authenticates with a bearer token. Tokens expire: build
 * a new KubeConfig for each token (it is cheap), e.g. per request with a
 * platform OIDC token.
 */
export function kubeConfigForToken(auth: TokenAuth): KubeConfig {
  // As kubectl does, accept the URL with a trailing slash: client-node
  // appends request paths to it as they are.
  const server = auth.server.replace(/\/+$/, '');
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'sandbox-controller', server, caData: auth.caData, skipTLSVerify: false }],
    users: [{ name: 'token', token: auth.token }],
    contexts: [{ name: 'sandbox-controller', cluster: 'sandbox-controller', user: 'token', namespace: auth.namespace }],
    currentContext: 'sandbox-controller',
  });
  return kc;
}
