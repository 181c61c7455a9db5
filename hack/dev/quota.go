package main

import (
	"context"
	"fmt"
	"os"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// The sample SandboxQuota `make dev` creates, so that the dev namespace runs
// under a budget as a team's would (docs/sandboxquota.md).
const (
	sampleQuotaFile      = "config/samples/sandbox_v1alpha1_sandboxquota.yaml"
	sampleQuotaNamespace = "default"
	sampleQuotaName      = "team-budget"
)

// createSampleQuota creates the sample quota in the default namespace; one
// left by an earlier run (a kept state dir) is kept as it is.
func createSampleQuota(ctx context.Context, c client.Client) error {
	data, err := os.ReadFile(sampleQuotaFile)
	if err != nil {
		return fmt.Errorf("read the sample quota: %w", err)
	}
	q := &sandboxv1.SandboxQuota{}
	if err := yaml.UnmarshalStrict(data, q); err != nil {
		return fmt.Errorf("parse %s: %w", sampleQuotaFile, err)
	}
	q.Namespace = sampleQuotaNamespace
	// As `kubectl create --save-config` would: the annotation kubectl apply
	// diffs against, so that applying config/samples/ (which holds the same
	// file) updates the quota without warning that it was not applied.
	applied, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("convert %s: %w", sampleQuotaFile, err)
	}
	q.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": string(applied) + "\n"}
	if err := c.Create(ctx, q); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create SandboxQuota %s/%s: %w", q.Namespace, q.Name, err)
	}
	return nil
}
