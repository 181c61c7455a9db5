package main

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/getsentry/sandbox-controller/pkg/client/clientset/versioned/scheme"
	"github.com/getsentry/sandbox-controller/pkg/sandboxclient"
)

// listPrint says how ls prints its table.
type listPrint struct {
	wide, allNamespaces bool
}

// resources are the API resources of the kinds ls lists.
var resources = map[resourceKind]string{
	kindSandbox:  "sandboxes",
	kindSnapshot: "sandboxsnapshots",
	kindFork:     "sandboxforks",
}

// printTable prints the list as `kubectl get` does: the API server renders
// the table from the CRD's printer columns (-o wide adds those of priority
// 1), so `kubectl sandbox ls` and `kubectl get sbx` show the same columns.
// Values pass through the control-character escaping of every other table.
func printTable(ctx context.Context, c *sandboxclient.Client, kind resourceKind, ns string, opts metav1.ListOptions, lp listPrint, o *options) error {
	raw, err := c.Clientset().SandboxV1alpha1().RESTClient().Get().
		Namespace(ns).Resource(resources[kind]).
		VersionedParams(&opts, scheme.ParameterCodec).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").
		DoRaw(ctx)
	if err != nil {
		return err
	}
	table := &metav1.Table{}
	if err := json.Unmarshal(raw, table); err != nil {
		return fmt.Errorf("the API server's table of %s: %w", resources[kind], err)
	}
	if len(table.Rows) == 0 {
		fmt.Fprintln(o.ErrOut, "No resources found.")
		return nil
	}
	// The namespace column comes from each row's object metadata.
	for i := range table.Rows {
		if len(table.Rows[i].Object.Raw) > 0 && table.Rows[i].Object.Object == nil {
			m := &metav1.PartialObjectMetadata{}
			if err := json.Unmarshal(table.Rows[i].Object.Raw, m); err == nil {
				table.Rows[i].Object.Object = m
			}
		}
	}
	p := printers.NewTablePrinter(printers.PrintOptions{Wide: lp.wide, WithNamespace: lp.allNamespaces})
	return p.PrintObj(table, escapingWriter{o.Out})
}
