package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/pkg/sandboxclient"
)

// specFlags are the create/up flags, one per field of the Sandbox spec.
type specFlags struct {
	runtime, image, gitURL, gitRevision, gitSecret, tarball, snapshot, snapshotID string
	gitDepth                                                                      int32
	vcpus                                                                         int32
	ports                                                                         []int32
	timeoutSeconds                                                                int64
	env, envFromSecret, labels, setup                                             []string
	network                                                                       string
	allowDomains                                                                  []string
	persistent, stopped                                                           bool
	deletionPolicy, shutdownTime, shutdownPolicy                                  string
}

func (f *specFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.runtime, "runtime", "", "spec.source.runtime: node22, node24, node26 or python3.13 (node24 when no other source is set)")
	fl.StringVar(&f.gitURL, "git", "", "spec.source.git.url: a repository to clone into /vercel/sandbox")
	fl.StringVar(&f.gitRevision, "git-revision", "", "spec.source.git.revision: branch, tag or commit")
	fl.Int32Var(&f.gitDepth, "git-depth", 0, "spec.source.git.depth: a shallow clone of this depth")
	fl.StringVar(&f.gitSecret, "git-secret", "", "spec.source.git.credentials.secretName: a Secret with username and password")
	fl.StringVar(&f.image, "image", "", "spec.source.image: one of Vercel's managed images (vercel/sandbox/universal, vercel/sandbox/node:24, vercel/sandbox/python:3.14, ...) or a team's own image (needs use on vercelimages)")
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
	if err := f.overlay(cmd, sbx); err != nil {
		return nil, err
	}
	if src := &sbx.Spec.Source; src.Git == nil && src.Tarball == nil && src.SnapshotRef == nil && src.SnapshotID == nil && src.Runtime == nil {
		rt := sandboxv1.Runtime("node24")
		src.Runtime = &rt
	}
	return sbx, nil
}

// overlay writes the flags that were set onto sbx, leaving the rest as it
// is: onto an empty Sandbox for a plain create, onto a pool's template for
// create --pool. A source flag replaces the whole source; --env and
// --env-from-secret replace a variable of the same name or add one.
func (f *specFlags) overlay(cmd *cobra.Command, sbx *sandboxv1.Sandbox) error {
	spec := &sbx.Spec
	labels, err := keyValues("--label", f.labels)
	if err != nil {
		return err
	}
	for k, v := range labels {
		metav1.SetMetaDataLabel(&sbx.ObjectMeta, k, v)
	}
	if err := f.overlaySource(&spec.Source); err != nil {
		return err
	}
	if err := f.overlayEnv(spec); err != nil {
		return err
	}
	if f.vcpus > 0 {
		spec.Resources = &sandboxv1.SandboxResources{VCPUs: &f.vcpus}
	}
	if len(f.ports) > 0 {
		spec.Ports = f.ports
	}
	if f.timeoutSeconds > 0 {
		spec.TimeoutSeconds = &f.timeoutSeconds
	}
	if f.network != "" || len(f.allowDomains) > 0 {
		spec.NetworkPolicy = &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkMode(f.network), AllowedDomains: f.allowDomains}
		if f.network == "" {
			spec.NetworkPolicy.Mode = sandboxv1.NetworkAllowlist
		}
	}
	if cmd.Flags().Changed("persistent") {
		spec.Persistent = &f.persistent
	}
	if len(f.setup) > 0 {
		spec.Setup = nil
		for i, line := range f.setup {
			spec.Setup = append(spec.Setup, sandboxv1.SetupCommand{
				Name: "setup-" + strconv.Itoa(i+1), Command: "sh", Args: []string{"-c", line}})
		}
	}
	return f.overlayLifecycle(spec)
}

