// Command chaos runs the chaos soak (`make chaos ARGS="…"`): two replicas of
// the manager binary, killed at random, against a local control plane and a
// faulty Vercel emulator under a seeded random workload; it prints one table
// and exits 1 when a target is missed. See docs/dev/chaos.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/getsentry/sandbox-controller/test/chaos"
)

func main() {
	d := chaos.Defaults()
	cfg := d
	flag.Int64Var(&cfg.Seed, "seed", d.Seed, "Seed of every random choice (workload, faults, kills).")
	flag.DurationVar(&cfg.Duration, "duration", d.Duration, "Length of the chaos phase.")
	flag.IntVar(&cfg.Objects, "objects", d.Objects, "Most live workload objects at once (Sandboxes, SandboxSnapshots, SandboxForks; fork children not counted).")
	flag.IntVar(&cfg.Namespaces, "namespaces", d.Namespaces, "Namespaces holding them.")
	flag.DurationVar(&cfg.OpInterval, "op-interval", d.OpInterval, "Mean delay between workload operations.")
	flag.DurationVar(&cfg.KillEvery, "kill-every", d.KillEvery, "Mean delay between SIGKILLs of a random manager replica.")
	flag.DurationVar(&cfg.FaultEvery, "fault-every", d.FaultEvery, "Mean delay between fault episodes.")
	flag.DurationVar(&cfg.BlackHole, "black-hole", d.BlackHole, "How long every Vercel request hangs, once (0: never).")
	flag.DurationVar(&cfg.BlackHoleAt, "black-hole-at", d.BlackHoleAt, "When the black hole opens, from the start of the chaos.")
	flag.DurationVar(&cfg.Converge, "converge", d.Converge, "Bound on the wait for convergence after the chaos.")
	flag.IntVar(&cfg.Replicas, "replicas", d.Replicas, "Manager replicas (leader-elected).")
	flag.StringVar(&cfg.ManagerBin, "manager-bin", "", "The manager binary (make chaos builds it).")
	flag.StringVar(&cfg.WorkDir, "workdir", "", "Directory for the logs and, when a target is missed, the state dump (default: a new temporary directory).")
	flag.StringVar(&cfg.Exec, "exec", "", "Emulator command execution mode: namespace, host or none (default: namespace as root on Linux, else host; only namespace clones a repository in recipes).")
	flag.Parse()
	cfg.ManagerArgs = flag.Args()
	cfg.Log = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	fmt.Print("\n" + rep.Table())
	fmt.Print(rep.Details())
	if missed := rep.Missed(); len(missed) > 0 {
		fmt.Println("\nMISSED:")
		for _, m := range missed {
			fmt.Println("  " + m)
		}
		os.Exit(1)
	}
	fmt.Println("\nEvery target met.")
}
