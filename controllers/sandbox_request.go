package controllers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// sandboxConfig is a Sandbox's spec translated to Vercel's terms, with Secret
// values resolved. secrets lists those values so they can be scrubbed from
// anything the controller reports.
type sandboxConfig struct {
	resources     *vercel.Resources
	ports         []int64
	timeoutMs     int64
	env           map[string]string
	networkPolicy *vercel.NetworkPolicy
	secrets       []string
	placement     placement
	retention     *retention
}

// placement is where a sandbox's next session runs: "" and nil leave
// Vercel's default region (iad1) and no failover.
type placement struct {
	region   string
	failover []string
}

// retention is what a persistent sandbox sends about its snapshots,
// always explicitly (spec.snapshotRetention with the operator's defaults):
// Vercel's defaults have changed before.
type retention struct {
	keepLast           *vercel.KeepLastSnapshots
	snapshotExpiration *int64
}

// placementOf translates spec.region and spec.failoverRegions.
func placementOf(spec *sandboxv1.SandboxSpec) placement {
	p := placement{region: string(spec.Region)}
	for _, r := range spec.FailoverRegions {
		p.failover = append(p.failover, string(r))
	}
	return p
}

// retentionOf translates spec.snapshotRetention, with the operator's
// defaults, for a persistent spec; nil for a non-persistent one (it takes
// no snapshot of its own). Evicted snapshots are deleted: a snapshot no
// Sandbox resumes from would only cost storage.
func retentionOf(spec *sandboxv1.SandboxSpec) *retention {
	if spec.Persistent != nil && !*spec.Persistent {
		return nil
	}
	keep := spec.SnapshotRetention.KeepLastOrDefault()
	expireS := spec.SnapshotRetention.ExpireAfterSecondsOrDefault()
	expireMs := expireS * 1000
	return &retention{
		keepLast:           &vercel.KeepLastSnapshots{Count: int64(keep), Expiration: &expireMs, DeleteEvicted: ptr.To(true)},
		snapshotExpiration: &expireMs,
	}
}

// secretReader reads Secrets uncached and namespace-local, remembering every
// value it hands out.
type secretReader struct {
	reader    client.Reader
	namespace string
	cache     map[string]*corev1.Secret
	values    []string
	// keys holds, per Secret, the keys read from it (sandbox_secrets.go
	// digests their values).
	keys map[string]map[string]bool
}

func (s *secretReader) value(ctx context.Context, name, key string) (string, error) {
	sec, ok := s.cache[name]
	if !ok {
		sec = &corev1.Secret{}
		if err := s.reader.Get(ctx, types.NamespacedName{Namespace: s.namespace, Name: name}, sec); err != nil {
			if apierrors.IsNotFound(err) {
				return "", &secretError{name: name, missing: "secret"}
			}
			return "", err
		}
		if s.cache == nil {
			s.cache = map[string]*corev1.Secret{}
		}
		s.cache[name] = sec
	}
	// Admission authorizes references by name only; it cannot see a
	// Secret's type. A ServiceAccount token would hand Vercel (and whoever
	// runs code in the sandbox) the Kubernetes identity of that account.
	if sec.Type == corev1.SecretTypeServiceAccountToken {
		return "", &secretError{name: name, refused: "a ServiceAccount token (type kubernetes.io/service-account-token) is never sent to Vercel"}
	}
	v, ok := sec.Data[key]
	if !ok {
		return "", &secretError{name: name, key: key, missing: "key"}
	}
	if len(v) > 0 {
		s.values = append(s.values, string(v))
	}
	if s.keys == nil {
		s.keys = map[string]map[string]bool{}
	}
	if s.keys[name] == nil {
		s.keys[name] = map[string]bool{}
	}
	s.keys[name][key] = true
	return string(v), nil
}

// neededBy records on a missing-Secret error the field that needs it, so
// the condition names it.
func neededBy(err error, field string) error {
	var se *secretError
	if errors.As(err, &se) && se.missing != "" && se.field == "" {
		se.field = field
	}
	return err
}

// gitCredentials reads the keys "username" and "password" of a git
// credentials Secret (spec.source.git.credentials, a recipe's repository).
func (s *secretReader) gitCredentials(ctx context.Context, name string) (username, password string, err error) {
	const field = "the git credentials (spec.source.git.credentials)"
	if username, err = s.value(ctx, name, "username"); err != nil {
		return "", "", neededBy(err, field)
	}
	if password, err = s.value(ctx, name, "password"); err != nil {
		return "", "", neededBy(err, field)
	}
	return username, password, nil
}

