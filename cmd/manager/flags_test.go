package main

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"
)

func TestLeaderElectionFlagsValidate(t *testing.T) {
	def := leaderElectionFlags{namespace: "ns", leaseDuration: 15 * time.Second, renewDeadline: 10 * time.Second, retryPeriod: 2 * time.Second}
	for _, c := range []struct {
		name   string
		modify func(*leaderElectionFlags)
		want   string // substring of the error; "" for none
	}{
		{"defaults", func(*leaderElectionFlags) {}, ""},
		{"short timings of the HA test", func(f *leaderElectionFlags) {
			f.leaseDuration, f.renewDeadline, f.retryPeriod = 4*time.Second, 3*time.Second, time.Second
		}, ""},
		{"renew deadline not under lease", func(f *leaderElectionFlags) { f.renewDeadline = 15 * time.Second }, "--leader-election-lease-duration must be longer"},
		{"retry period too close to renew", func(f *leaderElectionFlags) { f.retryPeriod = 9 * time.Second }, "1.2 times --leader-election-retry-period"},
		{"zero retry period", func(f *leaderElectionFlags) { f.retryPeriod = 0 }, "--leader-election-retry-period must be positive"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := def
			c.modify(&f)
			err := f.validate()
			switch {
			case c.want == "" && err != nil:
				t.Errorf("validate: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("validate: %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestMetricsServerOptions(t *testing.T) {
	t.Run("secure by default", func(t *testing.T) {
		opts, w, err := metricsFlags{secure: true}.serverOptions(":8443")
		if err != nil || w != nil {
			t.Fatalf("serverOptions: %v, watcher %v", err, w)
		}
		if !opts.SecureServing || opts.FilterProvider == nil {
			t.Errorf("SecureServing %v, FilterProvider set %v: want HTTPS behind authn/authz", opts.SecureServing, opts.FilterProvider != nil)
		}
		cfg := &tls.Config{NextProtos: []string{"h2"}}
		for _, o := range opts.TLSOpts {
			o(cfg)
		}
		if len(cfg.NextProtos) != 1 || cfg.NextProtos[0] != "http/1.1" {
			t.Errorf("ALPN %v: HTTP/2 must be off without --enable-http2", cfg.NextProtos)
		}
	})
	t.Run("http2 on request", func(t *testing.T) {
		opts, _, err := metricsFlags{secure: true, enableHTTP2: true}.serverOptions(":8443")
		if err != nil {
			t.Fatal(err)
		}
		cfg := &tls.Config{NextProtos: []string{"h2"}}
		for _, o := range opts.TLSOpts {
			o(cfg)
		}
		if len(cfg.NextProtos) != 1 || cfg.NextProtos[0] != "h2" {
			t.Errorf("ALPN %v, want h2 kept", cfg.NextProtos)
		}
	})
	t.Run("plain HTTP", func(t *testing.T) {
		opts, _, err := metricsFlags{secure: false}.serverOptions(":8080")
		if err != nil {
			t.Fatal(err)
		}
		if opts.SecureServing || opts.FilterProvider != nil {
			t.Error("--metrics-secure=false still serves HTTPS or filters")
		}
	})
	t.Run("missing certificate", func(t *testing.T) {
		_, _, err := metricsFlags{secure: true, certPath: t.TempDir(), certName: "tls.crt", certKey: "tls.key"}.serverOptions(":8443")
		if err == nil {
			t.Error("a --metrics-cert-path without a certificate was accepted")
		}
	})
}

func TestVercelTimeoutFlagsValidate(t *testing.T) {
	def := vercelTimeoutFlags{call: 30 * time.Second, streamIdle: time.Minute, stall: 5 * time.Minute, reconcile: 2 * time.Minute}
	for _, c := range []struct {
		name   string
		modify func(*vercelTimeoutFlags)
		want   string
	}{
		{"defaults", func(*vercelTimeoutFlags) {}, ""},
		{"stall check off", func(f *vercelTimeoutFlags) { f.stall = 0 }, ""},
		{"no call timeout", func(f *vercelTimeoutFlags) { f.call = 0 }, "--vercel-call-timeout must be positive"},
		{"no idle limit", func(f *vercelTimeoutFlags) { f.streamIdle = 0 }, "--vercel-stream-idle-timeout must be positive"},
		{"negative stall", func(f *vercelTimeoutFlags) { f.stall = -time.Second }, "--vercel-stall-threshold must not be negative"},
		{"stall within a call", func(f *vercelTimeoutFlags) { f.stall = 30 * time.Second }, "--vercel-stall-threshold must be longer than --vercel-call-timeout"},
		{"reconcile within a call", func(f *vercelTimeoutFlags) { f.reconcile = 30 * time.Second }, "--reconcile-timeout must be longer than --vercel-call-timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := def
			c.modify(&f)
			err := f.validate()
			switch {
			case c.want == "" && err != nil:
				t.Errorf("validate: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("validate: %v, want an error containing %q", err, c.want)
			}
		})
	}
}
