package main

// SandboxPools in the plugin: `up --pool` and `create --pool` claim a warm
// member, `ls pools` and `status pool/NAME` show what a pool holds and how
// it is used, `scale pool/NAME` drives its size through /scale.

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/pkg/sandboxclient"
)

// poolFlags are create's and up's --pool and --allow-cold.
type poolFlags struct {
	name      string
	allowCold bool
}

func (p *poolFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&p.name, "pool", "", "spec.poolRef: claim a ready member of this SandboxPool; the spec is the pool's template, the flags change the claimant's own fields (network, ports, timeout, ...)")
	cmd.Flags().BoolVar(&p.allowCold, "allow-cold", false, "With --pool: accept flags that change what a member cannot take (source, --vcpus, --env, --persistent, --setup); the Sandbox is then created cold")
}

// poolRun is what one create/up --pool needs besides the flags.
type poolRun struct {
	ns, name string
	up, wait bool
	dryRun   string
	pf       *genericclioptions.PrintFlags
}

// fieldFlags are the flags that set each field a pool member cannot take
// from a claimant (the fields the operator compares with the template).
var fieldFlags = map[string][]string{
	"spec.source":     {"runtime", "image", "git", "git-revision", "git-depth", "git-secret", "tarball", "snapshot", "snapshot-id"},
	"spec.resources":  {"vcpus"},
	"spec.env":        {"env", "env-from-secret"},
	"spec.persistent": {"persistent"},
	"spec.setup":      {"setup"},
}

// offendingFlags names the flags that were set and changed fields; a field
// without a flag (className) is named itself.
func offendingFlags(cmd *cobra.Command, fields []string) string {
	var names []string
	for _, f := range fields {
		found := false
		for _, fl := range fieldFlags[f] {
			if cmd.Flags().Changed(fl) {
				names, found = append(names, "--"+fl), true
			}
		}
		if !found {
			names = append(names, f)
		}
	}
	return strings.Join(slices.Compact(names), ", ")
}

// run creates (or, for up, gets or creates and waits for) a Sandbox that
// claims a member of the pool, and says how it got its Vercel sandbox.
func (p *poolFlags) run(ctx context.Context, cmd *cobra.Command, o *options, c *sandboxclient.Client, spec *specFlags, r poolRun) error {
	opts := sandboxclient.ClaimOptions{AllowCold: p.allowCold, Customize: func(sbx *sandboxv1.Sandbox) error {
		tmpl := sbx.Spec.DeepCopy()
		if err := spec.overlay(cmd, sbx); err != nil {
			return err
		}
		fields := sandboxv1.ClaimMismatch(tmpl, &sbx.Spec)
		switch {
		case len(fields) == 0:
			return nil
		case !p.allowCold:
			flags := offendingFlags(cmd, fields)
			return fmt.Errorf("%s: SandboxPool %q cannot serve this Sandbox (%s would differ from its template, and a running member cannot take that): "+
				"leave out %s to claim a member, or add --allow-cold to create it cold", flags, p.name, strings.Join(fields, ", "), flags)
		}
		fmt.Fprintf(escapingWriter{o.ErrOut}, "Sandbox %s will be created cold (--allow-cold): %s change %s, which a member of SandboxPool %s cannot take\n",
			sbx.Name, offendingFlags(cmd, fields), strings.Join(fields, ", "), p.name)
		return nil
	}}
	var (
		sbx *sandboxv1.Sandbox
		err error
	)
	if r.up {
		r.pf.NamePrintFlags.Operation = "ready"
		sbx, _, err = c.Claim(ctx, r.ns, r.name, p.name, opts)
	} else {
		sbx, err = p.create(ctx, c, r, opts)
	}
	if err := printResult(r.pf, sbx, err, o.Out); err != nil {
		return err
	}
	if r.up || (r.wait && r.dryRun == "none") {
		w := o.Out
		if outputFormat(r.pf) != "" { // stdout is the object
			w = o.ErrOut
		}
		fmt.Fprintf(escapingWriter{w}, "%s: %s\n", qualified(kindSandbox, r.name), sandboxclient.ClaimResultOf(sbx))
	}
	return nil
}

