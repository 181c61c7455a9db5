package sandboxclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// RewindTarget is the snapshot a Rewind goes back to: exactly one of
// SnapshotName (a SandboxSnapshot in the Sandbox's namespace) or SnapshotID (a
// Vercel snapshot id of the Sandbox, as status.history lists them; it needs
// the RBAC verb use on vercelsnapshots).
type RewindTarget struct {
	SnapshotName string
	SnapshotID   string
}

// History returns a persistent Sandbox's snapshot lineage (status.history):
// the latest snapshots of its Vercel sandbox, newest first, the one its next
// session resumes from marked Current.
func (c *Client) History(ctx context.Context, namespace, name string) ([]sandboxv1.SnapshotHistoryEntry, error) {
	s, err := c.sandboxes(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get Sandbox %s/%s: %w", namespace, name, err)
	}
	return s.Status.History, nil
}

// Rewind sets spec.rewind with a new token, so the Sandbox goes back to the
// target snapshot even when it went there before. It returns the Sandbox and
// the token; WaitRewound waits for the controller to apply it.
func (c *Client) Rewind(ctx context.Context, namespace, name string, to RewindTarget) (*sandboxv1.Sandbox, string, error) {
	if (to.SnapshotName == "") == (to.SnapshotID == "") {
		return nil, "", errors.New("rewind: name exactly one of a SandboxSnapshot or a Vercel snapshot id")
	}
	token := strconv.FormatInt(time.Now().UnixNano(), 36)
	rw := map[string]any{"token": token, "snapshotRef": nil, "snapshotID": nil}
	if to.SnapshotName != "" {
		rw["snapshotRef"] = map[string]string{"name": to.SnapshotName}
	} else {
		rw["snapshotID"] = to.SnapshotID
	}
	// A merge patch: null removes the field of a previous rewind that this
	// one does not set.
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"rewind": rw}})
	s, err := c.sandboxes(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, "", fmt.Errorf("set Sandbox %s/%s spec.rewind: %w", namespace, name, err)
	}
	return s, token, nil
}

// WaitRewound watches a Sandbox until the controller has applied the rewind
// of token (status.rewind Rewound), and returns it. It fails with a
// *ConditionError when the rewind failed (the message names the field and
// why: an unknown, expired or foreign snapshot).
func (c *Client) WaitRewound(ctx context.Context, namespace, name, token string) (*sandboxv1.Sandbox, error) {
	return watchUntil(ctx, c.sandboxKind(), namespace, name, false, func(s *sandboxv1.Sandbox) (bool, error) {
		rw := s.Status.Rewind
		if rw == nil || rw.Token != token {
			return false, nil
		}
		switch rw.State {
		case sandboxv1.RewindRewound:
			return true, nil
		case sandboxv1.RewindFailed:
			return false, &ConditionError{Kind: "Sandbox", Namespace: s.Namespace, Name: s.Name, Phase: string(s.Status.Phase),
				Type: sandboxv1.ConditionReady, Reason: sandboxv1.ReasonRewindFailed, Message: rw.Message}
		}
		return false, nil
	})
}
