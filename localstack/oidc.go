package localstack

import (
	"context"
	"errors"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/getsentry/sandbox-controller/localstack/oidcissuer"
)

// startOIDCIssuer starts the issuer before the API server, which is given
// the returned authentication configuration: the API server fetches the
// issuers' discovery documents as it starts.
func (s *Stack) startOIDCIssuer(trusts []oidcissuer.Trust) ([]byte, error) {
	if len(trusts) == 0 {
		return nil, nil
	}
	var err error
	if s.OIDCIssuer, err = oidcissuer.Start(oidcissuer.Options{}); err != nil {
		return nil, err
	}
	return s.OIDCIssuer.AuthenticationConfig(trusts...)
}

// waitOIDCReady returns once the API server authenticates a token of the
// first trusted function. Its JWT authenticator initialises in the
// background and refuses every token (401) until it has fetched the
// issuer's keys: without this wait a client's first request could fail for
// no reason of its own.
func (s *Stack) waitOIDCReady(ctx context.Context, trusts []oidcissuer.Trust) error {
	if len(trusts) == 0 {
		return nil
	}
	team, fn := trusts[0].Team, trusts[0].Functions[0]
	tok, err := s.OIDCIssuer.Mint(oidcissuer.Token{Team: team, Project: fn.Project, Environment: fn.Environment})
	if err != nil {
		return err
	}
	cfg := &rest.Config{Host: s.Config.Host, BearerToken: tok, TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	want := oidcissuer.User(team, fn)
	var last error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var r *authenticationv1.SelfSubjectReview
		r, last = cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if last != nil {
			return false, nil
		}
		if got := r.Status.UserInfo.Username; got != want {
			return false, fmt.Errorf("the API server maps the OIDC token to user %q, want %q", got, want)
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the API server does not accept the local OIDC issuer's tokens: %w", errors.Join(err, last))
	}
	return nil
}
