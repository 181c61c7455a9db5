package recipe

import (
	"encoding/binary"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

func rt(s string) *sandboxv1.Runtime { r := sandboxv1.Runtime(s); return &r }

func base() *sandboxv1.SnapshotRecipe {
	return &sandboxv1.SnapshotRecipe{
		Runtime: rt("node24"),
		Repositories: []sandboxv1.RecipeRepository{
			{URL: "https://github.com/getsentry/app", Path: "app", Revision: "main"},
			{URL: "https://github.com/getsentry/lib", Path: "lib", Depth: ptr.To[int32](1)},
		},
		Env: []sandboxv1.RecipeEnvVar{{Name: "CI", Value: "1"}, {Name: "NODE_ENV", Value: "production"}},
		Setup: []sandboxv1.RecipeCommand{
			{Name: "install", Command: "npm", Args: []string{"ci"}, Cwd: "/vercel/sandbox/app"},
			{Command: "make", Args: []string{"build", "-j2"}, Env: []sandboxv1.RecipeEnvVar{{Name: "CI", Value: "0"}}},
		},
	}
}

func TestEqualRecipesWrittenDifferentlyHashEqual(t *testing.T) {
	want := Hash(base(), "")
	cases := map[string]func(r *sandboxv1.SnapshotRecipe){
		"repositories reordered": func(r *sandboxv1.SnapshotRecipe) {
			r.Repositories[0], r.Repositories[1] = r.Repositories[1], r.Repositories[0]
		},
		"env reordered": func(r *sandboxv1.SnapshotRecipe) { r.Env[0], r.Env[1] = r.Env[1], r.Env[0] },
		"recipe env moved into every step": func(r *sandboxv1.SnapshotRecipe) {
			r.Env = nil
			r.Setup[0].Env = []sandboxv1.RecipeEnvVar{{Name: "NODE_ENV", Value: "production"}, {Name: "CI", Value: "1"}}
			r.Setup[1].Env = []sandboxv1.RecipeEnvVar{{Name: "CI", Value: "0"}, {Name: "NODE_ENV", Value: "production"}}
		},
		"default cwd spelled out": func(r *sandboxv1.SnapshotRecipe) { r.Setup[1].Cwd = "/vercel/sandbox/" },
		"cwd not clean":           func(r *sandboxv1.SnapshotRecipe) { r.Setup[0].Cwd = "/vercel/sandbox/x/../app" },
		"path not clean":          func(r *sandboxv1.SnapshotRecipe) { r.Repositories[0].Path = "./app" },
		"step names":              func(r *sandboxv1.SnapshotRecipe) { r.Setup[0].Name = "other"; r.Setup[1].Name = "n" },
		"time budgets": func(r *sandboxv1.SnapshotRecipe) {
			r.TimeoutSeconds = ptr.To[int32](99)
			r.Setup[0].TimeoutSeconds = ptr.To[int32](5)
		},
		"resources": func(r *sandboxv1.SnapshotRecipe) { r.Resources = &sandboxv1.SandboxResources{VCPUs: ptr.To[int32](4)} },
		"credentials": func(r *sandboxv1.SnapshotRecipe) {
			r.Repositories[0].Credentials = &sandboxv1.GitCredentials{SecretName: "s"}
		},
		"empty args as empty list": func(r *sandboxv1.SnapshotRecipe) {
			r.Setup = append(r.Setup, sandboxv1.RecipeCommand{Command: "true", Args: []string{}})
		},
	}
	withNilArgs := base()
	withNilArgs.Setup = append(withNilArgs.Setup, sandboxv1.RecipeCommand{Command: "true"})
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			r := base()
			mutate(r)
			w := want
			if name == "empty args as empty list" {
				w = Hash(withNilArgs, "")
			}
			if got := Hash(r, ""); got != w {
				t.Errorf("hash changed:\n%s\n%s", Canonical(base(), ""), Canonical(r, ""))
			}
		})
	}
}

