package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// Names the controllers derive, for specs that put something in their way.
var (
	BuilderName = builderName
	VercelName  = vercelName
	OwnerTags   = ownerTags
)

// MarkMember runs one claimant's mark of a pool member, as the claim does,
// for specs that race two claimants on the same view of a member.
func MarkMember(c client.Client, claimantName string, claimantUID types.UID, m *sandboxv1.Sandbox, snapshotID string) (bool, error) {
	r := &SandboxReconciler{Client: c, APIReader: c}
	claimant := &sandboxv1.Sandbox{}
	claimant.Name, claimant.UID = claimantName, claimantUID
	return r.tryMark(context.Background(), claimant, m, snapshotID, sandboxv1.SandboxStateRunning)
}
