package controllers

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestClassSecretValues(t *testing.T) {
	for _, tc := range []struct {
		name           string
		data           map[string]string
		wantTeam       string
		wantDeprecated []string
		wantMissing    string
	}{
		{"current spelling", map[string]string{"token": "t", "team-id": "team_1", "project-id": "prj_1"}, "team_1", nil, ""},
		{"deprecated spelling", map[string]string{"token": "t", "teamId": "team_1", "projectId": "prj_1"}, "team_1", []string{"teamId", "projectId"}, ""},
		{"the current key wins", map[string]string{"token": "t", "team-id": "team_new", "teamId": "team_old", "project-id": "prj_1"}, "team_new", nil, ""},
		{"no token", map[string]string{"team-id": "team_1", "project-id": "prj_1"}, "", nil, "token"},
		{"no project under either spelling", map[string]string{"token": "t", "team-id": "team_1"}, "", nil, "project-id"},
		{"an empty value is missing", map[string]string{"token": "t", "team-id": "", "project-id": "prj_1"}, "", nil, "team-id"},
	} {
		sec := &corev1.Secret{Data: map[string][]byte{}}
		for k, v := range tc.data {
			sec.Data[k] = []byte(v)
		}
		values, deprecated, missing := classSecretValues(sec)
		if missing != tc.wantMissing || !reflect.DeepEqual(deprecated, tc.wantDeprecated) || values["team-id"] != tc.wantTeam {
			t.Errorf("%s: team %q, deprecated %v, missing %q; want %q, %v, %q", tc.name, values["team-id"], deprecated, missing, tc.wantTeam, tc.wantDeprecated, tc.wantMissing)
		}
	}
}