func TestMeaningfulChangesChangeTheHash(t *testing.T) {
	want := Hash(base(), "")
	cases := map[string]func(r *sandboxv1.SnapshotRecipe){
		"runtime": func(r *sandboxv1.SnapshotRecipe) { r.Runtime = rt("node22") },
		"base snapshot": func(r *sandboxv1.SnapshotRecipe) {
			r.Runtime = nil
			r.BaseSnapshotRef = &sandboxv1.LocalObjectReference{Name: "b"}
		},
		"repository url":  func(r *sandboxv1.SnapshotRecipe) { r.Repositories[0].URL += "2" },
		"repository path": func(r *sandboxv1.SnapshotRecipe) { r.Repositories[0].Path = "app2" },
		"revision":        func(r *sandboxv1.SnapshotRecipe) { r.Repositories[0].Revision = "v2" },
		"depth":           func(r *sandboxv1.SnapshotRecipe) { r.Repositories[0].Depth = ptr.To[int32](1) },
		"repository added": func(r *sandboxv1.SnapshotRecipe) {
			r.Repositories = append(r.Repositories, sandboxv1.RecipeRepository{URL: "https://x/y", Path: "y"})
		},
		"steps reordered":   func(r *sandboxv1.SnapshotRecipe) { r.Setup[0], r.Setup[1] = r.Setup[1], r.Setup[0] },
		"args reordered":    func(r *sandboxv1.SnapshotRecipe) { r.Setup[1].Args = []string{"-j2", "build"} },
		"arg changed":       func(r *sandboxv1.SnapshotRecipe) { r.Setup[0].Args[0] = "install" },
		"args split":        func(r *sandboxv1.SnapshotRecipe) { r.Setup[1].Args = []string{"build -j2"} },
		"command":           func(r *sandboxv1.SnapshotRecipe) { r.Setup[0].Command = "pnpm" },
		"cwd":               func(r *sandboxv1.SnapshotRecipe) { r.Setup[0].Cwd = "/tmp" },
		"sudo":              func(r *sandboxv1.SnapshotRecipe) { r.Setup[0].Sudo = true },
		"user":              func(r *sandboxv1.SnapshotRecipe) { r.Setup[0].User = "alice" },
		"env value":         func(r *sandboxv1.SnapshotRecipe) { r.Env[1].Value = "development" },
		"step env override": func(r *sandboxv1.SnapshotRecipe) { r.Setup[1].Env = nil },
		"env added":         func(r *sandboxv1.SnapshotRecipe) { r.Env = append(r.Env, sandboxv1.RecipeEnvVar{Name: "X"}) },
		"step removed":      func(r *sandboxv1.SnapshotRecipe) { r.Setup = r.Setup[:1] },
		"rebuild epoch":     func(r *sandboxv1.SnapshotRecipe) { r.RebuildEpoch = "2026-11-29" },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			r := base()
			mutate(r)
			if got := Hash(r, ""); got == want {
				t.Errorf("hash unchanged for %s", Canonical(r, ""))
			}
		})
	}
}

func TestBaseIdentityIsPartOfTheHash(t *testing.T) {
	r := base()
	r.Runtime, r.BaseSnapshotRef = nil, &sandboxv1.LocalObjectReference{Name: "base"}
	a, b := Hash(r, "hash-of-base-1"), Hash(r, "hash-of-base-2")
	if a == b {
		t.Fatal("a change of the base did not change the hash")
	}
	// The name of the base object is not content: renaming it hashes equal.
	r.BaseSnapshotRef.Name = "renamed"
	if Hash(r, "hash-of-base-1") != a {
		t.Fatal("renaming the base object changed the hash")
	}
	// The base identity is ignored for runtime recipes.
	if Hash(base(), "x") != Hash(base(), "y") {
		t.Fatal("base identity changed a runtime recipe's hash")
	}
}

func TestHashFormat(t *testing.T) {
	h := Hash(base(), "")
	if len(h) != 64 || Short(h) != h[:12] {
		t.Fatalf("hash %q", h)
	}
}

