package emulator

import (
	"context"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Two credentials, each for its own team and project: each token sees only
// its own sandboxes, is refused on the other's team (403) and project (404),
// and a rotated token replaces only its own credential's.
func TestCredentialsIsolateTeams(t *testing.T) {
	te := newEnv(t, Options{Credentials: []Credential{
		{Token: "tok_a", Teams: []string{"team_a"}, Projects: []string{"prj_a"}},
		{Token: "tok_b", Teams: []string{"team_b"}, Projects: []string{"prj_b"}},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := func(tok, team, project string) *vercel.Client {
		c, err := vercel.New(vercel.Config{BaseURL: te.srv.URL, Token: tok, TeamID: team, ProjectID: project, MaxRetries: -1})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := client("tok_a", "team_a", "prj_a"), client("tok_b", "team_b", "prj_b")
	if _, err := a.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: "same-name"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: "same-name"}); err != nil {
		t.Fatalf("the same name in another team's project: %v", err)
	}
	if got := te.e.LiveSandboxesIn("team_a", "prj_a"); len(got) != 1 {
		t.Fatalf("team_a/prj_a holds %d sandboxes, want 1", len(got))
	}
	if got := te.e.LiveSandboxesIn("team_b", "prj_b"); len(got) != 1 {
		t.Fatalf("team_b/prj_b holds %d sandboxes, want 1", len(got))
	}

	if _, err := client("tok_a", "team_b", "prj_b").GetSandbox(ctx, "same-name", false); !vercel.IsUnauthorized(err) {
		t.Fatalf("token a on team b: err = %v, want 403", err)
	}
	if _, err := client("tok_a", "team_a", "prj_b").GetSandbox(ctx, "same-name", false); !vercel.IsNotFound(err) {
		t.Fatalf("token a on project b: err = %v, want 404", err)
	}
	if err := te.e.SetTeamToken("team_a", "tok_a2"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetSandbox(ctx, "same-name", false); !vercel.IsUnauthorized(err) {
		t.Fatalf("rotated-away token: err = %v, want 403", err)
	}
	if _, err := client("tok_a2", "team_a", "prj_a").GetSandbox(ctx, "same-name", false); err != nil {
		t.Fatalf("new token: %v", err)
	}
	if _, err := b.GetSandbox(ctx, "same-name", false); err != nil {
		t.Fatalf("the other credential after a rotation: %v", err)
	}
	if te.e.TeamToken("team_a") != "tok_a2" {
		t.Fatal("TeamToken does not return the rotated token")
	}
}

func TestCredentialsRefuseBadOptions(t *testing.T) {
	for _, cs := range [][]Credential{
		{{Token: "", Teams: []string{"t"}}},
		{{Token: "x", Teams: nil}},
		{{Token: "x", Teams: []string{"t"}}, {Token: "x", Teams: []string{"u"}}},
	} {
		if e, err := New(Options{Credentials: cs, Exec: "none"}); err == nil {
			_ = e.Close()
			t.Errorf("New accepted %+v", cs)
		}
	}
}
