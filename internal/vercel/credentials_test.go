package vercel_test

// Credentials against the emulator over loopback: a token file rotated while
// the client runs, and a project or team that Vercel does not know.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

func writeToken(t *testing.T, file, token string) {
	t.Helper()
	// As the kubelet updates a Secret volume: the new content appears at
	// once (rename), never a half-written file.
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
}

func fileClient(t *testing.T, e *emulator.Emulator, file string, reload time.Duration) *vercel.Client {
	t.Helper()
	c, err := vercel.New(vercel.Config{BaseURL: e.URL(), TokenFile: file, TokenReloadInterval: reload,
		TeamID: contractTeam, ProjectID: contractProject, RequestsPerMinute: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// After the Secret is rotated (Vercel accepts only the new token, the file
// holds it), the next call uses the new token: the client reads the file
// again after the 403 and sends the call once more, so no call fails.
func TestTokenFileRotationAfterRejection(t *testing.T) {
	env := newContractEnv(t, emulator.Options{Token: "tok_old"})
	ctx := testCtx(t)
	file := filepath.Join(t.TempDir(), "token")
	writeToken(t, file, "tok_old")
	c := fileClient(t, env.emu, file, time.Hour) // only a rejection makes it read again
	if _, err := c.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: "rot"}); err != nil {
		t.Fatal(err)
	}

	env.emu.SetToken("tok_new")
	writeToken(t, file, "tok_new")
	time.Sleep(1100 * time.Millisecond) // reloads after a rejection are at most one a second
	if _, err := c.GetSandbox(ctx, "rot", false); err != nil {
		t.Fatalf("first call after the rotation: %v", err)
	}
	if _, err := c.DeleteSandbox(ctx, "rot", false); err != nil {
		t.Fatalf("delete after the rotation: %v", err)
	}
}

// Without any rejection, a changed file is read within the reload interval.
func TestTokenFileRotationByInterval(t *testing.T) {
	env := newContractEnv(t, emulator.Options{Token: "tok_a"})
	ctx := testCtx(t)
	file := filepath.Join(t.TempDir(), "token")
	writeToken(t, file, "tok_a")
	c := fileClient(t, env.emu, file, 200*time.Millisecond)
	if _, err := c.ListSandboxes(ctx, vercel.ListSandboxesOptions{Limit: 1}); err != nil {
		t.Fatal(err)
	}
	writeToken(t, file, "tok_b")
	time.Sleep(300 * time.Millisecond)
	// Vercel now accepts only tok_b; a client still sending tok_a would
	// get 403 on this call (the rejection path is off for it: the file was
	// read less than a second ago).
	env.emu.SetToken("tok_b")
	if _, err := c.ListSandboxes(ctx, vercel.ListSandboxesOptions{Limit: 1}); err != nil {
		t.Fatalf("call after the file changed: %v", err)
	}
}

// A token Vercel rejects, and a file that cannot be read, are reported
// without the token; the last good token stays in use.
func TestTokenFileRejectedAndUnreadable(t *testing.T) {
	env := newContractEnv(t, emulator.Options{Token: "tok_good"})
	ctx := testCtx(t)
	file := filepath.Join(t.TempDir(), "token")
	writeToken(t, file, "tok_revoked_secret_value")
	c := fileClient(t, env.emu, file, time.Hour)
	_, err := c.ListSandboxes(ctx, vercel.ListSandboxesOptions{Limit: 1})
	if !vercel.IsUnauthorized(err) {
		t.Fatalf("revoked token: err = %v, want a 401/403", err)
	}
	if strings.Contains(err.Error(), "tok_revoked") {
		t.Errorf("the error carries the token: %v", err)
	}

	writeToken(t, file, "tok_good")
	time.Sleep(1100 * time.Millisecond)
	if err := c.VerifyProject(ctx); err != nil {
		t.Fatalf("after fixing the file: %v", err)
	}
	// A file that disappears (a broken mount) keeps the last good token.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	env.emu.SetToken("tok_other")
	if _, err := c.ListSandboxes(ctx, vercel.ListSandboxesOptions{Limit: 1}); !vercel.IsUnauthorized(err) {
		t.Fatalf("with a token Vercel no longer accepts: %v", err)
	}
	if ferr := c.TokenFileError(); ferr == nil || strings.Contains(ferr.Error(), "tok_") {
		t.Errorf("TokenFileError = %v, want the read error without a token", ferr)
	}
	if _, err := vercel.New(vercel.Config{BaseURL: env.emu.URL(), TokenFile: file, TeamID: contractTeam, ProjectID: contractProject}); err == nil {
		t.Error("New accepted a missing token file")
	}
}

// With a project id Vercel does not know, every delete answers 404 like an
// already deleted sandbox's. The client does not pass that 404 on as
// "deleted" until a list of the project succeeded.
func TestDeleteNotFoundNeedsAVerifiedProject(t *testing.T) {
	env := newContractEnv(t, emulator.Options{Projects: []string{contractProject}})
	ctx := testCtx(t)
	mustCreate(t, env, vercel.CreateSandboxRequest{Name: "kept"})

	wrong, err := vercel.New(vercel.Config{BaseURL: env.emu.URL(), Token: env.emu.Token(), TeamID: contractTeam, ProjectID: "prj_typo"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = wrong.DeleteSandbox(ctx, "kept", false)
	if vercel.IsNotFound(err) || !vercel.IsProjectNotFound(err) {
		t.Fatalf("delete with a wrong project: err = %v, want a project-not-found error that is not IsNotFound", err)
	}
	if err := wrong.VerifyProject(ctx); !vercel.IsProjectNotFound(err) || wrong.ProjectVerified() {
		t.Errorf("VerifyProject with a wrong project = %v", err)
	}
	if _, ok := env.emu.Sandbox("kept"); !ok {
		t.Fatal("the sandbox is gone")
	}

	// The right project: a 404 on delete is "already deleted".
	if _, err := env.c.DeleteSandbox(ctx, "kept", false); err != nil {
		t.Fatal(err)
	}
	if _, err := env.c.DeleteSandbox(ctx, "kept", false); !vercel.IsNotFound(err) {
		t.Errorf("second delete in the right project: err = %v, want 404", err)
	}
	if !env.c.ProjectVerified() {
		t.Error("the project was not recorded as verified")
	}
}

// A team the token has no access to answers 403: VerifyProject reports it
// as a rejected credential.
func TestVerifyProjectWrongTeam(t *testing.T) {
	env := newContractEnv(t, emulator.Options{Teams: []string{contractTeam}, Projects: []string{contractProject}})
	ctx := testCtx(t)
	if err := env.c.VerifyProject(ctx); err != nil {
		t.Fatalf("good team and project: %v", err)
	}
	wrong, err := vercel.New(vercel.Config{BaseURL: env.emu.URL(), Token: env.emu.Token(), TeamID: "team_typo", ProjectID: contractProject})
	if err != nil {
		t.Fatal(err)
	}
	if err := wrong.VerifyProject(ctx); !vercel.IsUnauthorized(err) {
		t.Errorf("wrong team: err = %v, want 403", err)
	}
}