// FuzzCanonical builds a recipe from fuzz input, rewrites it in ways that do
// not change what it builds (must hash equal), and changes it in ways that do
// (must hash differently).
func FuzzCanonical(f *testing.F) {
	f.Add("npm", "ci", "https://example.com/a", "app", "main", "KEY", "v", uint8(0), uint8(1))
	f.Add("make", "", "file:///tmp/r", "x/y", "", "A", "", uint8(3), uint8(7))
	f.Add("sh", "-c", "ssh://git@h/r", "z", "deadbeef", "Z_1", "with space", uint8(255), uint8(2))
	f.Fuzz(func(t *testing.T, cmd, arg, url, p, rev, envName, envValue string, seed, which uint8) {
		mk := func() *sandboxv1.SnapshotRecipe {
			r := &sandboxv1.SnapshotRecipe{
				Runtime: rt("node24"),
				Repositories: []sandboxv1.RecipeRepository{
					{URL: url, Path: "p1-" + p, Revision: rev},
					{URL: url + "/2", Path: "p2-" + p},
				},
				Env: []sandboxv1.RecipeEnvVar{{Name: "E_" + envName, Value: envValue}, {Name: "F_" + envName, Value: envValue + "f"}},
				Setup: []sandboxv1.RecipeCommand{
					{Command: "c1" + cmd, Args: []string{arg, "x"}},
					{Command: "c2" + cmd, Args: []string{"y", arg}, Cwd: "/w"},
				},
			}
			return r
		}
		want := Hash(mk(), "")

		// Rewrites that must not change the hash.
		r := mk()
		switch seed % 4 {
		case 0:
			r.Repositories[0], r.Repositories[1] = r.Repositories[1], r.Repositories[0]
		case 1:
			r.Env[0], r.Env[1] = r.Env[1], r.Env[0]
		case 2:
			for i := range r.Setup {
				r.Setup[i].Env = append([]sandboxv1.RecipeEnvVar(nil), r.Env...)
			}
			r.Env = nil
		case 3:
			r.Setup[0].Cwd = DefaultCwd + "/"
			r.Setup[1].Name = cmd
			r.Setup[0].TimeoutSeconds = ptr.To(int32(seed) + 1)
		}
		if got := Hash(r, ""); got != want {
			t.Fatalf("rewrite %d changed the hash:\n%s\n%s", seed%4, Canonical(mk(), ""), Canonical(r, ""))
		}

		// Changes that must change the hash.
		r = mk()
		switch which % 8 {
		case 0:
			r.Setup[0].Args = append(r.Setup[0].Args, "")
		case 1:
			r.Setup[0], r.Setup[1] = r.Setup[1], r.Setup[0]
		case 2:
			r.Repositories[0].Revision += "x"
		case 3:
			r.Env[0].Value += "x"
		case 4:
			r.Setup[1].Sudo = true
		case 5:
			r.RebuildEpoch = "e" + string(binary.AppendUvarint(nil, uint64(seed)))
		case 6:
			r.Repositories[1].URL += "x"
		case 7:
			r.Setup[0].Command += "x"
		}
		if got := Hash(r, ""); got == want {
			t.Fatalf("change %d kept the hash: %s", which%8, Canonical(r, ""))
		}
	})
}

// TestCanonicalWithoutUser: a recipe whose steps name no user has the
// canonical form (so the hash) it had before steps could name one.
func TestCanonicalWithoutUser(t *testing.T) {
	r := &sandboxv1.SnapshotRecipe{Setup: []sandboxv1.RecipeCommand{{Command: "npm", Args: []string{"ci"}}}}
	want := `{"command":"npm","args":["ci"],"cwd":"/vercel/sandbox","env":[],"sudo":false}`
	if got := string(Canonical(r, "")); !strings.Contains(got, want) {
		t.Errorf("canonical form %s, want the step as %s", got, want)
	}
}
