package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// specFlags are the create/up flags, one per field of the Sandbox spec.
type specFlags struct {
	runtime, gitURL, gitRevision, gitSecret, tarball, snapshot, snapshotID string
	gitDepth                                                               int32
	vcpus                                                                  int32
	ports                                                                  []int32
	timeoutSeconds                                                         int64
	env, envFromSecret, labels, setup                                      []string
	network                                                                string
	allowDomains                                                           []string
	persistent, stopped                                                    bool
	deletionPolicy, shutdownTime, shutdownPolicy                           string
}

func (f *specFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.runtime, "runtime", "", "spec.source.runtime: node22, node24, node26 or python3.13 (node24 when no other source is set)")
	fl.StringVar(&f.gitURL, "git", "", "spec.source.git.url: a repository to clone into /vercel/sandbox")
	fl.StringVar(&f.gitRevision, "git-revision", "", "spec.source.git.revision: branch, tag or commit")
	fl.Int32Var(&f.gitDepth, "git-depth", 0, "spec.source.git.depth: a shallow clone of this depth")
	fl.StringVar(&f.gitSecret, "git-secret", "", "spec.source.git.credentials.secretName: a Secret with username and password")
	fl.StringVar(&f.tarball, "tarball", "", "spec.source.tarball.url: a .tar.gz to extract into /vercel/sandbox")
	fl.StringVar(&f.snapshot, "snapshot", "", "spec.source.snapshotRef: boot from this SandboxSnapshot")
	fl.StringVar(&f.snapshotID, "snapshot-id", "", "spec.source.snapshotID: boot from this Vercel snapshot id")
	fl.Int32Var(&f.vcpus, "vcpus", 0, "spec.resources.vcpus: 1 or an even number up to 32")
	fl.Int32SliceVar(&f.ports, "port", nil, "spec.ports: a port to expose (repeatable)")
	fl.Int64Var(&f.timeoutSeconds, "timeout-seconds", 0, "spec.timeoutSeconds: the idle window after the last heartbeat (300 when unset)")
	fl.StringArrayVar(&f.env, "env", nil, "spec.env: KEY=VALUE (repeatable)")
	fl.StringArrayVar(&f.envFromSecret, "env-from-secret", nil, "spec.env valueFrom: KEY=SECRET:KEY, a key of a Secret in the namespace (repeatable)")
	fl.StringVar(&f.network, "network", "", "spec.networkPolicy.mode: AllowAll, DenyAll or Allowlist")
	fl.StringSliceVar(&f.allowDomains, "allow-domain", nil, "spec.networkPolicy.allowedDomains (with --network Allowlist; repeatable)")
	fl.BoolVar(&f.persistent, "persistent", true, "spec.persistent: keep the filesystem when a session stops")
	fl.StringArrayVar(&f.setup, "setup", nil, "spec.setup: a shell line run once with sh -c before Ready (repeatable, in order)")
	fl.StringVar(&f.deletionPolicy, "deletion-policy", "", "spec.deletionPolicy: Delete (default) or Retain")
	fl.BoolVar(&f.stopped, "stopped", false, "spec.state Stopped: create it paused")
	fl.StringVar(&f.shutdownTime, "shutdown-time", "", "spec.shutdownTime: RFC 3339 time, or a duration from now (e.g. 8h)")
	fl.StringVar(&f.shutdownPolicy, "shutdown-policy", "", "spec.shutdownPolicy: Stop (default) or Delete")
	fl.StringArrayVarP(&f.labels, "label", "l", nil, "metadata.labels: KEY=VALUE (repeatable)")
}

// sandbox builds the Sandbox the flags describe; only flags that were set
// are written, so the API server's defaults apply to the rest.
func (f *specFlags) sandbox(cmd *cobra.Command, namespace, name string) (*sandboxv1.Sandbox, error) {
	sbx := &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	spec := &sbx.Spec
	changed := cmd.Flags().Changed

	labels, err := keyValues("--label", f.labels)
	if err != nil {
		return nil, err
	}
	if len(labels) > 0 {
		sbx.Labels = labels
	}

	src := &spec.Source
	if f.runtime != "" {
		rt := sandboxv1.Runtime(f.runtime)
		src.Runtime = &rt
	}
	if f.gitURL != "" {
		src.Git = &sandboxv1.GitSource{URL: f.gitURL, Revision: f.gitRevision}
		if f.gitDepth > 0 {
			src.Git.Depth = &f.gitDepth
		}
		if f.gitSecret != "" {
			src.Git.Credentials = &sandboxv1.GitCredentials{SecretName: f.gitSecret}
		}
	} else if f.gitRevision != "" || f.gitDepth > 0 || f.gitSecret != "" {
		return nil, fmt.Errorf("--git-revision, --git-depth and --git-secret need --git")
	}
	if f.tarball != "" {
		src.Tarball = &sandboxv1.TarballSource{URL: f.tarball}
	}
	if f.snapshot != "" {
		src.SnapshotRef = &sandboxv1.LocalObjectReference{Name: f.snapshot}
	}
	if f.snapshotID != "" {
		src.SnapshotID = &f.snapshotID
	}
	if src.Git == nil && src.Tarball == nil && src.SnapshotRef == nil && src.SnapshotID == nil && src.Runtime == nil {
		rt := sandboxv1.Runtime("node24")
		src.Runtime = &rt
	}
	// More than one source is left to the API server, whose CRD rule names them.

	if f.vcpus > 0 {
		spec.Resources = &sandboxv1.SandboxResources{VCPUs: &f.vcpus}
	}
	spec.Ports = f.ports
	if f.timeoutSeconds > 0 {
		spec.TimeoutSeconds = &f.timeoutSeconds
	}
	env, err := keyValueList("--env", f.env)
	if err != nil {
		return nil, err
	}
	for _, kv := range env {
		v := kv[1]
		spec.Env = append(spec.Env, sandboxv1.EnvVar{Name: kv[0], Value: &v})
	}
	fromSecret, err := keyValueList("--env-from-secret", f.envFromSecret)
	if err != nil {
		return nil, err
	}
	for _, kv := range fromSecret {
		secret, key, ok := strings.Cut(kv[1], ":")
		if !ok || secret == "" || key == "" {
			return nil, fmt.Errorf("--env-from-secret %s=%s: want KEY=SECRET:KEY", kv[0], kv[1])
		}
		spec.Env = append(spec.Env, sandboxv1.EnvVar{Name: kv[0], ValueFrom: &sandboxv1.EnvVarSource{
			SecretKeyRef: sandboxv1.SecretKeySelector{Name: secret, Key: key}}})
	}
	if f.network != "" || len(f.allowDomains) > 0 {
		spec.NetworkPolicy = &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkMode(f.network), AllowedDomains: f.allowDomains}
		if f.network == "" {
			spec.NetworkPolicy.Mode = sandboxv1.NetworkAllowlist
		}
	}
	if changed("persistent") {
		spec.Persistent = &f.persistent
	}
	for i, line := range f.setup {
		spec.Setup = append(spec.Setup, sandboxv1.SetupCommand{
			Name: "setup-" + strconv.Itoa(i+1), Command: "sh", Args: []string{"-c", line}})
	}
	spec.DeletionPolicy = sandboxv1.DeletionPolicy(f.deletionPolicy)
	if f.stopped {
		spec.State = sandboxv1.SandboxStateStopped
	}
	if f.shutdownTime != "" {
		t, err := parseTimeOrDuration(f.shutdownTime)
		if err != nil {
			return nil, fmt.Errorf("--shutdown-time: %w", err)
		}
		spec.ShutdownTime = &metav1.Time{Time: t}
	}
	spec.ShutdownPolicy = sandboxv1.ShutdownPolicy(f.shutdownPolicy)
	return sbx, nil
}

