package main

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/getsentry/sandbox-controller/localstack"
	"github.com/getsentry/sandbox-controller/localstack/oidcissuer"
)

// defaultOIDCTrust is docs/clients.md's example: team acme's project junior,
// production deployments only.
const defaultOIDCTrust = "acme/junior/production"

// oidcTrusts is what --oidc-trust says, nil without --oidc.
func (c config) oidcTrusts() ([]oidcissuer.Trust, error) {
	if !c.oidc {
		return nil, nil
	}
	return parseOIDCTrust(c.oidcTrust)
}

// announceOIDC writes the files a user of the issuer needs (removed again
// on exit) and prints how to mint a token; nothing without trusts.
func announceOIDC(stack *localstack.Stack, trusts []oidcissuer.Trust, stateDir string, cleanups *[]func()) error {
	if len(trusts) == 0 {
		return nil
	}
	files := newOIDCFiles(stateDir)
	*cleanups = append(*cleanups, files.remove)
	banner, err := writeOIDC(stack, trusts, files)
	if err != nil {
		return err
	}
	fmt.Print(banner)
	return nil
}

// parseOIDCTrust reads --oidc-trust: comma-separated team/project/environment
// triples, grouped by team in the order given.
func parseOIDCTrust(s string) ([]oidcissuer.Trust, error) {
	var trusts []oidcissuer.Trust
	index := map[string]int{}
	for _, item := range strings.Split(s, ",") {
		parts := strings.Split(strings.TrimSpace(item), "/")
		if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
			return nil, fmt.Errorf("--oidc-trust: %q is not team/project/environment (e.g. %s)", item, defaultOIDCTrust)
		}
		i, ok := index[parts[0]]
		if !ok {
			i = len(trusts)
			index[parts[0]] = i
			trusts = append(trusts, oidcissuer.Trust{Team: parts[0]})
		}
		trusts[i].Functions = append(trusts[i].Functions, oidcissuer.Function{Project: parts[1], Environment: parts[2]})
	}
	return trusts, nil
}

// oidcFiles are what --oidc writes into the state directory.
type oidcFiles struct{ env, issuerCA, apiServerCA string }

func newOIDCFiles(stateDir string) oidcFiles {
	return oidcFiles{
		env:         filepath.Join(stateDir, "oidc.env"),
		issuerCA:    filepath.Join(stateDir, "oidc-issuer-ca.crt"),
		apiServerCA: filepath.Join(stateDir, "apiserver-ca.crt"),
	}
}

func (f oidcFiles) remove() {
	for _, p := range []string{f.env, f.issuerCA, f.apiServerCA} {
		_ = os.Remove(p)
	}
}

// writeOIDC writes the issuer's and the API server's CAs and an env file
// (0600: it holds the mint endpoint's admin token) with what a function
// needs, and returns the banner lines that say how to mint and use a token.
func writeOIDC(stack *localstack.Stack, trusts []oidcissuer.Trust, f oidcFiles) (string, error) {
	iss := stack.OIDCIssuer
	if err := os.WriteFile(f.issuerCA, iss.CAPEM(), 0o600); err != nil {
		return "", err
	}
	if err := os.WriteFile(f.apiServerCA, stack.Config.CAData, 0o600); err != nil {
		return "", err
	}
	env := fmt.Sprintf("export SANDBOX_API_SERVER=%s\nexport SANDBOX_API_CA_DATA=%s\nexport SANDBOX_OIDC_MINT_URL=%s\nexport SANDBOX_OIDC_ADMIN_TOKEN=%s\nexport SANDBOX_OIDC_CA=%s\n",
		strings.TrimRight(stack.Config.Host, "/"), base64.StdEncoding.EncodeToString(stack.Config.CAData), iss.MintURL(), iss.AdminToken(), f.issuerCA)
	if err := os.WriteFile(f.env, []byte(env), 0o600); err != nil {
		return "", err
	}
	team, fn := trusts[0].Team, trusts[0].Functions[0]
	var trusted []string
	for _, t := range trusts {
		for _, fn := range t.Functions {
			trusted = append(trusted, oidcissuer.User(t.Team, fn))
		}
	}
	return fmt.Sprintf(`OIDC: the API server trusts the local issuer %s (team %s, audience %s) for the users
  %s
Bind one as docs/clients.md shows, then mint a token (valid 1h) and use it:

  source %s
  TOKEN=$(curl -sf --cacert "$SANDBOX_OIDC_CA" -H "Authorization: Bearer $SANDBOX_OIDC_ADMIN_TOKEN" -H "Accept: text/plain" \
    -d '{"team":"%s","project":"%s","environment":"%s"}' "$SANDBOX_OIDC_MINT_URL")
  kubectl --kubeconfig=/dev/null --server="$SANDBOX_API_SERVER" --certificate-authority=%s --token="$TOKEN" auth whoami
`, iss.IssuerURL(team), team, oidcissuer.Audience(team), strings.Join(trusted, "\n  "), f.env, team, fn.Project, fn.Environment, f.apiServerCA), nil
}
