// Command emulator serves a local emulator of the Vercel Sandbox REST API v2
// (localstack/emulator) for development and tests.
//
//	go run ./cmd/emulator --exec=none --plan=hobby
//
// It binds to loopback unless --allow-remote is given. Commands sent to it
// run as local processes on this machine: it is not an isolation boundary.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/getsentry/sandbox-controller/internal/version"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
	"github.com/getsentry/sandbox-controller/localstack/emulator/sandboxruntime"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "emulator:", err)
		os.Exit(1)
	}
}

// run parses args, starts the emulator and serves until ctx ends. ready, when
// set, receives the base URL once the server listens (for tests).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ready chan<- string) error {
	fs := flag.NewFlagSet("emulator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		listen       = fs.String("listen", "127.0.0.1:0", "address to listen on (loopback only unless --allow-remote)")
		allowRemote  = fs.Bool("allow-remote", false, "allow a non-loopback --listen address (commands run on this host!)")
		token        = fs.String("token", "", "bearer token clients must send (default: random)")
		teamID       = fs.String("team-id", "team_emulator", "default team id")
		projectID    = fs.String("project-id", "prj_emulator", "default project id")
		dataDir      = fs.String("data-dir", "", "directory for session and snapshot files (default: a temporary directory removed on exit)")
		execMode     = fs.String("exec", "", "command execution: namespace, host or none (default: namespace when available, else host)")
		planName     = fs.String("plan", "pro", "plan limits: hobby or pro")
		maxRunning   = fs.Int("max-running", -1, "override: concurrently running sessions per team (0 = unlimited)")
		maxSession   = fs.Duration("max-session-duration", 0, "override: maximum session duration")
		rpm          = fs.Int("requests-per-minute", -1, "override: control-plane requests per minute per team (0 = unlimited)")
		dps          = fs.Int("deletes-per-second", -1, "override: deletes per second per team (0 = unlimited)")
		maxVCPUs     = fs.Int("max-vcpus", 0, "override: maximum vCPUs per sandbox")
		maxPorts     = fs.Int("max-ports", 0, "override: maximum exposed ports per sandbox")
		defTimeout   = fs.Duration("default-timeout", 0, "override: default session timeout")
		snapExp      = fs.Duration("snapshot-expiration", 0, "override: default snapshot expiration")
		startPending = fs.Duration("start-pending", 0, "sessions start pending and run after this delay")
		pendingOps   = fs.String("pending-ops", "queue", "operations on a pending session: queue or reject")
		dupStatus    = fs.Int("duplicate-name-status", 400, "status of a create with a taken name: 400 or 409")
		secondStop   = fs.Int("second-stop-status", 200, "status of stopping a stopped session: 200 or 410")
		deletedSnap  = fs.Int("deleted-snapshot-get-status", 200, "status of GET on a deleted snapshot: 200 or 404")
		fakeClock    = fs.Bool("fake-clock", false, "run on a fake clock, advanced only through POST /_emulator/clock/advance")
		printEnv     = fs.Bool("print-env", false, "print only `export VAR=value` lines on stdout (banner goes to stderr)")
		logLevel     = fs.String("log-level", "info", "log level: debug, info, warn, error")
		credsFile    = fs.String("credentials-file", "", "JSON list of further credentials, each for its own teams and projects: [{\"token\":..., \"teams\":[...], \"projects\":[...]}] (tenants in tests)")
		jwksFile     = fs.String("oidc-jwks-file", "", "accept OIDC tokens (JWTs) signed by a key of this JSON Web Key Set (RS256/ES256); default: only the printed token")
		oidcIssuer   = fs.String("oidc-issuer", "", "with --oidc-jwks-file: the `iss` OIDC tokens must carry")
		oidcAudience = fs.String("oidc-audience", "", "with --oidc-jwks-file: an `aud` OIDC tokens must carry (default with --oidc-issuer: https://vercel.com/<the issuer's team>)")
		sourceDir    = fs.String("allowed-source-dir", "", "the only host directory tarball (path, file://) and git (local) sources may read; default: none")
		srcEntries   = fs.Int("source-max-entries", 0, "cap: entries of a tarball source (default 100000)")
		srcBytes     = fs.Int64("source-max-bytes", 0, "cap: content bytes of a tarball source (default 1 GiB)")
		srcFileBytes = fs.Int64("source-max-file-bytes", 0, "cap: bytes of one file in a tarball source (default 256 MiB)")
		maxRead      = fs.Int64("max-read-bytes", 0, "cap: size of a file fs/read returns (default 256 MiB)")
		serveRoutes  = fs.Bool("serve-routes", false, "serve the sandboxes' public routes at <emulator URL>/_routes/<subdomain>, forwarded to the port on loopback")
		anyTerminal  = fs.Bool("interactive-any-session", false, "serve interactive shells on every session, not only those of sandboxes created with __interactive (whether Vercel does is unknown)")
		hostRootSudo = fs.Bool("allow-host-root-sudo", false, "run sudo commands as HOST ROOT where no user namespace can contain them (default: refuse them)")
		sessOutput   = fs.Int64("session-output-bytes", 0, "cap: output all commands of one session keep together (default 256 MiB; -1: none)")
		liveCmds     = fs.Int("max-live-commands", 0, "cap: commands of one session running at once; one more answers 429 (default 32; -1: none)")
		cmdProcs     = fs.Int("max-processes-per-command", 0, "cap: processes and threads of one command and all it starts (default 256; -1: none; needs user namespaces)")
		showVersion  = fs.Bool("version", false, "print the version and the commit this emulator was built from, and exit")
		egressMode   = fs.String("egress", "", "network policy enforcement: on, off, or empty for on where exec mode namespace can give each session its own network")
		egressPriv   = fs.Bool("egress-allow-private", false, "let sandboxes reach loopback and private addresses through the egress proxy (default: refused, so host services stay out of reach)")
		egressCA     = fs.String("egress-upstream-ca", "", "PEM file of CAs the egress proxy trusts for upstream TLS besides the system's")
		latencyProf  = fs.String("latency-profile", "none", "delay the operations Vercel is slow at (create, resume, fork, snapshot, stop, first command) by draws from published measurements: none or vercel")
		latencySeed  = fs.Uint64("latency-seed", 0, "seed of the latency profile's draws, for reproducible runs (0: from the time)")
		egressHosts  = egressHostFlag{}
	)
	fs.Var(egressHosts, "egress-host", "`name=127.0.0.1:port`: the egress proxy connects to this address for the domain name instead of resolving it (repeatable; tests' upstreams under real-looking names)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *showVersion {
		fmt.Fprintln(stdout, "emulator", version.Get())
		return nil
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if err := checkListen(*listen, *allowRemote); err != nil {
		return err
	}
	var plan emulator.Plan
	switch *planName {
	case "pro":
		plan = emulator.PlanPro()
	case "hobby":
		plan = emulator.PlanHobby()
	default:
		return fmt.Errorf("--plan must be hobby or pro, not %q", *planName)
	}
	if *maxRunning >= 0 {
		plan.MaxRunning = *maxRunning
	}
	if *rpm >= 0 {
		plan.RequestsPerMinute = *rpm
	}
	if *dps >= 0 {
		plan.DeletesPerSecond = *dps
	}
	if *maxSession > 0 {
		plan.MaxSessionDuration = *maxSession
	}
	if *maxVCPUs > 0 {
		plan.MaxVCPUs = *maxVCPUs
	}
	if *maxPorts > 0 {
		plan.MaxPorts = *maxPorts
	}
	if *defTimeout > 0 {
		plan.DefaultTimeout = *defTimeout
	}
	if *snapExp > 0 {
		plan.DefaultSnapshotExpiration = *snapExp
	}
	var err error
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	opts := emulator.Options{
		Token: *token, TeamID: *teamID, ProjectID: *projectID, Plan: plan,
		DataDir: *dataDir, Exec: *execMode, StartPending: *startPending,
		DuplicateNameStatus: *dupStatus, SecondStopStatus: *secondStop,
		DeletedSnapshotGetStatus: *deletedSnap, PendingOps: *pendingOps, Logger: logger,
		OIDCIssuer: *oidcIssuer, OIDCAudience: *oidcAudience, AllowedSourceDir: *sourceDir, MaxReadBytes: *maxRead, AllowHostRootSudo: *hostRootSudo,
		InteractiveAnySession: *anyTerminal,
		SessionOutputBytes:    *sessOutput, MaxLiveCommands: *liveCmds, MaxProcessesPerCommand: *cmdProcs,
		ServeRoutes:  *serveRoutes,
		SourceLimits: sandboxruntime.TarLimits{MaxEntries: *srcEntries, MaxBytes: *srcBytes, MaxFileBytes: *srcFileBytes},
	}
	if *jwksFile != "" {
		b, err := os.ReadFile(*jwksFile)
		if err != nil {
			return fmt.Errorf("--oidc-jwks-file: %w", err)
		}
		opts.OIDCJWKS = b
	} else if *oidcIssuer != "" {
		return errors.New("--oidc-issuer needs --oidc-jwks-file")
	}
	if *credsFile != "" {
		cs, err := readCredentials(*credsFile)
		if err != nil {
			return err
		}
		opts.Credentials = cs
	}
	if *fakeClock {
		opts.Clock = emulator.NewFakeClock(time.Now())
	}
	if opts.LatencyProfile, err = emulator.LatencyProfileByName(*latencyProf); err != nil {
		return fmt.Errorf("--latency-profile: %w", err)
	}
	opts.LatencyProfile.Seed = *latencySeed
	if opts.Egress, err = egressOptions(*egressMode, egressHosts, *egressPriv, *egressCA); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	baseURL := "http://" + ln.Addr().String()
	opts.Egress.Issuer = baseURL // forward tokens name this emulator, which serves their keys
	emu, err := emulator.New(opts)
	if err != nil {
		ln.Close()
		return err
	}
	defer emu.Close()

	srv := &http.Server{Handler: emu.Handler(), ReadHeaderTimeout: 30 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	banner, envOut := stdout, stdout
	if *printEnv {
		banner = stderr
	}
	fmt.Fprintf(banner, "Vercel Sandbox API emulator listening on %s\n", baseURL)
	fmt.Fprintf(banner, "  token:     %s\n", emu.Token())
	fmt.Fprintf(banner, "  team:      %s   project: %s   plan: %s\n", *teamID, *projectID, plan.Name)
	fmt.Fprintf(banner, "  exec mode: %s\n    %s\n", emu.ExecMode(), emu.ExecDescription())
	fmt.Fprintf(banner, "  data dir:  %s\n", emu.DataDir())
	fmt.Fprintf(banner, "  network:   policies %s\n", emu.EgressDescription())
	if *jwksFile != "" {
		fmt.Fprintf(banner, "  oidc:      tokens signed by a key of %s are accepted\n", *jwksFile)
	}
	for _, c := range opts.Credentials {
		// The tokens stay in the file: the banner may end up in a log.
		fmt.Fprintf(banner, "  tenant:    teams %s   projects %s   (token in %s)\n", strings.Join(c.Teams, ","), strings.Join(c.Projects, ","), *credsFile)
	}
	if *sourceDir != "" {
		fmt.Fprintf(banner, "  sources:   host paths inside %s; http(s) on loopback only\n", *sourceDir)
	}
	if emu.ExecMode() != "none" {
		fmt.Fprintln(banner, strings.Repeat("!", 78))
		fmt.Fprintln(banner, "!! WARNING: commands sent to this emulator run as real processes ON THIS HOST.")
		fmt.Fprintln(banner, "!! It is NOT an isolation boundary. Do not expose it; run only trusted code.")
		fmt.Fprintln(banner, strings.Repeat("!", 78))
	}
	if *printEnv {
		fmt.Fprintf(envOut, "export VERCEL_API_URL=%s\nexport VERCEL_TOKEN=%s\nexport VERCEL_TEAM_ID=%s\nexport VERCEL_PROJECT_ID=%s\n",
			baseURL, emu.Token(), *teamID, *projectID)
	} else {
		fmt.Fprintf(envOut, "VERCEL_API_URL=%s VERCEL_TOKEN=%s VERCEL_TEAM_ID=%s VERCEL_PROJECT_ID=%s\n",
			baseURL, emu.Token(), *teamID, *projectID)
	}
	if ready != nil {
		ready <- baseURL
	}

	select {
	case <-ctx.Done():
		logger.Info("shutting down")
	case err := <-serveErr:
		return err
	}
	// Close the emulator first: it kills processes, so open streams end.
	closeErr := emu.Close()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	<-serveErr
	return closeErr
}

// checkListen refuses non-loopback addresses unless allowed.
func checkListen(addr string, allowRemote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", addr, err)
	}
	if allowRemote {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--listen %q is not a loopback address; commands run on this host, so pass --allow-remote to expose it deliberately", addr)
}

// readCredentials reads --credentials-file: a JSON list of
// emulator.Credential. Its errors never quote the file's content.
func readCredentials(file string) ([]emulator.Credential, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--credentials-file: %w", err)
	}
	var cs []emulator.Credential
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cs); err != nil {
		return nil, fmt.Errorf("--credentials-file %s: not a JSON list of {token, teams, projects}", file)
	}
	return cs, nil
}
