package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"sigs.k8s.io/yaml"

	"github.com/getsentry/sandbox-controller/internal/version"
)

// defaultManagerNamespace is where config/default and the README's Helm
// install put the manager.
const defaultManagerNamespace = "sandbox-controller-system"

// managerVersion is what one manager's leader election Lease says: the
// manager writes its version and commit as labels on the Lease at every
// renewal (internal/version.LeaseLabels), so this is the build of the replica
// that holds the Lease, the one that reconciles. With --shards there is one
// Lease per shard.
type managerVersion struct {
	Namespace string `json:"namespace"`
	Lease     string `json:"lease"`
	Holder    string `json:"holder,omitempty"`
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	RenewTime string `json:"renewTime,omitempty"`
	// Stale is set when the Lease has not been renewed within its
	// duration: no manager holds it now, and the labels are the last
	// leader's.
	Stale bool `json:"stale,omitempty"`
}

type versionOutput struct {
	Plugin   version.Info     `json:"plugin"`
	Managers []managerVersion `json:"managers,omitempty"`
}

func newVersionCommand(o *options) *cobra.Command {
	var (
		clientOnly bool
		managerNS  string
		output     string
	)
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version and the version of the manager running in the cluster",
		Long: `Print the version and commit of this plugin, and of the sandbox-controller manager in the cluster.

The manager's version is read from the labels its leader writes on its leader election Lease
(app.kubernetes.io/version, sandbox.sentry.io/revision) in --manager-namespace; reading it needs
permission to list Leases there. A manager running without --leader-elect has no Lease; use
--client for the plugin's version alone.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := versionOutput{Plugin: version.Get()}
			var managerErr error
			if !clientOnly {
				ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
				defer cancel()
				out.Managers, managerErr = o.managerVersions(ctx, managerNS, cmd.Flags().Changed("manager-namespace"))
			}
			switch output {
			case "":
				fmt.Fprintf(o.Out, "Plugin version:  %s\n", out.Plugin)
				for _, m := range out.Managers {
					fmt.Fprintf(o.Out, "Manager version: %s\n", m)
				}
			case "json", "yaml":
				b, err := json.MarshalIndent(out, "", "  ")
				if err != nil {
					return err
				}
				if output == "yaml" {
					if b, err = yaml.JSONToYAML(b); err != nil {
						return err
					}
				}
				fmt.Fprintf(o.Out, "%s\n", strings.TrimSuffix(string(b), "\n"))
			default:
				return fmt.Errorf("--output %q: want json or yaml (or nothing)", output)
			}
			if managerErr != nil {
				return fmt.Errorf("manager version: %w", managerErr)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "Print the plugin's version only; do not contact the cluster")
	cmd.Flags().StringVar(&managerNS, "manager-namespace", defaultManagerNamespace, "Namespace the manager runs in (where its leader election Lease is); when unset and the default has none, every namespace is searched")
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: json or yaml")
	return cmd
}

func (m managerVersion) String() string {
	s := fmt.Sprintf("%s (revision %s; Lease %s/%s", m.Version, version.Info{Revision: m.Revision}.ShortRevision(), m.Namespace, m.Lease)
	switch {
	case m.Holder == "":
		s += ", released: no manager holds it"
	case m.Stale:
		s += fmt.Sprintf(", last renewed %s by %s: no manager holds it now", m.RenewTime, m.Holder)
	default:
		s += ", held by " + m.Holder
	}
	return s + ")"
}

// managerVersions reads the manager's Leases in ns, or, when ns is the
// default and holds none (explicit false), in every namespace the caller may list.
func (o *options) managerVersions(ctx context.Context, ns string, explicit bool) ([]managerVersion, error) {
	cfg, err := o.config.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	c, err := coordinationclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	selector := version.LabelName + "=" + version.Name
	list, err := c.Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("list the manager's Leases in namespace %s: %w", ns, err)
	}
	if len(list.Items) == 0 && !explicit {
		if all, err := c.Leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: selector}); err == nil {
			list = all
		}
	}
	if len(list.Items) == 0 {
		where := "namespace " + ns
		if !explicit {
			where += " (nor in any namespace you may list)"
		}
		return nil, fmt.Errorf("no Lease labelled %s in %s: the manager writes its version on its leader election Lease; is it installed there (--manager-namespace), running with --leader-elect, and v0.1.0 or later?", selector, where)
	}
	now := time.Now()
	var out []managerVersion
	for _, l := range list.Items {
		out = append(out, fromLease(&l, now))
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].Lease < out[j].Namespace+"/"+out[j].Lease
	})
	return out, nil
}

func fromLease(l *coordinationv1.Lease, now time.Time) managerVersion {
	m := managerVersion{
		Namespace: l.Namespace,
		Lease:     l.Name,
		Version:   l.Labels[version.LabelVersion],
		Revision:  l.Labels[version.LabelRevision],
	}
	if m.Version == "" {
		m.Version = version.Unknown
	}
	if m.Revision == "" {
		m.Revision = version.Unknown
	}
	if l.Spec.HolderIdentity != nil {
		m.Holder = *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil {
		m.RenewTime = l.Spec.RenewTime.UTC().Format(time.RFC3339)
		if d := l.Spec.LeaseDurationSeconds; d != nil && now.Sub(l.Spec.RenewTime.Time) > time.Duration(*d)*time.Second {
			m.Stale = true
		}
	}
	return m
}
