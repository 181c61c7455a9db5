package main

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// This file maps a verified sandbox identity to its Sandbox object and the
// conversation it belongs to.

// LabelConversation is the label Junior sets on each Sandbox it creates:
// the conversation (tenant) whose credentials the sandbox's requests get.
// Only whoever creates Sandboxes can set it, never code inside the sandbox,
// which has no access to the Kubernetes API.
const LabelConversation = "junior.sentry.io/conversation"

// indexVercelName indexes Sandboxes by status.vercelName: the token's
// sandbox_name is the Vercel sandbox's name, which the operator records
// there with the result of its create.
const indexVercelName = "status.vercelName"

var (
	errNoSandbox      = errors.New("no Sandbox has this Vercel sandbox name")
	errAmbiguous      = errors.New("several Sandboxes have this Vercel sandbox name")
	errNoConversation = errors.New("the Sandbox has no " + LabelConversation + " label")
)

// sandboxIndex finds Sandboxes by Vercel name in one namespace.
//
// Cost: the cache keeps one watch on the namespace's labelled Sandboxes and
// holds each in memory, trimmed to its metadata and status.vercelName
// (transform below): about a kilobyte per Sandbox, and a lookup is a map
// read, so no request costs an API call. A miss falls back to one List of
// the namespace's labelled Sandboxes from the API server: a Sandbox created
// moments ago may not have reached the cache yet. Only requests with a valid
// token from the configured team and project reach the lookup, so a miss
// is rare and cannot be caused by a forged token.
type sandboxIndex struct {
	cache     cache.Cache
	live      client.Reader
	namespace string
}

// newSandboxIndex starts the cache; it returns when the cache has synced.
func newSandboxIndex(ctx context.Context, cfg *rest.Config, namespace string) (*sandboxIndex, error) {
	scheme := runtime.NewScheme()
	if err := sandboxv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	sel := labels.NewSelector()
	req, err := labels.NewRequirement(LabelConversation, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	sel = sel.Add(*req)
	c, err := cache.New(cfg, cache.Options{
		Scheme:            scheme,
		DefaultNamespaces: map[string]cache.Config{namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&sandboxv1.Sandbox{}: {Label: sel, Transform: trimSandbox},
		},
	})
	if err != nil {
		return nil, err
	}
	if err := c.IndexField(ctx, &sandboxv1.Sandbox{}, indexVercelName, func(o client.Object) []string {
		if n := o.(*sandboxv1.Sandbox).Status.VercelName; n != "" {
			return []string{n}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	live, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, errors.New("the Sandbox cache did not sync")
	}
	return &sandboxIndex{cache: c, live: live, namespace: namespace}, nil
}

// trimSandbox keeps what the broker reads, so the cache stays small.
func trimSandbox(o any) (any, error) {
	s, ok := o.(*sandboxv1.Sandbox)
	if !ok {
		return o, nil
	}
	return &sandboxv1.Sandbox{
		TypeMeta: s.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, UID: s.UID, Labels: s.Labels,
			ResourceVersion: s.ResourceVersion, DeletionTimestamp: s.DeletionTimestamp},
		Status: sandboxv1.SandboxStatus{VercelName: s.Status.VercelName},
	}, nil
}

// find returns the Sandbox whose Vercel sandbox is vercelName and the
// conversation its label names.
func (x *sandboxIndex) find(ctx context.Context, vercelName string) (*sandboxv1.Sandbox, string, error) {
	var list sandboxv1.SandboxList
	if err := x.cache.List(ctx, &list, client.InNamespace(x.namespace), client.MatchingFields{indexVercelName: vercelName}); err != nil {
		return nil, "", fmt.Errorf("list cached Sandboxes: %w", err)
	}
	matches := list.Items
	if len(matches) == 0 {
		var err error
		if matches, err = x.liveFind(ctx, vercelName); err != nil {
			return nil, "", err
		}
	}
	switch {
	case len(matches) == 0:
		return nil, "", errNoSandbox
	case len(matches) > 1:
		return nil, "", errAmbiguous
	}
	sbx := &matches[0]
	conv := sbx.Labels[LabelConversation]
	if conv == "" {
		return sbx, "", errNoConversation
	}
	return sbx, conv, nil
}

// liveFind lists from the API server: custom resources cannot be selected
// by a status field there, so the labelled Sandboxes are filtered here.
func (x *sandboxIndex) liveFind(ctx context.Context, vercelName string) ([]sandboxv1.Sandbox, error) {
	var list sandboxv1.SandboxList
	if err := x.live.List(ctx, &list, client.InNamespace(x.namespace), client.HasLabels{LabelConversation}); err != nil {
		return nil, fmt.Errorf("list Sandboxes: %w", err)
	}
	var out []sandboxv1.Sandbox
	for _, s := range list.Items {
		if s.Status.VercelName == vercelName {
			out = append(out, s)
		}
	}
	return out, nil
}
