package controllers

// Who owns a remote object. Every Vercel sandbox the operator creates or
// adopts carries owner tags: the manager, the cluster (--cluster-id) and the
// UID of the object it belongs to. Before deleting or adopting a sandbox the
// controllers read it and check those tags; names come from the object
// (derived, spec.source.adopt, or a claimed member's derived name), never from status alone, because whoever
// may patch status could otherwise aim a finalizer at any sandbox of the
// Vercel project. Vercel snapshots take no tags: one is deleted only when a
// read shows it was taken of a sandbox the operator owns (snapshotIsOurs).

import (
	"fmt"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// Owner tags. Vercel allows 5 tags per sandbox (values up to 256
// characters): a Sandbox's sandbox uses 3, a builder 4 (tagContentHash), and
// an adopted sandbox keeps at most 2 tags of its own.
const (
	tagManagedBy      = "managed-by"
	tagManagedByValue = "sandbox-controller"
	tagOwnerUID       = "k8s-uid"
	tagClusterID      = "k8s-cluster"
)

// maxVercelTags is Vercel's limit on tags per sandbox.
const maxVercelTags = 5

// ownerTags are the tags naming the object uid of cluster as a sandbox's owner.
func ownerTags(cluster string, uid types.UID) map[string]string {
	return map[string]string{tagManagedBy: tagManagedByValue, tagClusterID: cluster, tagOwnerUID: string(uid)}
}

// ownership is what a remote sandbox's tags say about who owns it, seen from
// one object of one cluster.
type ownership int

const (
	// unowned: no owner tags at all (made outside the operator).
	unowned ownership = iota
	// ownedBySelf: created or adopted for this object by this cluster.
	ownedBySelf
	// ownedByPeer: another object of this cluster owns it.
	ownedByPeer
	// ownedElsewhere: another cluster, or another manager, owns it.
	ownedElsewhere
)

// ownerOf classifies tags for object uid of cluster. A sandbox tagged before
// clusters were tagged (no cluster tag) counts as this cluster's when its
// UID is this object's: UIDs are unique across clusters.
func ownerOf(tags map[string]string, cluster string, uid types.UID) ownership {
	managed, hasUID, hasCluster := tags[tagManagedBy], tags[tagOwnerUID], tags[tagClusterID]
	switch {
	case managed == "" && hasUID == "" && hasCluster == "":
		return unowned
	case managed != tagManagedByValue:
		return ownedElsewhere
	case hasCluster == "" && hasUID == string(uid) && uid != "":
		return ownedBySelf
	case hasCluster != cluster:
		return ownedElsewhere
	case hasUID == string(uid) && uid != "":
		return ownedBySelf
	}
	return ownedByPeer
}

// describeOwner says in words who owns a sandbox with tags, for messages.
func describeOwner(tags map[string]string, cluster string) string {
	switch {
	case tags[tagManagedBy] != tagManagedByValue:
		return fmt.Sprintf("managed by %q", tags[tagManagedBy])
	case tags[tagClusterID] != cluster:
		return fmt.Sprintf("owned by cluster %q", tags[tagClusterID])
	}
	return fmt.Sprintf("owned by the object with UID %s", tags[tagOwnerUID])
}

// adoptionTags are the tags of an adopted sandbox: its own tags, less any
// stale owner tags, plus ours. It fails when they would exceed Vercel's limit.
func adoptionTags(existing map[string]string, cluster string, uid types.UID) (map[string]string, error) {
	tags := maps.Clone(existing)
	if tags == nil {
		tags = map[string]string{}
	}
	maps.Copy(tags, ownerTags(cluster, uid))
	if len(tags) > maxVercelTags {
		own := slices.Sorted(maps.Keys(existing))
		return nil, fmt.Errorf("it has %d tags (%v) and adoption adds 3 owner tags, above Vercel's limit of %d: remove some of its tags first", len(existing), own, maxVercelTags)
	}
	return tags, nil
}

// releasedTags are the tags of a sandbox left in Vercel (deletionPolicy
// Retain): without the owner tags, so that it can be adopted again.
func releasedTags(tags map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range tags {
		switch k {
		case tagManagedBy, tagOwnerUID, tagClusterID, tagContentHash:
		default:
			out[k] = v
		}
	}
	return out
}

// remoteName is the Vercel sandbox a Sandbox stands for: the one it adopts,
// else the name derived from its namespace, name and UID; after recreations
// (status.recreations, recorded before each create) that name with "-r<n>".
// status.vercelName only records it.
func remoteName(sbx *sandboxv1.Sandbox) string {
	base := vercelName(sbx.Namespace, sbx.Name, sbx.UID)
	if a := sbx.Spec.Source.Adopt; a != nil {
		base = a.Name
	}
	if c := sbx.Status.Claim; c != nil && sbx.Spec.PoolRef != nil {
		// A claim's sandbox is the member's, named as the member derived
		// it. Status records which member; whoever may write status can
		// only aim this object at a sandbox it then refuses, because every
		// action first checks the owner tags are this object's, and the
		// hand-over re-tags only a sandbox tagged for a member marked for
		// this object (sandbox_claim.go).
		base = vercelName(sbx.Namespace, c.Member, types.UID(c.MemberUID))
	}
	return recreatedName(base, sbx.Status.Recreations)
}