// overlaySource replaces the source when a source flag is set.
func (f *specFlags) overlaySource(src *sandboxv1.SandboxSource) error {
	if f.gitURL == "" && (f.gitRevision != "" || f.gitDepth > 0 || f.gitSecret != "") {
		return fmt.Errorf("--git-revision, --git-depth and --git-secret need --git")
	}
	if f.runtime == "" && f.image == "" && f.gitURL == "" && f.tarball == "" && f.snapshot == "" && f.snapshotID == "" {
		return nil
	}
	*src = sandboxv1.SandboxSource{}
	if f.runtime != "" {
		rt := sandboxv1.Runtime(f.runtime)
		src.Runtime = &rt
	}
	if f.image != "" {
		img := sandboxv1.ImageReference(f.image)
		src.Image = &img
	}
	if f.gitURL != "" {
		src.Git = &sandboxv1.GitSource{URL: f.gitURL, Revision: f.gitRevision}
		if f.gitDepth > 0 {
			src.Git.Depth = &f.gitDepth
		}
		if f.gitSecret != "" {
			src.Git.Credentials = &sandboxv1.GitCredentials{SecretName: f.gitSecret}
		}
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
	// More than one source is left to the API server, whose CRD rule names them.
	return nil
}

// overlayEnv sets --env and --env-from-secret variables, in order.
func (f *specFlags) overlayEnv(spec *sandboxv1.SandboxSpec) error {
	set := func(v sandboxv1.EnvVar) {
		for i := range spec.Env {
			if spec.Env[i].Name == v.Name {
				spec.Env[i] = v
				return
			}
		}
		spec.Env = append(spec.Env, v)
	}
	env, err := keyValueList("--env", f.env)
	if err != nil {
		return err
	}
	for _, kv := range env {
		v := kv[1]
		set(sandboxv1.EnvVar{Name: kv[0], Value: &v})
	}
	fromSecret, err := keyValueList("--env-from-secret", f.envFromSecret)
	if err != nil {
		return err
	}
	for _, kv := range fromSecret {
		secret, key, ok := strings.Cut(kv[1], ":")
		if !ok || secret == "" || key == "" {
			return fmt.Errorf("--env-from-secret %s=%s: want KEY=SECRET:KEY", kv[0], kv[1])
		}
		set(sandboxv1.EnvVar{Name: kv[0], ValueFrom: &sandboxv1.EnvVarSource{
			SecretKeyRef: sandboxv1.SecretKeySelector{Name: secret, Key: key}}})
	}
	return nil
}

// overlayLifecycle sets state, deletion and shutdown.
func (f *specFlags) overlayLifecycle(spec *sandboxv1.SandboxSpec) error {
	if f.deletionPolicy != "" {
		spec.DeletionPolicy = sandboxv1.DeletionPolicy(f.deletionPolicy)
	}
	if f.stopped {
		spec.State = sandboxv1.SandboxStateStopped
	}
	if f.shutdownTime != "" {
		t, err := parseTimeOrDuration(f.shutdownTime)
		if err != nil {
			return fmt.Errorf("--shutdown-time: %w", err)
		}
		spec.ShutdownTime = &metav1.Time{Time: t}
	}
	if f.shutdownPolicy != "" {
		spec.ShutdownPolicy = sandboxv1.ShutdownPolicy(f.shutdownPolicy)
	}
	return nil
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
		pool   poolFlags
		wait   bool
		dryRun string
	)
	cmd := &cobra.Command{
		Use:   "create NAME [flags]",
		Short: "Create a Sandbox (flags mirror its spec)",
		Example: `  kubectl sandbox create dev --runtime node24 --port 3000 --setup 'npm ci' --wait
  kubectl sandbox create dev --git https://github.com/acme/app --dry-run=client -o yaml
  kubectl sandbox create conversation-1 --pool workspace-pool --network DenyAll --wait`,
		Args: cobra.ExactArgs(1),
	}
	if up {
		cmd.Use = "up NAME [flags]"
		cmd.Short = "Create a Sandbox unless it exists, wake it, and wait until it is Ready"
		cmd.Long = `up is what a session of work starts with: it creates the Sandbox unless one of that name
exists (an existing one is used as it is; the spec flags apply only to a new one), records a
heartbeat (which wakes an Idle Sandbox), and waits until it is Ready.

With --pool it claims a ready member of that SandboxPool: the new Sandbox's spec is the pool's
template with spec.poolRef, and it prints whether a member was claimed or why it was created cold.`
		cmd.Example = `  kubectl sandbox up dev --runtime node24 --port 3000
  kubectl sandbox up conversation-1 --pool workspace-pool --timeout-seconds 600
  kubectl sandbox up dev -o jsonpath='{.status.routes[0].url}'`
	}
	spec.add(cmd)
	pool.add(cmd)
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
		ctx, cancel := withTimeout(cmd.Context(), *timeout)
		defer cancel()
		if pool.name != "" {
			return pool.run(ctx, cmd, o, c, &spec, poolRun{ns: ns, name: name, up: up, wait: wait, dryRun: dryRun, pf: pf})
		}
		if pool.allowCold {
			return fmt.Errorf("--allow-cold applies with --pool only")
		}
		sbx, err := spec.sandbox(cmd, ns, name)
		if err != nil {
			return err
		}
		if up {
			pf.NamePrintFlags.Operation = "ready"
			sbx, err = c.EnsureReady(ctx, sbx)
		} else {
			sbx, err = createOrDryRun(ctx, c, sbx, dryRun, pf)
			if err == nil && wait && dryRun == "none" {
				sbx, err = c.WaitReady(ctx, ns, name)
			}
		}
		return printResult(pf, sbx, err, o.Out)
	}
	return cmd
}

// createOrDryRun creates sbx, or with --dry-run client returns it as it is,
// or with server has the API server validate it without persisting it.
func createOrDryRun(ctx context.Context, c *sandboxclient.Client, sbx *sandboxv1.Sandbox, dryRun string, pf *genericclioptions.PrintFlags) (*sandboxv1.Sandbox, error) {
	sandboxes := c.Clientset().SandboxV1alpha1().Sandboxes(sbx.Namespace)
	switch dryRun {
	case "none":
		return sandboxes.Create(ctx, sbx, metav1.CreateOptions{})
	case "client":
		pf.NamePrintFlags.Operation = "created (dry run)"
		return sbx, nil
	case "server":
		pf.NamePrintFlags.Operation = "created (server dry run)"
		return sandboxes.Create(ctx, sbx, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	}
	return nil, fmt.Errorf(`--dry-run %q: want "none", "client" or "server"`, dryRun)
}
