package main

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// history and rewind through the real kubectl: two pauses, the history lists
// both newest first, rewind --id goes back to the first one and its files,
// rewind --to goes back to a SandboxSnapshot; refusals name the field.
func TestHistoryAndRewind(t *testing.T) {
	ns := newNamespace(t)
	ok(t, sandbox(ns, "up", "dev")...)
	marker := func(content string) {
		t.Helper()
		ok(t, sandbox(ns, "exec", "dev", "--", "sh", "-c", "echo "+content+" > /vercel/sandbox/marker")...)
	}
	read := func() string {
		t.Helper()
		return ok(t, sandbox(ns, "exec", "dev", "--", "cat", "/vercel/sandbox/marker")...)
	}
	pause := func() string {
		t.Helper()
		s := decodeJSON[sandboxv1.Sandbox](t, ok(t, sandbox(ns, "pause", "dev", "-o", "json")...))
		ok(t, sandbox(ns, "resume", "dev")...)
		return s.Status.CurrentSnapshotID
	}

	if r := kubectl(t, sandbox(ns, "history", "dev")...); r.code != 0 || !strings.Contains(r.stderr, "no snapshots yet") {
		t.Errorf("history before any pause: %s", r)
	}
	marker("first")
	a := pause()
	marker("second")
	b := pause()

	entries := decodeJSON[[]sandboxv1.SnapshotHistoryEntry](t, ok(t, sandbox(ns, "history", "dev", "-o", "json")...))
	if len(entries) != 2 || entries[0].ID != b || entries[1].ID != a || !entries[0].Current || entries[1].Current || entries[0].CreatedAt == nil {
		t.Fatalf("history -o json: want [%s (current), %s], got %+v", b, a, entries)
	}
	table := ok(t, sandbox(ns, "history", "dev")...)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "CURRENT") || !strings.HasPrefix(lines[1], "*") || !strings.Contains(lines[1], b) ||
		!strings.Contains(lines[2], a) || !strings.Contains(lines[1], "stop") {
		t.Errorf("history table:\n%s", table)
	}

	rewound := decodeJSON[sandboxv1.Sandbox](t, ok(t, sandbox(ns, "rewind", "dev", "--id", a, "-o", "json")...))
	if rewound.Status.Rewind == nil || rewound.Status.Rewind.State != sandboxv1.RewindRewound || rewound.Status.Rewind.SnapshotID != a || readyOf(&rewound) != "True" {
		t.Fatalf("rewind --id: %+v, ready %s", rewound.Status.Rewind, readyOf(&rewound))
	}
	if got := read(); got != "first\n" {
		t.Errorf("after rewind --id %s the marker reads %q, want first", a, got)
	}
	entries = decodeJSON[[]sandboxv1.SnapshotHistoryEntry](t, ok(t, sandbox(ns, "history", "dev", "-o", "json")...))
	var current string
	ids := map[string]bool{}
	for _, e := range entries {
		ids[e.ID] = true
		if e.Current {
			current = e.ID
		}
	}
	if current != a || !ids[b] {
		t.Errorf("history after the rewind: current %s (want %s), entries %+v", current, a, entries)
	}

	// A SandboxSnapshot captured from it, by name; the same target twice.
	marker("captured")
	ok(t, sandbox(ns, "snapshot", "dev", "cap", "--keep-running")...)
	ok(t, sandbox(ns, "exec", "dev", "--", "true")...) // resumed
	for i := range 2 {
		marker("later")
		if out := ok(t, sandbox(ns, "rewind", "dev", "--to", "cap")...); out != "sandbox.sandbox.sentry.io/dev rewound\n" {
			t.Errorf("rewind --to printed %q", out)
		}
		if got := read(); got != "captured\n" {
			t.Errorf("rewind --to cap (%d): marker reads %q", i, got)
		}
	}

	if r := kubectl(t, sandbox(ns, "rewind", "dev", "--to", "nope", "--timeout", "1m")...); r.code == 0 ||
		!strings.Contains(r.stderr, `spec.rewind.snapshotRef: SandboxSnapshot "nope" does not exist in namespace `+ns) {
		t.Errorf("rewind to a missing SandboxSnapshot: %s", r)
	}
	if r := kubectl(t, sandbox(ns, "rewind", "dev")...); r.code == 0 || !strings.Contains(r.stderr, "to id") {
		t.Errorf("rewind without a target: %s", r)
	}
}

func TestPrintHistory(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var b strings.Builder
	err := printHistory(&b, []sandboxv1.SnapshotHistoryEntry{
		{ID: "snap_b", CreatedAt: &metav1.Time{Time: now.Add(-time.Hour)}, SizeBytes: 3 << 20, ExpiresAt: &metav1.Time{Time: now.Add(48 * time.Hour)}, Current: true, Automatic: true, ParentID: "snap_a"},
		{ID: "snap_a\x1b[31m", SizeBytes: 10},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	want := "CURRENT   SNAPSHOT         CREATED     SIZE     EXPIRES   TAKEN-BY   PARENT\n" +
		"*         snap_b           60m ago     3.0MiB   in 2d     stop       snap_a\n" +
		"          snap_a\\x1b[31m   <unknown>   10B      never     request    -\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}