// buildConfig resolves the mutable part of a Sandbox's spec.
func buildConfig(ctx context.Context, secrets *secretReader, spec *sandboxv1.SandboxSpec) (*sandboxConfig, error) {
	cfg := &sandboxConfig{placement: placementOf(spec), retention: retentionOf(spec)}
	cfg.resources = vercelResources(spec.Resources)
	for _, p := range spec.Ports {
		cfg.ports = append(cfg.ports, int64(p))
	}
	sort.Slice(cfg.ports, func(i, j int) bool { return cfg.ports[i] < cfg.ports[j] })
	if spec.TimeoutSeconds != nil {
		cfg.timeoutMs = *spec.TimeoutSeconds * 1000
	}
	if len(spec.Env) > 0 {
		cfg.env = map[string]string{}
		for _, e := range spec.Env {
			switch {
			case e.ValueFrom != nil:
				v, err := secrets.value(ctx, e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
				if err != nil {
					return nil, neededBy(err, "the environment variable "+e.Name+" (spec.env)")
				}
				// Admission refuses a NUL in spec.env[].value; a Secret's
				// value is only seen here. Sent on, it would make every
				// command of the session fail.
				if strings.IndexByte(v, 0) >= 0 {
					return nil, &secretError{name: e.ValueFrom.SecretKeyRef.Name, refused: fmt.Sprintf(
						"its key %q holds a NUL character, which the environment variable %s (spec.env) cannot carry", e.ValueFrom.SecretKeyRef.Key, e.Name)}
				}
				cfg.env[e.Name] = v
			case e.Value != nil:
				cfg.env[e.Name] = *e.Value
			default:
				cfg.env[e.Name] = ""
			}
		}
	}
	np, err := buildNetworkPolicy(ctx, secrets, spec.NetworkPolicy)
	if err != nil {
		return nil, err
	}
	cfg.networkPolicy = np
	cfg.secrets = secrets.values
	return cfg, nil
}

// memoryPerVCPU is the memory Vercel gives each vCPU, in MB.
const memoryPerVCPU = 2048

// vercelResources translates spec.resources (a Sandbox's, a recipe's) to
// Vercel's: memory follows the vCPUs. Nil leaves Vercel's default.
func vercelResources(r *sandboxv1.SandboxResources) *vercel.Resources {
	if r == nil || r.VCPUs == nil {
		return nil
	}
	v := int64(*r.VCPUs)
	return &vercel.Resources{VCPUs: v, Memory: v * memoryPerVCPU}
}

// builderRequest is the create request of a recipe's builder sandbox: named
// and tagged for its build, not persistent, its session as long as the
// build's time budget, with the recipe's resources and runtime. A recipe
// with no runtime boots from its base snapshot, which the caller adds.
func builderRequest(name string, tags map[string]string, rcp *sandboxv1.SnapshotRecipe, budget time.Duration) vercel.CreateSandboxRequest {
	req := vercel.CreateSandboxRequest{
		Name:       name,
		Timeout:    budget.Milliseconds(),
		Persistent: new(bool),
		Tags:       tags,
		Resources:  vercelResources(rcp.Resources),
	}
	if rcp.Runtime != nil {
		req.Runtime = string(*rcp.Runtime)
	}
	return req
}

// buildSource translates spec.source to Vercel's create request fields. A
// snapshotRef is resolved by the caller.
func buildSource(ctx context.Context, secrets *secretReader, src *sandboxv1.SandboxSource, req *vercel.CreateSandboxRequest) error {
	switch {
	case src.Runtime != nil:
		req.Runtime = string(*src.Runtime)
	case src.Image != nil:
		req.Image = string(*src.Image)
	case src.Git != nil:
		g := src.Git
		s := &vercel.Source{Type: vercel.SourceGit, URL: g.URL, Revision: g.Revision}
		if g.Depth != nil {
			s.Depth = int64(*g.Depth)
		}
		if g.Credentials != nil {
			u, p, err := secrets.gitCredentials(ctx, g.Credentials.SecretName)
			if err != nil {
				return err
			}
			s.Username, s.Password = u, p
		}
		req.Source = s
	case src.Tarball != nil:
		req.Source = &vercel.Source{Type: vercel.SourceTarball, URL: src.Tarball.URL}
	case src.SnapshotID != nil:
		req.Source = &vercel.Source{Type: vercel.SourceSnapshot, SnapshotID: *src.SnapshotID}
	}
	return nil
}