// create is create --pool: the Sandbox from the pool's template, created
// (or dry-run), and with --wait waited for.
func (p *poolFlags) create(ctx context.Context, c *sandboxclient.Client, r poolRun, opts sandboxclient.ClaimOptions) (*sandboxv1.Sandbox, error) {
	pool, err := c.Clientset().SandboxV1alpha1().SandboxPools(r.ns).Get(ctx, p.name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("--pool %s: %w", p.name, err)
	}
	sbx, _, err := sandboxclient.SandboxFromPool(pool, r.name, opts)
	if err != nil {
		return nil, err
	}
	sbx, err = createOrDryRun(ctx, c, sbx, r.dryRun, r.pf)
	if err == nil && r.wait && r.dryRun == "none" {
		sbx, err = c.WaitReady(ctx, r.ns, r.name)
	}
	return sbx, err
}

// printPoolTable is `ls pools`: what each pool holds and how it is used,
// with the replenish time the CRD's printer columns leave out.
func printPoolTable(w io.Writer, pools []sandboxv1.SandboxPool, lp listPrint) error {
	tw := tabwriter.NewWriter(escapingWriter{w}, 0, 8, 3, ' ', 0)
	header := []string{"NAME", "READY", "REPLICAS", "MEMBERS", "CLAIMS/MIN", "HITS", "MISSES", "REPLENISH", "AGE"}
	if lp.allNamespaces {
		header = append([]string{"NAMESPACE"}, header...)
	}
	if lp.wide {
		header = append(header, "MEMBER-STATE", "SOURCE", "REASON")
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for i := range pools {
		p := &pools[i]
		s := sandboxclient.PoolStatusOf(p)
		row := []string{p.Name, fmt.Sprintf("%d/%d", s.Ready, s.Target), fmt.Sprint(s.Replicas), fmt.Sprint(s.Members),
			orNone(s.ClaimsPerMinute), fmt.Sprint(s.Hits), fmt.Sprint(s.Misses), replenishText(s.Replenish),
			duration.HumanDuration(time.Since(p.CreationTimestamp.Time))}
		if lp.allNamespaces {
			row = append([]string{p.Namespace}, row...)
		}
		if lp.wide {
			// Escaped per cell: the writer below escapes too, but after the
			// tabwriter measured the columns.
			row = append(row, string(memberState(p)), escapeControl(sandboxSource(p.Spec.Template.Spec.Source)), escapeControl(orNone(s.Reason)))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// replenishText is whole seconds: the pool measures timestamps to the
// second, so 0s is a member ready within the second of its creation.
func replenishText(d time.Duration) string { return d.String() }

func memberState(p *sandboxv1.SandboxPool) sandboxv1.SandboxState {
	if p.Spec.MemberState == "" {
		return sandboxv1.SandboxStateRunning
	}
	return p.Spec.MemberState
}

// describePool is `status pool/NAME` for people.
func describePool(line func(k, v string), p *sandboxv1.SandboxPool) ([]metav1.Condition, *sandboxv1.ErrorStatus) {
	s := sandboxclient.PoolStatusOf(p)
	line("Name", p.Name)
	line("Namespace", p.Namespace)
	line("Kind", string(kindPool))
	line("Ready", fmt.Sprintf("%d/%d members ready to claim", s.Ready, s.Target))
	line("Replicas", fmt.Sprintf("%d asked (spec.replicas), %d target, %d unclaimed members", s.Replicas, s.Target, s.Members))
	line("Member state", string(memberState(p)))
	line("Source", sandboxSource(p.Spec.Template.Spec.Source))
	line("Claims/min", orNone(s.ClaimsPerMinute))
	line("Hits", fmt.Sprint(s.Hits))
	line("Misses", fmt.Sprint(s.Misses))
	line("Replenish", replenishText(s.Replenish))
	if p.Status.SnapshotID != "" {
		line("Snapshot ID", p.Status.SnapshotID)
	}
	return p.Status.Conditions, p.Status.LastError
}

// scalePool is `scale pool/NAME --replicas N`.
func scalePool(ctx context.Context, c *sandboxclient.Client, ns, name string, replicas int32, wait bool) (*sandboxv1.SandboxPool, error) {
	if _, err := c.ScalePool(ctx, ns, name, replicas); err != nil {
		return nil, err
	}
	if wait {
		return c.WaitPoolReady(ctx, ns, name)
	}
	return c.Clientset().SandboxV1alpha1().SandboxPools(ns).Get(ctx, name, metav1.GetOptions{})
}
