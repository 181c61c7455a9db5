package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

// Two tenants, as docs/sandboxclass.md describes them: each an emulated
// Vercel team with its own token and project, a SandboxClass whose Secret
// holds them, and a namespace the class allows.
type devTenant struct {
	class, team, project, token string
}

// classSecretsNamespace holds the classes' Secrets (the manager's namespace
// in a real install).
const classSecretsNamespace = "sandbox-system"

// tenantLabel is the namespace label the dev classes select on.
const tenantLabel = "sandbox.sentry.io/tenant"

func newDevTenants() ([]devTenant, error) {
	var out []devTenant
	for _, n := range []string{"a", "b"} {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		out = append(out, devTenant{class: "team-" + n, team: "team_" + n, project: "prj_" + n, token: "emu_" + n + "_" + hex.EncodeToString(b)})
	}
	return out, nil
}

// emulatorCredentials are the tenants' credentials for the emulator.
func emulatorCredentials(ts []devTenant) []emulator.Credential {
	var out []emulator.Credential
	for _, t := range ts {
		out = append(out, emulator.Credential{Token: t.token, Teams: []string{t.team}, Projects: []string{t.project}})
	}
	return out
}

// createTenants creates, for each tenant, the Secret, the SandboxClass
// (allowing namespaces labelled sandbox.sentry.io/tenant=<class>) and one
// such namespace, named after the class.
func createTenants(ctx context.Context, c client.Client, ts []devTenant) error {
	create := func(o client.Object) error {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
		}
		return nil
	}
	if err := create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: classSecretsNamespace}}); err != nil {
		return err
	}
	for _, t := range ts {
		objs := []client.Object{
			&corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: classSecretsNamespace, Name: t.class + "-vercel"},
				Data: map[string][]byte{
					sandboxv1.ClassSecretTokenKey:     []byte(t.token),
					sandboxv1.ClassSecretTeamIDKey:    []byte(t.team),
					sandboxv1.ClassSecretProjectIDKey: []byte(t.project),
				},
			},
			&sandboxv1.SandboxClass{
				ObjectMeta: metav1.ObjectMeta{Name: t.class},
				Spec: sandboxv1.SandboxClassSpec{
					CredentialsSecretRef: sandboxv1.ClassSecretReference{Namespace: classSecretsNamespace, Name: t.class + "-vercel"},
					NamespaceSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{tenantLabel: t.class}},
				},
			},
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: t.class, Labels: map[string]string{tenantLabel: t.class}}},
		}
		for _, o := range objs {
			if err := create(o); err != nil {
				return err
			}
		}
	}
	return nil
}
