package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/getsentry/sandbox-controller/pkg/dataplane"
	"github.com/getsentry/sandbox-controller/pkg/sandboxclient"
)

// sessionFlags are what exec and shell share.
type sessionFlags struct {
	workdir string
	env     []string
	sudo    bool
	timeout *time.Duration
}

func (f *sessionFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.workdir, "workdir", "w", "", "Working directory in the sandbox (/vercel/sandbox when empty)")
	cmd.Flags().StringArrayVarP(&f.env, "env", "e", nil, "Environment variable KEY=VALUE for the command (repeatable)")
	cmd.Flags().BoolVar(&f.sudo, "sudo", false, "Run as root")
	f.timeout = timeoutFlag(cmd, 5*time.Minute)
	cmd.Flag("timeout").Usage = "How long to wait for the Sandbox to be Ready before running; 0 waits forever"
}

// liveSession is a Sandbox's running session, kept alive while in use.
type liveSession struct {
	*dataplane.Session
	name  string
	beats *sandboxclient.Heartbeater
	stop  chan struct{}
}

// openSession records a heartbeat on the Sandbox (which wakes an Idle one:
// running a command is activity), waits until it is Ready, and returns its
// session. Until close, a heartbeat goes out every interval, so a long
// command or shell is not stopped as idle.
func (o *options) openSession(ctx context.Context, arg string, timeout time.Duration) (*liveSession, error) {
	name, err := sandboxName(arg)
	if err != nil {
		return nil, err
	}
	dp, err := dataPlane()
	if err != nil {
		return nil, err
	}
	c, ns, err := o.client()
	if err != nil {
		return nil, err
	}
	if err := c.Heartbeat(ctx, ns, name, time.Now()); err != nil {
		return nil, err
	}
	wctx, cancel := withTimeout(ctx, timeout)
	defer cancel()
	sbx, err := c.WaitReady(wctx, ns, name)
	if errors.Is(err, sandboxclient.ErrStopped) {
		return nil, fmt.Errorf("%w (kubectl sandbox resume %s)", err, name)
	}
	if err != nil {
		return nil, err
	}
	sess, err := dp.Session(sbx)
	if err != nil {
		return nil, err
	}
	ls := &liveSession{Session: sess, name: name, beats: c.StartHeartbeat(ns, name, 0), stop: make(chan struct{})}
	go func() {
		t := time.NewTicker(sandboxclient.DefaultHeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				ls.beats.Beat()
			case <-ls.stop:
				return
			}
		}
	}()
	return ls, nil
}

// activity records a heartbeat (coalesced: at most one patch per interval).
func (s *liveSession) activity() { s.beats.Beat() }

