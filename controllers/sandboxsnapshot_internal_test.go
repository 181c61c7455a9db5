package controllers

import (
	"crypto/sha256"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

func TestBuilderName(t *testing.T) {
	hash := strings.Repeat("ab12", 16)
	valid := regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)
	first := builderName("c1", "team-a", hash, "")
	if first != "team-a-build-"+clusterShort("c1")+"-ab12ab12ab12ab12-0" {
		t.Fatalf("first build %q", first)
	}
	if builderName("c1", "team-a", hash, "") != first {
		t.Fatal("not deterministic")
	}
	rebuild := builderName("c1", "team-a", hash, "snap_x")
	if rebuild == first || builderName("c1", "team-a", hash, "snap_y") == rebuild {
		t.Fatal("a rebuild (replacing a snapshot) must get its own builder")
	}
	if builderName("c1", "team-b", hash, "") == first {
		t.Fatal("namespaces must not share builders")
	}
	if builderName("c2", "team-a", hash, "") == first {
		t.Fatal("clusters sharing a Vercel project must not share builders")
	}
	long := builderName(strings.Repeat("x", 300), strings.Repeat("n", 63), hash, "snap_x")
	for _, n := range []string{first, rebuild, long, builderName("c1", "a.b", "short", "")} {
		if !valid.MatchString(n) {
			t.Errorf("invalid Vercel name %q", n)
		}
	}
	// Only this cluster's builders of this namespace pass as builders.
	for _, tc := range []struct {
		cluster, ns, name string
		want              bool
	}{
		{"c1", "team-a", first, true},
		{"c1", "team-a", rebuild, true},
		{strings.Repeat("y", 300), strings.Repeat("n", 63), long, false},
		{strings.Repeat("x", 300), strings.Repeat("n", 63), long, true},
		{"c2", "team-a", first, false},
		{"c1", "team", first, false},
		{"c1", "team-a-build-" + clusterShort("c1"), builderName("c1", "team-a-build-"+clusterShort("c1"), hash, ""), true},
		{"c1", "team-a", "team-a-build-" + clusterShort("c1") + "-x", false},
		{"c1", "team-a", "team-a-build-" + clusterShort("c1") + "-ab12-0-other", false},
	} {
		if got := builderNamePattern(tc.cluster, tc.ns).MatchString(tc.name); got != tc.want {
			t.Errorf("builderNamePattern(%q, %q).MatchString(%q) = %v, want %v", tc.cluster[:min(len(tc.cluster), 8)], tc.ns, tc.name, got, tc.want)
		}
	}
}

func snapWith(name, uid, id, hash string, deleting bool) sandboxv1.SandboxSnapshot {
	s := sandboxv1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)}}
	s.Status.SnapshotID, s.Status.ContentHash = id, hash
	if deleting {
		now := metav1.Now()
		s.DeletionTimestamp = &now
	}
	return s
}

func TestReferenceTracking(t *testing.T) {
	self := snapWith("b", "1", "snap_1", "h", true)
	for _, tc := range []struct {
		name              string
		others            []sandboxv1.SandboxSnapshot
		holds, wait, uses bool
	}{
		{"alone", nil, false, false, false},
		{"another live holder", []sandboxv1.SandboxSnapshot{snapWith("c", "2", "snap_1", "h", false)}, true, false, true},
		{"a holder of another id", []sandboxv1.SandboxSnapshot{snapWith("c", "2", "snap_2", "h", false)}, false, false, true},
		// Deleted together or one after the other: only live users count,
		// so the last one marked for deletion deletes (issue 36).
		{"deleting holder with a larger name", []sandboxv1.SandboxSnapshot{snapWith("c", "2", "snap_1", "h", true)}, false, false, false},
		{"deleting holder with a smaller name", []sandboxv1.SandboxSnapshot{snapWith("a", "2", "snap_1", "h", true)}, false, false, false},
		{"a user still waiting for the shared build", []sandboxv1.SandboxSnapshot{snapWith("c", "2", "", "h", false)}, false, true, true},
		{"a waiting user being deleted", []sandboxv1.SandboxSnapshot{snapWith("a", "2", "", "h", true)}, false, false, false},
		{"a waiting user of another hash", []sandboxv1.SandboxSnapshot{snapWith("c", "2", "", "other", false)}, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			all := append([]sandboxv1.SandboxSnapshot{self}, tc.others...)
			if got := holdsSnapshot(&self, all, "snap_1"); got != tc.holds {
				t.Errorf("holdsSnapshot = %v, want %v", got, tc.holds)
			}
			if got := waitsForHash(&self, all); got != tc.wait {
				t.Errorf("waitsForHash = %v, want %v", got, tc.wait)
			}
			if got := usesHash(&self, all); got != tc.uses {
				t.Errorf("usesHash = %v, want %v", got, tc.uses)
			}
		})
	}
}

func TestBuildDriverIsTheOldestLiveUser(t *testing.T) {
	t1 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t2 := metav1.NewTime(t1.Add(time.Second))
	mk := func(name string, created metav1.Time, deleting bool) *sandboxv1.SandboxSnapshot {
		s := snapWith(name, name, "", "h", deleting)
		s.CreationTimestamp = created
		return &s
	}
	self := mk("m", t2, false)
	if d := buildDriver(self, []*sandboxv1.SandboxSnapshot{mk("z", t1, false)}); d == nil || d.Name != "z" {
		t.Errorf("older peer should drive, got %v", d)
	}
	if d := buildDriver(self, []*sandboxv1.SandboxSnapshot{mk("a", t2, false)}); d == nil || d.Name != "a" {
		t.Errorf("same second: the smaller name drives, got %v", d)
	}
	if d := buildDriver(self, []*sandboxv1.SandboxSnapshot{mk("z", t2, false), mk("a", t1, true)}); d != nil {
		t.Errorf("younger and deleting peers do not drive, got %v", d.Name)
	}
}

