package controllers

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestOwnerOf(t *testing.T) {
	const cluster, uid = "c1", types.UID("1111-aaaa")
	ours := ownerTags(cluster, uid)
	with := func(k, v string) map[string]string {
		m := ownerTags(cluster, uid)
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name string
		tags map[string]string
		want ownership
	}{
		{"no tags", nil, unowned},
		{"only foreign tags", map[string]string{"team": "box"}, unowned},
		{"ours", ours, ownedBySelf},
		{"another object of this cluster", with(tagOwnerUID, "2222"), ownedByPeer},
		{"another cluster, same uid", with(tagClusterID, "c2"), ownedElsewhere},
		{"another manager", with(tagManagedBy, "box"), ownedElsewhere},
		{"owner uid only", map[string]string{tagOwnerUID: string(uid)}, ownedElsewhere},
		{"tagged before clusters were, same uid", with(tagClusterID, ""), ownedBySelf},
		{"tagged before clusters were, another uid", map[string]string{tagManagedBy: tagManagedByValue, tagOwnerUID: "2222"}, ownedElsewhere},
	} {
		if got := ownerOf(tc.tags, cluster, uid); got != tc.want {
			t.Errorf("%s: ownerOf = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := ownerOf(map[string]string{tagManagedBy: tagManagedByValue}, cluster, ""); got != ownedElsewhere {
		t.Errorf("an empty UID must never own: %v", got)
	}
}

func TestAdoptionTags(t *testing.T) {
	got, err := adoptionTags(map[string]string{"team": "box", "user": "u1"}, "c1", "u")
	if err != nil || len(got) != 5 || got["team"] != "box" || got[tagOwnerUID] != "u" || got[tagClusterID] != "c1" {
		t.Fatalf("adoptionTags = %v, %v", got, err)
	}
	_, err = adoptionTags(map[string]string{"a": "1", "b": "2", "c": "3"}, "c1", "u")
	if err == nil || !strings.Contains(err.Error(), "above Vercel's limit of 5") {
		t.Fatalf("3 tags of its own: %v", err)
	}
	if r := releasedTags(got); len(r) != 2 || r["team"] != "box" {
		t.Fatalf("releasedTags = %v", r)
	}
}

func TestCapturePattern(t *testing.T) {
	uid := types.UID("0123abcd-rest")
	name := vercelName("team-a", "src", uid)
	if !capturePattern("team-a", "src").MatchString(name) {
		t.Fatalf("%s is the derived name of Sandbox src", name)
	}
	for _, other := range []string{vercelName("team-a", "src-2", uid), vercelName("team-b", "src", uid), name + "x"} {
		if capturePattern("team-a", "src").MatchString(other) {
			t.Errorf("%s matched Sandbox team-a/src", other)
		}
	}
	if capturePattern(strings.Repeat("n", 63), strings.Repeat("s", 100)) != nil {
		t.Error("a hashed name cannot be matched by pattern")
	}
}