func (s *liveSession) close() {
	close(s.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.beats.Stop(ctx)
}

// run runs cmd, copying its output as it arrives, and returns its exit
// code. An interrupt (Ctrl-C) or SIGTERM is passed on to the command in the
// sandbox, whose exit then ends the run.
func (s *liveSession) run(ctx context.Context, cmd dataplane.Command, stdout, stderr io.Writer) (int, error) {
	s.activity()
	id, err := s.Start(ctx, cmd)
	if err != nil {
		return -1, s.explain(err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	defer func() { signal.Stop(sigs); close(done) }()
	go func() {
		for {
			select {
			case sig := <-sigs:
				kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = s.Kill(kctx, id, sig.(syscall.Signal))
				cancel()
			case <-done:
				return
			}
		}
	}()
	if err := s.Logs(ctx, id, stdout, stderr); err != nil {
		return -1, s.explain(err)
	}
	code, err := s.Wait(ctx, id)
	if err != nil {
		return -1, s.explain(err)
	}
	s.activity()
	return code, nil
}

func (s *liveSession) explain(err error) error {
	if dataplane.IsSessionStopped(err) {
		return fmt.Errorf("%w: the session of sandbox %s stopped (paused, idle or snapshotted); run again to wake it", err, s.name)
	}
	return err
}

func (f *sessionFlags) command(name string, args []string) (dataplane.Command, error) {
	env, err := keyValues("--env", f.env)
	if err != nil {
		return dataplane.Command{}, err
	}
	return dataplane.Command{Name: name, Args: args, Cwd: f.workdir, Env: env, Sudo: f.sudo}, nil
}

func newExecCommand(o *options) *cobra.Command {
	var flags sessionFlags
	cmd := &cobra.Command{
		Use:   "exec NAME [flags] -- COMMAND [ARGS...]",
		Short: "Run a command in a Sandbox's session; exits with the command's exit code",
		Long: `exec runs COMMAND in the Sandbox's running session through the Vercel Sandbox API, copies its
stdout and stderr as they arrive, and exits with its exit code. It first records a heartbeat,
which wakes an Idle Sandbox, and waits until the Sandbox is Ready (--timeout); a paused Sandbox
must be resumed first. Standard input is not passed: the API has no stdin for commands.
Errors of the plugin itself exit with 1.`,
		Example: `  kubectl sandbox exec dev -- npm test
  kubectl sandbox exec dev -w /tmp -e DEBUG=1 -- sh -c 'ls | wc -l'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 || len(args) < 2 {
				return fmt.Errorf("usage: kubectl sandbox exec NAME -- COMMAND [ARGS...]")
			}
			return nil
		},
	}
	flags.add(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := flags.command(args[1], args[2:])
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		s, err := o.openSession(ctx, args[0], *flags.timeout)
		if err != nil {
			return err
		}
		defer s.close()
		code, err := s.run(ctx, c, o.Out, o.ErrOut)
		if err != nil {
			return err
		}
		if code != 0 {
			return &exitCodeError{code: code}
		}
		return nil
	}
	return cmd
}

func newShellCommand(o *options) *cobra.Command {
	var flags sessionFlags
	cmd := &cobra.Command{
		Use:   "shell NAME",
		Short: "A shell in a Sandbox: on a terminal when run from one, else line by line",
		Long: `shell opens a shell in the Sandbox's session.

When standard input and output are a terminal, it is an interactive session on a terminal in the
sandbox, as Vercel's 'sandbox connect' opens: sh runs on a pseudo-terminal, everything typed goes
to it (Ctrl-C included), window resizes follow, and shell exits with the shell's exit code.
Interactive programs (vim, top, a REPL) work.

Otherwise (input from a pipe or file) it reads lines and runs each one with sh -c, printing its
output, until end of input or 'exit [CODE]', and exits with the last line's exit code (or CODE).
Each line is its own shell process without standard input: the working directory carries over
from line to line ('cd' works); shell variables, exports, aliases and background jobs do not
('export X=1; ...' on one line does). Use -e for variables every line sees.`,
		Example: `  kubectl sandbox shell dev
  printf 'cd /tmp\nls\n' | kubectl sandbox shell dev`,
		Args: cobra.ExactArgs(1),
	}
	flags.add(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		s, err := o.openSession(ctx, args[0], *flags.timeout)
		if err != nil {
			return err
		}
		defer s.close()
		var code int
		if in, out, ok := terminals(o.In, o.Out); ok {
			code, err = terminalShell(ctx, s, &flags, in, out)
		} else {
			code, err = shellLoop(ctx, s, &flags, o.In, o.Out, o.ErrOut)
		}
		if err != nil {
			return err
		}
		if code != 0 {
			return &exitCodeError{code: code}
		}
		return nil
	}
	return cmd
}

// shellLoop runs each input line and returns the exit code to leave with.
func shellLoop(ctx context.Context, s *liveSession, flags *sessionFlags, in io.Reader, out, errOut io.Writer) (int, error) {
	// Each line's shell writes its final directory here, for the next line.
	cwdFile := "/tmp/.kubectl-sandbox-shell-" + randomSuffix()
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = s.run(cctx, dataplane.Command{Name: "rm", Args: []string{"-f", cwdFile}, Sudo: flags.sudo}, nil, nil)
	}()
	cwd := flags.workdir
	if cwd == "" {
		cwd = "/vercel/sandbox"
	}
	interactive := false
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		interactive = true
	}
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 64*1024), 1024*1024)
	last := 0
	for {
		if interactive {
			fmt.Fprintf(errOut, "%s:%s$ ", s.name, cwd)
		}
		if !scanner.Scan() {
			break
		}
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if fields := strings.Fields(line); fields[0] == "exit" && len(fields) <= 2 {
			if len(fields) == 2 {
				n, err := strconv.Atoi(fields[1])
				if err != nil {
					fmt.Fprintf(errOut, "exit: %s: numeric argument required\n", fields[1])
					continue
				}
				return n & 0xff, nil
			}
			return last, nil
		}
		script := "trap 'pwd > " + cwdFile + "' EXIT\n" + line
		c, err := flags.command("sh", []string{"-c", script})
		if err != nil {
			return -1, err
		}
		c.Cwd = cwd
		last, err = s.run(ctx, c, out, errOut)
		if err != nil {
			return -1, err
		}
		if b, err := s.ReadFile(ctx, cwdFile); err == nil {
			if dir := string(bytes.TrimSpace(b)); strings.HasPrefix(dir, "/") {
				cwd = dir
			}
		}
	}
	if err := scanner.Err(); err != nil {
		return -1, fmt.Errorf("read input: %w", err)
	}
	return last, nil
}

func randomSuffix() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
