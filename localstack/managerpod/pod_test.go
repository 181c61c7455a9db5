package managerpod

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestExpand(t *testing.T) {
	vars := map[string]string{"TEAM": "team_1", "EMPTY": "", "A": "$(TEAM)"}
	for _, c := range []struct{ in, want string }{
		{"--vercel-team-id=$(TEAM)", "--vercel-team-id=team_1"},
		{"$(TEAM)$(TEAM)", "team_1team_1"},
		{"x$(EMPTY)y", "xy"},
		{"$(A)", "$(TEAM)"}, // a value is not expanded again
		{"$$(TEAM)", "$(TEAM)"},
		{"$$$(TEAM)", "$team_1"},
		{"$(UNSET)", "$(UNSET)"},
		{"$(TEAM", "$(TEAM"},
		{"$(UNSET", "$(UNSET"},
		{"cost: $5 $", "cost: $5 $"},
		{"$$", "$"},
		{"", ""},
	} {
		if got := expand(c.in, vars); got != c.want {
			t.Errorf("expand(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestFlagValue(t *testing.T) {
	args := []string{"--leader-elect", "-metrics-bind-address=:8443", "--zap-devel=false", "--metrics-bind-address=0", "positional"}
	for _, c := range []struct {
		name, want string
		ok         bool
	}{
		{"metrics-bind-address", "0", true}, // the last occurrence, as the flag package keeps it
		{"zap-devel", "false", true},
		{"leader-elect", "", false}, // named without a value
		{"leader-election-namespace", "", false},
		{"positional", "", false},
	} {
		if got, ok := flagValue(args, c.name); got != c.want || ok != c.ok {
			t.Errorf("flagValue(%s) = %q, %v, want %q, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestSetFlags(t *testing.T) {
	for _, c := range []struct {
		name    string
		args    []string
		set     map[string]string
		want    []string
		wantErr string
	}{{
		name: "replaced where they stand",
		args: []string{"--leader-elect", "--metrics-bind-address=:8443", "--health-probe-bind-address=:8081", "--vercel-token-file=/var/run/secrets/vercel/token"},
		set:  map[string]string{"metrics-bind-address": "127.0.0.1:1", "health-probe-bind-address": "127.0.0.1:2", "vercel-token-file": "/tmp/t"},
		want: []string{"--leader-elect", "--metrics-bind-address=127.0.0.1:1", "--health-probe-bind-address=127.0.0.1:2", "--vercel-token-file=/tmp/t"},
	}, {
		name: "single dash and every occurrence",
		args: []string{"-health-probe-bind-address=:8081", "--zap-devel", "--health-probe-bind-address=:9"},
		set:  map[string]string{"health-probe-bind-address": "127.0.0.1:2"},
		want: []string{"--health-probe-bind-address=127.0.0.1:2", "--zap-devel", "--health-probe-bind-address=127.0.0.1:2"},
	}, {
		name: "missing ones appended in name order",
		args: []string{"--leader-elect"},
		set:  map[string]string{"leader-election-namespace": "ns", "health-probe-bind-address": "127.0.0.1:2"},
		want: []string{"--leader-elect", "--health-probe-bind-address=127.0.0.1:2", "--leader-election-namespace=ns"},
	}, {
		name: "a prefix of another flag is another flag",
		args: []string{"--metrics-bind-address-extra=1"},
		set:  map[string]string{"metrics-bind-address": "127.0.0.1:1"},
		want: []string{"--metrics-bind-address-extra=1", "--metrics-bind-address=127.0.0.1:1"},
	}, {
		name:    "the two-argument form is refused",
		args:    []string{"--metrics-bind-address", ":8443"},
		set:     map[string]string{"metrics-bind-address": "127.0.0.1:1"},
		wantErr: "--metrics-bind-address=value",
	}} {
		t.Run(c.name, func(t *testing.T) {
			got, err := setFlags(c.args, c.set)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, c.want) {
				t.Errorf("setFlags = %q, %v, want %q", got, err, c.want)
			}
		})
	}
}

func TestSecretFile(t *testing.T) {
	secretVolume := func(name, secret string, items ...corev1.KeyToPath) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret, Items: items}}}
	}
	pod := corev1.PodSpec{Volumes: []corev1.Volume{
		secretVolume("vercel-token", "vercel-credentials", corev1.KeyToPath{Key: "token", Path: "token"}),
		secretVolume("whole", "certs"),
		secretVolume("renamed", "creds", corev1.KeyToPath{Key: "vercel.token", Path: "sub/t"}),
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}}
	c := corev1.Container{Name: "manager", VolumeMounts: []corev1.VolumeMount{
		{Name: "vercel-token", MountPath: "/var/run/secrets/vercel"},
		{Name: "whole", MountPath: "/certs/"},
		{Name: "renamed", MountPath: "/creds"},
		{Name: "whole", MountPath: "/one-file", SubPath: "tls.key"},
		{Name: "scratch", MountPath: "/var/run/secrets/vercel/scratch"},
	}}
	for _, tc := range []struct {
		file, secret, key, wantErr string
	}{
		{file: "/var/run/secrets/vercel/token", secret: "vercel-credentials", key: "token"},
		{file: "/var/run/secrets/vercel/../vercel/token", secret: "vercel-credentials", key: "token"},
		{file: "/certs/tls.crt", secret: "certs", key: "tls.crt"},
		{file: "/creds/sub/t", secret: "creds", key: "vercel.token"},
		{file: "/one-file", secret: "certs", key: "tls.key"},
		{file: "/var/run/secrets/vercel/other", wantErr: "shows no key"},
		{file: "/var/run/secrets/vercel/scratch/token", wantErr: "not a Secret volume"}, // the deeper mount wins
		{file: "/var/run/secrets/vercel-other/token", wantErr: "on no volume mount"},
		{file: "/certs", wantErr: "the mount of volume"},
		{file: "/certs/a/b", wantErr: "shows no key"},
		{file: "relative/token", wantErr: "on no volume mount"},
	} {
		secret, key, err := secretFile(pod, c, tc.file)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("secretFile(%s) = %s, %s, %v; want an error containing %q", tc.file, secret, key, err, tc.wantErr)
			}
			continue
		}
		if err != nil || secret != tc.secret || key != tc.key {
			t.Errorf("secretFile(%s) = %s, %s, %v; want %s, %s", tc.file, secret, key, err, tc.secret, tc.key)
		}
	}
}
