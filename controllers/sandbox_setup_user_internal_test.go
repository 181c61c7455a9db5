package controllers

import (
	"context"
	"slices"
	"testing"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// TestAsUserRequest: a step run as a user is the SDK's asUser request, its
// marker in bash's $0, and the step runner finds it again by that marker.
func TestAsUserRequest(t *testing.T) {
	step := sandboxv1.SetupCommand{Command: "make", Args: []string{"-j2"}, User: "alice"}
	req := setupRequest(step, "sandbox-setup:attempt=1:step=2")
	want := []string{"-u", "alice", "--", "bash", "-c", asUserExec, "sandbox-setup:attempt=1:step=2", "/home/alice", "make", "-j2"}
	if req.Command != "sudo" || !slices.Equal(req.Args, want) || req.Sudo {
		t.Fatalf("request = %s %q (sudo %v), want sudo %q", req.Command, req.Args, req.Sudo, want)
	}
	listed := vercel.Command{Name: req.Command, Args: req.Args}
	if !isSetupCommand(listed, "sandbox-setup:attempt=1:step=2") || isSetupCommand(listed, "sandbox-setup:attempt=1:step=1") {
		t.Errorf("the marker does not identify the step's command")
	}
	// A recipe step's env goes through env(1), which survives sudo; cwd as given.
	r := asUserRequest(vercel.RunCommandRequest{Command: "id", Cwd: "/tmp", Env: map[string]string{"B": "2", "A": "1"}}, "root")
	if want := []string{"-u", "root", "--", "bash", "-c", asUserExec, "bash", "/tmp", "env", "A=1", "B=2", "id"}; !slices.Equal(r.Args, want) || len(r.Env) != 0 {
		t.Errorf("asUserRequest = %q env %v, want %q and no env", r.Args, r.Env, want)
	}
	if r := asUserRequest(vercel.RunCommandRequest{Command: "id"}, "root"); r.Args[7] != "/root" {
		t.Errorf("root's default cwd = %q, want /root", r.Args[7])
	}
}

// TestRecipeStepAsUser: a recipe step with a user is sent as the SDK's
// asUser request, its env (recipe env overlaid by the step's) through env(1).
func TestRecipeStepAsUser(t *testing.T) {
	rcp := &sandboxv1.SnapshotRecipe{
		Env: []sandboxv1.RecipeEnvVar{{Name: "CI", Value: "1"}},
		Setup: []sandboxv1.RecipeCommand{{Command: "npm", Args: []string{"ci"}, Cwd: "/vercel/sandbox/app", User: "builder",
			Env: []sandboxv1.RecipeEnvVar{{Name: "NODE_ENV", Value: "production"}}}},
	}
	snap := &sandboxv1.SandboxSnapshot{Spec: sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{Recipe: rcp}}}
	req, _, err := (&SandboxSnapshotReconciler{}).stepRequest(context.Background(), snap, buildStep{setup: &rcp.Setup[0]})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-u", "builder", "--", "bash", "-c", asUserExec, "bash", "/vercel/sandbox/app", "env", "CI=1", "NODE_ENV=production", "npm", "ci"}
	if req.Command != "sudo" || !slices.Equal(req.Args, want) || req.Sudo || len(req.Env) != 0 || req.Timeout != defaultStepTimeout.Milliseconds() {
		t.Errorf("recipe step request = %s %q sudo %v env %v timeout %d, want sudo %q", req.Command, req.Args, req.Sudo, req.Env, req.Timeout, want)
	}
}
