package main

// kubectl sandbox usage: what Sandboxes and SandboxSnapshots used on Vercel
// (their status.usage.total) and what it cost at their class's prices, per
// object, namespace or class.

import (
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/cost"
)

// usageRow is one line of the report: one object, namespace or class.
type usageRow struct {
	Namespace      string            `json:"namespace,omitempty"`
	Kind           string            `json:"kind,omitempty"`
	Name           string            `json:"name,omitempty"`
	Class          string            `json:"class"`
	Objects        int               `json:"objects"`
	ActiveCPUHours sandboxv1.Decimal `json:"activeCPUHours"`
	MemoryGBHours  sandboxv1.Decimal `json:"memoryGBHours"`
	TransferGB     sandboxv1.Decimal `json:"transferGB"`
	SnapshotBytes  int64             `json:"snapshotBytes"`
	Cost           sandboxv1.Decimal `json:"cost"`
	Currency       string            `json:"currency"`

	metered cost.Metered
	money   *big.Rat
}

// usageReport is `kubectl sandbox usage -o json`.
type usageReport struct {
	By   string     `json:"by"`
	Rows []usageRow `json:"rows"`
	// Note says what cost covers.
	Note string `json:"note"`
}

const usageNote = "cost is status.usage.total (active CPU, provisioned memory, transfer) at the class's spec.prices, Vercel's list prices where unset; creations and snapshot storage over time are not in it"

// usedObj is one object's usage as the report reads it.
type usedObj struct {
	namespace, kind, name, class string
	usage                        *sandboxv1.SandboxUsage
	snapshotBytes                int64
}

// buildUsageReport groups objs by "sandbox", "namespace" or "class" and
// prices them. Pure, so that it is table-tested.
func buildUsageReport(objs []usedObj, prices map[string]*sandboxv1.SandboxPrices, by string) (usageReport, error) {
	rows := map[string]*usageRow{}
	var keys []string
	for _, o := range objs {
		var total *sandboxv1.UsageAmounts
		if o.usage != nil {
			total = o.usage.Total
		}
		m := cost.FromUsage(total)
		money, currency, err := cost.Money(m, prices[o.class])
		if err != nil {
			return usageReport{}, fmt.Errorf("SandboxClass %s spec.%w", o.class, err)
		}
		key, row := usageKey(o, by, currency)
		r := rows[key]
		if r == nil {
			r = &row
			r.money = new(big.Rat)
			rows[key] = r
			keys = append(keys, key)
		}
		r.Objects++
		r.metered = r.metered.Add(m)
		r.money.Add(r.money, money)
		r.SnapshotBytes += o.snapshotBytes
	}
	sort.Strings(keys)
	out := usageReport{By: by, Note: usageNote, Rows: []usageRow{}}
	for _, k := range keys {
		r := rows[k]
		q := cost.Quantities(r.metered)
		r.ActiveCPUHours, r.MemoryGBHours = cost.Format(q[sandboxv1.BudgetActiveCPUHours]), cost.Format(q[sandboxv1.BudgetMemoryGBHours])
		r.TransferGB, r.Cost = cost.Format(q[sandboxv1.BudgetTransferGB]), cost.Format(r.money)
		out.Rows = append(out.Rows, *r)
	}
	return out, nil
}

// usageKey is the group of o and an empty row for it. Amounts of different
// currencies are never added: the currency is part of every group.
func usageKey(o usedObj, by, currency string) (string, usageRow) {
	switch by {
	case "namespace":
		return o.namespace + "\x00" + currency, usageRow{Namespace: o.namespace, Class: "*", Currency: currency}
	case "class":
		return o.class + "\x00" + currency, usageRow{Class: o.class, Currency: currency}
	}
	return o.namespace + "\x00" + o.kind + "\x00" + o.name, usageRow{Namespace: o.namespace, Kind: o.kind, Name: o.name, Class: o.class, Currency: currency}
}

