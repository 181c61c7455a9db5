// Package recipe computes the canonical form and content hash of a
// SandboxSnapshot recipe. It is pure: no I/O, no clock, no randomness.
//
// Two recipes that build the same filesystem must hash equal however they are
// written, and any change that can change the filesystem must change the hash:
//
//   - sorted where order does not matter: repositories (by path), environment
//     variables (by name);
//   - ordered where it does: setup commands, and each command's arguments;
//   - resolved: each setup step's environment is the recipe's env overlaid by
//     the step's own, so a variable moved between the two levels hashes equal;
//     an empty cwd is /vercel/sandbox; paths are cleaned;
//   - excluded: what does not change the result — step names, time budgets,
//     builder resources and which Secret holds the clone credentials;
//   - included: the base (the runtime, or the base snapshot's own content hash
//     or id, so a change of the base rebuilds its layers) and rebuildEpoch.
package recipe

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path"
	"sort"
	"strings"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// DefaultCwd is the working directory of a step that names none.
const DefaultCwd = "/vercel/sandbox"

// formatVersion changes whenever the canonical form does, so hashes from an
// older controller never collide with new ones.
const formatVersion = 1

type canonicalRecipe struct {
	Version      int             `json:"v"`
	Base         canonicalBase   `json:"base"`
	Repositories []canonicalRepo `json:"repositories"`
	Setup        []canonicalStep `json:"setup"`
	RebuildEpoch string          `json:"rebuildEpoch"`
}

type canonicalBase struct {
	Runtime  string `json:"runtime,omitempty"`
	Snapshot string `json:"snapshot,omitempty"`
}

type canonicalRepo struct {
	Path     string `json:"path"`
	URL      string `json:"url"`
	Revision string `json:"revision"`
	Depth    int32  `json:"depth"`
}

type canonicalStep struct {
	Command string      `json:"command"`
	Args    []string    `json:"args"`
	Cwd     string      `json:"cwd"`
	Env     [][2]string `json:"env"`
	Sudo    bool        `json:"sudo"`
	// User is omitted when empty, so recipes without users keep their hashes.
	User string `json:"user,omitempty"`
}

// Canonical returns the canonical JSON form of r. base identifies the base
// snapshot when r.BaseSnapshotRef is set (its content hash, or its snapshot id
// when it is not a recipe) and is ignored otherwise.
func Canonical(r *sandboxv1.SnapshotRecipe, base string) []byte {
	c := canonicalRecipe{Version: formatVersion, RebuildEpoch: r.RebuildEpoch, Repositories: []canonicalRepo{}, Setup: []canonicalStep{}}
	switch {
	case r.Runtime != nil:
		c.Base.Runtime = string(*r.Runtime)
	case r.BaseSnapshotRef != nil:
		c.Base.Snapshot = base
	}
	for _, repo := range r.Repositories {
		cr := canonicalRepo{Path: CleanPath(repo.Path), URL: strings.TrimSpace(repo.URL), Revision: strings.TrimSpace(repo.Revision)}
		if repo.Depth != nil {
			cr.Depth = *repo.Depth
		}
		c.Repositories = append(c.Repositories, cr)
	}
	sort.Slice(c.Repositories, func(i, j int) bool {
		a, b := c.Repositories[i], c.Repositories[j]
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		if a.URL != b.URL {
			return a.URL < b.URL
		}
		if a.Revision != b.Revision {
			return a.Revision < b.Revision
		}
		return a.Depth < b.Depth
	})
	for _, s := range r.Setup {
		cs := canonicalStep{Command: s.Command, Args: append([]string{}, s.Args...), Cwd: CleanCwd(s.Cwd), Sudo: s.Sudo, User: s.User, Env: [][2]string{}}
		for name, value := range StepEnv(r, s) {
			cs.Env = append(cs.Env, [2]string{name, value})
		}
		sort.Slice(cs.Env, func(i, j int) bool { return cs.Env[i][0] < cs.Env[j][0] })
		c.Setup = append(c.Setup, cs)
	}
	out, err := json.Marshal(c)
	if err != nil {
		// Only strings, ints and bools: Marshal cannot fail.
		panic(err)
	}
	return out
}

// Hash returns the content hash of r: the hex SHA-256 of its canonical form.
func Hash(r *sandboxv1.SnapshotRecipe, base string) string {
	sum := sha256.Sum256(Canonical(r, base))
	return hex.EncodeToString(sum[:])
}

// Short is the prefix of a content hash used in labels and names.
func Short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}

// StepEnv is the environment of one setup step: the recipe's env overlaid by
// the step's own.
func StepEnv(r *sandboxv1.SnapshotRecipe, s sandboxv1.RecipeCommand) map[string]string {
	env := map[string]string{}
	for _, e := range r.Env {
		env[e.Name] = e.Value
	}
	for _, e := range s.Env {
		env[e.Name] = e.Value
	}
	return env
}

// CleanCwd resolves a step's working directory: empty means DefaultCwd.
func CleanCwd(cwd string) string {
	if cwd == "" {
		return DefaultCwd
	}
	return path.Clean(cwd)
}

// CleanPath normalises a repository path relative to /vercel/sandbox.
func CleanPath(p string) string {
	return strings.TrimPrefix(path.Clean("/"+p), "/")
}