func parseTimeOrDuration(s string) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return time.Now().Add(d).Truncate(time.Second), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration", s)
	}
	return t, nil
}

// keyValueList splits KEY=VALUE arguments, in order.
func keyValueList(flag string, args []string) ([][2]string, error) {
	var out [][2]string
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %q: want KEY=VALUE", flag, a)
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

func keyValues(flag string, args []string) (map[string]string, error) {
	list, err := keyValueList(flag, args)
	if err != nil || len(list) == 0 {
		return nil, err
	}
	m := make(map[string]string, len(list))
	for _, kv := range list {
		m[kv[0]] = kv[1]
	}
	return m, nil
}

// newCreateCommand is `create` (creates, fails if the name is taken, like
// kubectl create) or `up` (get or create, heartbeat, wait for Ready: what a
// session of work starts with).
func newCreateCommand(o *options, up bool) *cobra.Command {
	var (
		spec   specFlags
		wait   bool
		dryRun string
	)
	cmd := &cobra.Command{
		Use:   "create NAME [flags]",
		Short: "Create a Sandbox (flags mirror its spec)",
		Example: `  kubectl sandbox create dev --runtime node24 --port 3000 --setup 'npm ci' --wait
  kubectl sandbox create dev --git https://github.com/acme/app --dry-run=client -o yaml`,
		Args: cobra.ExactArgs(1),
	}
	if up {
		cmd.Use = "up NAME [flags]"
		cmd.Short = "Create a Sandbox unless it exists, wake it, and wait until it is Ready"
		cmd.Long = `up is what a session of work starts with: it creates the Sandbox unless one of that name
exists (an existing one is used as it is; the spec flags apply only to a new one), records a
heartbeat (which wakes an Idle Sandbox), and waits until it is Ready.`
		cmd.Example = `  kubectl sandbox up dev --runtime node24 --port 3000
  kubectl sandbox up dev -o jsonpath='{.status.routes[0].url}'`
	}
	spec.add(cmd)
	pf := printFlags(cmd, "created")
	timeout := timeoutFlag(cmd, 5*time.Minute)
	if !up {
		cmd.Flags().BoolVar(&wait, "wait", false, "Wait until the Sandbox is Ready")
		cmd.Flags().StringVar(&dryRun, "dry-run", "none", `"client" prints the Sandbox without sending it, "server" has the API server validate it without persisting it`)
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		name, err := sandboxName(args[0])
		if err != nil {
			return err
		}
		c, ns, err := o.client()
		if err != nil {
			return err
		}
		sbx, err := spec.sandbox(cmd, ns, name)
		if err != nil {
			return err
		}
		ctx, cancel := withTimeout(cmd.Context(), *timeout)
		defer cancel()
		if up {
			pf.NamePrintFlags.Operation = "ready"
			sbx, err = c.EnsureReady(ctx, sbx)
		} else {
			switch dryRun {
			case "none":
				sbx, err = c.Clientset().SandboxV1alpha1().Sandboxes(ns).Create(ctx, sbx, metav1.CreateOptions{})
			case "client":
				pf.NamePrintFlags.Operation = "created (dry run)"
			case "server":
				pf.NamePrintFlags.Operation = "created (server dry run)"
				sbx, err = c.Clientset().SandboxV1alpha1().Sandboxes(ns).Create(ctx, sbx, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			default:
				return fmt.Errorf(`--dry-run %q: want "none", "client" or "server"`, dryRun)
			}
			if err == nil && wait && dryRun == "none" {
				sbx, err = c.WaitReady(ctx, ns, name)
			}
		}
		return printResult(pf, sbx, err, o.Out)
	}
	return cmd
}