func newUsageCommand(o *options) *cobra.Command {
	var (
		allNamespaces bool
		by, output    string
	)
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Show what Sandboxes and SandboxSnapshots used on Vercel and what it cost, per object, namespace or class",
		Long: `usage sums status.usage.total of the Sandboxes and SandboxSnapshots (builders) and prices it with the
spec.prices of their SandboxClass (Vercel's list prices where a class sets none, or for objects of no class).
SandboxForks are not listed: their usage is their children's.`,
		Example: `  kubectl sandbox usage
  kubectl sandbox usage --by namespace -A
  kubectl sandbox usage --by class -A -o json`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "Count every namespace")
	cmd.Flags().StringVar(&by, "by", "sandbox", "Group by sandbox, namespace or class")
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: json, or a table when empty")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if by != "sandbox" && by != "namespace" && by != "class" {
			return fmt.Errorf("--by %q: want sandbox, namespace or class", by)
		}
		if output != "" && output != "json" {
			return fmt.Errorf("-o %q: want json, or no -o for a table", output)
		}
		objs, prices, err := readUsage(cmd, o, allNamespaces)
		if err != nil {
			return err
		}
		report, err := buildUsageReport(objs, prices, by)
		if err != nil {
			return err
		}
		if output == "json" {
			enc := json.NewEncoder(o.Out)
			enc.SetIndent("", "  ")
			return enc.Encode(report)
		}
		if len(report.Rows) == 0 {
			fmt.Fprintln(o.ErrOut, "No resources found.")
			return nil
		}
		return printUsage(o.Out, report)
	}
	return cmd
}

// readUsage lists the objects and the classes' prices. A user who may not
// list SandboxClasses (they are cluster-scoped) sees list prices, with a
// warning.
func readUsage(cmd *cobra.Command, o *options, all bool) ([]usedObj, map[string]*sandboxv1.SandboxPrices, error) {
	c, ns, err := o.client()
	if err != nil {
		return nil, nil, err
	}
	if all {
		ns = metav1.NamespaceAll
	}
	ctx := cmd.Context()
	v1 := c.Clientset().SandboxV1alpha1()
	sbxs, err := v1.Sandboxes(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	snaps, err := v1.SandboxSnapshots(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	var objs []usedObj
	for _, s := range sbxs.Items {
		objs = append(objs, usedObj{s.Namespace, "Sandbox", s.Name, s.Labels[sandboxv1.LabelClass], s.Status.Usage, 0})
	}
	for _, s := range snaps.Items {
		objs = append(objs, usedObj{s.Namespace, "SandboxSnapshot", s.Name, s.Labels[sandboxv1.LabelClass], s.Status.Usage, s.Status.SizeBytes})
	}
	prices := map[string]*sandboxv1.SandboxPrices{}
	classes, err := v1.SandboxClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(o.ErrOut, "Warning: cannot read the SandboxClasses' prices (%v); showing Vercel's list prices\n", err)
		return objs, prices, nil
	}
	for i := range classes.Items {
		prices[classes.Items[i].Name] = classes.Items[i].Spec.Prices
	}
	return objs, prices, nil
}

func printUsage(w io.Writer, r usageReport) error {
	tw := tabwriter.NewWriter(escapingWriter{w}, 0, 8, 2, ' ', 0)
	head, cols := "NAMESPACE\tKIND\tNAME\tCLASS", func(u usageRow) string { return u.Namespace + "\t" + u.Kind + "\t" + u.Name + "\t" + orNone(u.Class) }
	switch r.By {
	case "namespace":
		head, cols = "NAMESPACE\tOBJECTS", func(u usageRow) string { return fmt.Sprintf("%s\t%d", u.Namespace, u.Objects) }
	case "class":
		head, cols = "CLASS\tOBJECTS", func(u usageRow) string { return fmt.Sprintf("%s\t%d", orNone(u.Class), u.Objects) }
	}
	fmt.Fprintln(tw, head+"\tACTIVE CPU (H)\tMEMORY (GB-H)\tTRANSFER (GB)\tSNAPSHOT BYTES\tCOST")
	for _, u := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s %s\n", cols(u), u.ActiveCPUHours, u.MemoryGBHours, u.TransferGB, u.SnapshotBytes, u.Cost, u.Currency)
	}
	return tw.Flush()
}
