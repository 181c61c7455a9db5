// Package sandboxruntime is what a Vercel sandbox session is on the local host:
// a directory that stands for the sandbox's "/", and commands run as real local
// processes inside it. It knows nothing of HTTP, JSON or Vercel's state machine;
// the emulator's API (package emulator) holds a *FS and the *Process values of
// each session and calls only the exported names below.
//
// Filesystem (fs.go, tar.go):
//
//	NewFS(dir) (*FS, error)                  // a fresh session: /vercel/sandbox, /tmp, /home/vercel-sandbox, /root
//	RestoreFS(snapshotDir, dir) (*FS, error) // a session from a snapshot
//	(*FS).SnapshotTo(dir) (sizeBytes int64, err error)
//	(*FS).ExtractTarGz(cwd, r) error         // fs/write: a gzip'd tar upload
//	(*FS).ExtractTarGzLimited(cwd, r, TarLimits) error // a tarball source, within its caps
//	(*FS).ReadFileLimit(path, cwd, max) ([]byte, error)
//	(*FS).CopyDir(hostDir, cwd) error        // a host tree (a git checkout), by the rules of an upload
//	(*FS).ReadFile(path, cwd) ([]byte, error)
//	(*FS).Mkdir(path, cwd, recursive) error
//	(*FS).Remove() error
//
// Commands (exec.go, exec_linux.go, output.go):
//
//	NewRunner(mode, RunnerOptions{AllowHostRootSudo, MaxProcesses}) (*Runner, error) // ModeNamespace, ModeHost, ModeNone; "" = namespace when possible
//	ErrSudoRefused                           // Start: sudo would be host root and was not allowed
//	(*Runner).Mode(), Describe(), SetScriptedExit(name, code), ProcessLimit()
//	NewOutputBudget(bytes) *OutputBudget       // shared by one session's commands
//	(*Runner).Start(Command{FS, Name, Args, Cwd, Env, Sudo, Timeout, OutputBudget, NetNS, CABundle}) (*Process, error)
//	(*Runner).StartTerminal(Command, WindowSize{Cols, Rows}) (*Process, *Terminal, error) // on a pseudo-terminal (terminal.go)
//	(*Terminal).Read(), Write(), Resize(WindowSize), Close(), File()
//	ErrNoTerminal                            // StartTerminal in ModeNone
//	SandboxUserID                            // vercel-sandbox's uid inside a command's user namespace
//	(*Process).Done(), ExitCode(), Kill(signal), Terminate(), Output()
//	(*Output).Follow(ctx, func(Record) error) error
//
// Users (etc_linux.go, sudo.go): where commands get user namespaces, a
// session's /etc is an overlay of the host's (read-only) and <root>/etc,
// which holds the session's own passwd, group, shadow and gshadow (seeded on
// its first command), so useradd and groupadd work and their users stay in
// the session and its snapshots; a command whose program is `sudo` is run by
// the emulator as the user sudo names (sudo -u USER -- CMD ...).
//
// Network (netns.go, netns_linux.go):
//
//	(*Runner).NetworkIsolation() (bool, why string) // can sessions get a network namespace?
//	(*Runner).NewNetNS() (*NetNS, error)     // ErrNoNetworkIsolation where they cannot
//	(*NetNS).Listen(network, addr), DialContext(ctx, network, addr), Close()
//	WriteCABundle(dir, extraPEM) (path, error) // host roots + extraPEM, for Command.CABundle
//
// Isolation: in namespace mode with user namespaces (the emulator runs as
// root), each session's commands can have a network namespace of their own,
// owned by the host's user namespace, with only a loopback interface: they
// reach their own session's listeners and nothing else, and root inside a
// command cannot change that. In host mode, and in namespace mode without
// user or network namespaces, there is NO network isolation: commands share
// the host's network, reach every loopback service of the host, and no
// network policy can be enforced; Describe says so, and NetworkIsolation
// reports why.
//
// Every error caused by the caller's input (a path escaping the sandbox, a bad
// upload, an empty command, a bad signal, ...) satisfies
// errors.Is(err, ErrInvalidInput) and carries a message meant for the API client.
// Paths are sandbox paths: cwd "" means Workdir (/vercel/sandbox), relative paths
// are relative to cwd, and nothing the emulator itself does leaves the session's
// directory. See docs/dev/emulator-internals.md.
package sandboxruntime