func TestEffectiveMaxAgeIsTheSmallest(t *testing.T) {
	mk := func(v *int64) *sandboxv1.SandboxSnapshot {
		return &sandboxv1.SandboxSnapshot{Spec: sandboxv1.SandboxSnapshotSpec{MaxAgeSeconds: v}}
	}
	if got := effectiveMaxAge(mk(nil), nil); got != 0 {
		t.Errorf("no maxAge: %v", got)
	}
	if got := effectiveMaxAge(mk(ptr.To[int64](600)), []*sandboxv1.SandboxSnapshot{mk(nil), mk(ptr.To[int64](60))}); got != time.Minute {
		t.Errorf("smallest of the users: %v", got)
	}
}

func TestBuildStepsCloneFirstThenSetupInOrder(t *testing.T) {
	r := &sandboxv1.SnapshotRecipe{
		Repositories: []sandboxv1.RecipeRepository{{URL: "https://x/a", Path: "./a"}, {URL: "https://x/b", Path: "b/c"}},
		Setup:        []sandboxv1.RecipeCommand{{Name: "install", Command: "npm"}, {Command: "make"}},
	}
	var got []string
	for _, s := range buildSteps(r) {
		got = append(got, s.label)
	}
	want := []string{"clone a", "clone b/c", "setup 1/2 (install)", "setup 2/2 (make)"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("steps %q, want %q", got, want)
	}
}

func TestSharedExpiration(t *testing.T) {
	user := func(secs *int64) *sandboxv1.SandboxSnapshot {
		return &sandboxv1.SandboxSnapshot{Spec: sandboxv1.SandboxSnapshotSpec{ExpirationSeconds: secs}}
	}
	hour, day := ptr.To[int64](3600), ptr.To[int64](86400)
	for _, c := range []struct {
		name  string
		users []*sandboxv1.SandboxSnapshot
		want  *time.Duration
	}{
		{"alone, unset: Vercel's default", []*sandboxv1.SandboxSnapshot{user(nil)}, nil},
		{"alone, set", []*sandboxv1.SandboxSnapshot{user(hour)}, ptr.To(time.Hour)},
		{"the longest wins, whoever drives", []*sandboxv1.SandboxSnapshot{user(hour), user(day)}, ptr.To(24 * time.Hour)},
		{"never beats all", []*sandboxv1.SandboxSnapshot{user(day), user(ptr.To[int64](0)), user(nil)}, ptr.To(time.Duration(0))},
		{"unset counts as Vercel's default", []*sandboxv1.SandboxSnapshot{user(hour), user(nil)}, ptr.To(vercelDefaultSnapshotExpiration)},
		{"all unset", []*sandboxv1.SandboxSnapshot{user(nil), user(nil)}, nil},
	} {
		got := sharedExpiration(c.users[0], c.users[1:])
		if (got == nil) != (c.want == nil) || (got != nil && *got != *c.want) {
			t.Errorf("%s: got %v, want %v", c.name, ptr.Deref(got, -1), ptr.Deref(c.want, -1))
		}
	}
}

// A snapshot proof verifies only for the object and the snapshot it was
// signed for, under the key it was signed with: a user who may write status
// can neither make one nor reuse another object's (issue 36).
func TestSnapshotProof(t *testing.T) {
	key := newProofKey([]byte("0123456789abcdef0123456789abcdef"))
	other := newProofKey([]byte("fedcba9876543210fedcba9876543210"))
	proof := key.sign("uid-a", "snap_1")
	if !strings.HasPrefix(proof, proofPrefix) {
		t.Fatalf("proof %q lacks the prefix %q", proof, proofPrefix)
	}
	for _, tc := range []struct {
		name     string
		key      proofKey
		uid, id  string
		proof    string
		accepted bool
	}{
		{"its own", key, "uid-a", "snap_1", proof, true},
		{"copied to another object", key, "uid-b", "snap_1", proof, false},
		{"for another snapshot", key, "uid-a", "snap_2", proof, false},
		{"signed under another key", other, "uid-a", "snap_1", proof, false},
		{"forged: the unkeyed hash", key, "uid-a", "snap_1", proofPrefix + fmt.Sprintf("%x", sha256.Sum256([]byte("uid-a\x00snap_1"))), false},
		{"empty", key, "uid-a", "snap_1", "", false},
		{"no key loaded", nil, "uid-a", "snap_1", proof, false},
		{"no id", key, "uid-a", "", key.sign("uid-a", ""), false},
	} {
		if got := tc.key.valid(types.UID(tc.uid), tc.id, tc.proof); got != tc.accepted {
			t.Errorf("%s: valid = %v, want %v", tc.name, got, tc.accepted)
		}
	}
	// The proof key is not the digest key itself: a proof is never a
	// Secret digest or the other way round.
	digest := []byte("0123456789abcdef0123456789abcdef")
	if string(newProofKey(digest)) == string(digest) {
		t.Error("the proof key is the digest key")
	}
	if newProofKey(nil) != nil {
		t.Error("a proof key without a digest key")
	}
	// recordedProof names the served snapshot's proof, or the replaced one's.
	st := &sandboxv1.SandboxSnapshotStatus{SnapshotID: "snap_2", SnapshotProof: "p2",
		Build: &sandboxv1.SnapshotBuildStatus{Replaces: "snap_1", ReplacesProof: "p1"}}
	for id, want := range map[string]string{"snap_2": "p2", "snap_1": "p1", "snap_3": "", "": ""} {
		if got := recordedProof(st, id); got != want {
			t.Errorf("recordedProof(%q) = %q, want %q", id, got, want)
		}
	}
}
