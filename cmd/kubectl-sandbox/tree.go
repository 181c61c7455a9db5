package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// treeNode is one object in the lineage tree, as -o json|yaml prints it.
type treeNode struct {
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	Phase string `json:"phase,omitempty"`
	// Ready is the Ready condition of a Sandbox, readyToUse of a snapshot,
	// ready/wanted children of a fork.
	Ready string `json:"ready,omitempty"`
	// Note says where a root came from when that no longer exists.
	Note     string      `json:"note,omitempty"`
	Children []*treeNode `json:"children,omitempty"`

	created metav1.Time
	parent  string // key of the parent; "" for a root
}

func nodeKey(kind resourceKind, name string) string { return string(kind) + "/" + name }

// lineage builds the forest of one namespace's objects: a snapshot under
// the Sandbox it captured (or the snapshot its recipe builds on, or the one
// it imports), a fork under its source, a fork's own capture and children
// under the fork, and a Sandbox booted from a snapshot under that snapshot.
func lineage(sandboxes []sandboxv1.Sandbox, snapshots []sandboxv1.SandboxSnapshot, forks []sandboxv1.SandboxFork) (roots []*treeNode, nodes map[string]*treeNode) {
	nodes = map[string]*treeNode{}
	byVercelID := map[string]string{} // Vercel snapshot id → key of its SandboxSnapshot
	for _, p := range snapshots {
		n := &treeNode{Kind: string(kindSnapshot), Name: p.Name, Phase: string(p.Status.Phase), Ready: fmt.Sprint(p.Status.ReadyToUse), created: p.CreationTimestamp}
		nodes[nodeKey(kindSnapshot, p.Name)] = n
		if p.Status.SnapshotID != "" {
			byVercelID[p.Status.SnapshotID] = nodeKey(kindSnapshot, p.Name)
		}
	}
	for _, f := range forks {
		nodes[nodeKey(kindFork, f.Name)] = &treeNode{Kind: string(kindFork), Name: f.Name, Phase: string(f.Status.Phase),
			Ready: fmt.Sprintf("%d/%d", f.Status.ReadyReplicas, forkWant(&f)), created: f.CreationTimestamp}
	}
	for _, s := range sandboxes {
		nodes[nodeKey(kindSandbox, s.Name)] = &treeNode{Kind: string(kindSandbox), Name: s.Name, Phase: string(s.Status.Phase),
			Ready: readyText(s.Status.Conditions), created: s.CreationTimestamp}
	}
	// link sets n's parent when it exists, and otherwise notes where n came from.
	link := func(n *treeNode, parent, what string) bool {
		if _, ok := nodes[parent]; ok {
			n.parent = parent
			return true
		}
		n.Note = "from " + what + " (not found)"
		return false
	}
	for _, p := range snapshots {
		n := nodes[nodeKey(kindSnapshot, p.Name)]
		src := p.Spec.Source
		switch owner := metav1.GetControllerOf(&p); {
		case owner != nil && owner.Kind == string(kindFork) && link(n, nodeKey(kindFork, owner.Name), "sandboxfork/"+owner.Name):
		case src.SandboxRef != nil:
			link(n, nodeKey(kindSandbox, src.SandboxRef.Name), "sandbox/"+src.SandboxRef.Name)
		case src.Recipe != nil && src.Recipe.BaseSnapshotRef != nil:
			link(n, nodeKey(kindSnapshot, src.Recipe.BaseSnapshotRef.Name), "sandboxsnapshot/"+src.Recipe.BaseSnapshotRef.Name)
		case src.SnapshotID != nil && byVercelID[*src.SnapshotID] != "" && byVercelID[*src.SnapshotID] != nodeKey(kindSnapshot, p.Name):
			n.parent = byVercelID[*src.SnapshotID]
		}
	}
	for _, f := range forks {
		n := nodes[nodeKey(kindFork, f.Name)]
		switch src := f.Spec.Source; {
		case src.SandboxRef != nil:
			link(n, nodeKey(kindSandbox, src.SandboxRef.Name), "sandbox/"+src.SandboxRef.Name)
		case src.SnapshotRef != nil:
			link(n, nodeKey(kindSnapshot, src.SnapshotRef.Name), "sandboxsnapshot/"+src.SnapshotRef.Name)
		}
	}
	for _, s := range sandboxes {
		n := nodes[nodeKey(kindSandbox, s.Name)]
		src := s.Spec.Source
		switch fork := s.Labels[sandboxv1.LabelFork]; {
		case fork != "" && link(n, nodeKey(kindFork, fork), "sandboxfork/"+fork):
		case src.SnapshotRef != nil:
			link(n, nodeKey(kindSnapshot, src.SnapshotRef.Name), "sandboxsnapshot/"+src.SnapshotRef.Name)
		case src.SnapshotID != nil && byVercelID[*src.SnapshotID] != "":
			n.parent = byVercelID[*src.SnapshotID]
		}
	}

	keys := make([]string, 0, len(nodes))
	for k := range nodes {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return before(nodes[keys[i]], nodes[keys[j]]) })
	for _, k := range keys {
		n := nodes[k]
		if n.parent == "" {
			roots = append(roots, n)
		} else {
			nodes[n.parent].Children = append(nodes[n.parent].Children, n)
		}
	}
	// A cycle of references (not made by the operator, but possible by
	// hand) has no root: show its oldest member as one rather than lose it.
	seen := map[*treeNode]bool{}
	var mark func(*treeNode)
	mark = func(n *treeNode) {
		if seen[n] {
			return
		}
		seen[n] = true
		for _, c := range n.Children {
			mark(c)
		}
	}
	for _, r := range roots {
		mark(r)
	}
	for _, k := range keys {
		if n := nodes[k]; !seen[n] {
			parent := nodes[n.parent]
			for i, c := range parent.Children {
				if c == n {
					parent.Children = append(parent.Children[:i:i], parent.Children[i+1:]...)
				}
			}
			n.parent, n.Note = "", "part of a cycle of references"
			roots = append(roots, n)
			mark(n)
		}
	}
	return roots, nodes
}

func before(a, b *treeNode) bool {
	if !a.created.Equal(&b.created) {
		return a.created.Before(&b.created)
	}
	if a.Kind != b.Kind {
		return a.Kind < b.Kind
	}
	return a.Name < b.Name
}

// rootOf walks up from key to its root.
func rootOf(nodes map[string]*treeNode, key string) *treeNode {
	n := nodes[key]
	for seen := map[*treeNode]bool{}; n.parent != "" && !seen[n]; n = nodes[n.parent] {
		seen[n] = true
	}
	return n
}

func (n *treeNode) label() string {
	s := fmt.Sprintf("%s/%s", kindPrefix(n.Kind), n.Name)
	phase := orNone(n.Phase)
	switch resourceKind(n.Kind) {
	case kindSandbox:
		s += fmt.Sprintf(" (%s, Ready=%s)", phase, n.Ready)
	case kindSnapshot:
		s += fmt.Sprintf(" (%s, readyToUse=%s)", phase, n.Ready)
	case kindFork:
		s += fmt.Sprintf(" (%s, %s ready)", phase, n.Ready)
	}
	if n.Note != "" {
		s += " " + n.Note
	}
	return s
}

func kindPrefix(kind string) string {
	switch resourceKind(kind) {
	case kindSnapshot:
		return "sandboxsnapshot"
	case kindFork:
		return "sandboxfork"
	}
	return "sandbox"
}

func printTree(w io.Writer, n *treeNode, prefix, branch string) {
	fmt.Fprintln(w, escapeControl(branch+n.label()))
	for i, c := range n.Children {
		if i == len(n.Children)-1 {
			printTree(w, c, prefix+"    ", prefix+"└── ")
		} else {
			printTree(w, c, prefix+"│   ", prefix+"├── ")
		}
	}
}

func printNames(w io.Writer, n *treeNode) {
	fmt.Fprintln(w, qualified(resourceKind(n.Kind), n.Name))
	for _, c := range n.Children {
		printNames(w, c)
	}
}

func newTreeCommand(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "tree [NAME|TYPE/NAME]",
		Short: "Show the lineage of Sandboxes, snapshots and forks in the namespace",
		Long: `tree shows where each filesystem came from: a snapshot under the Sandbox it captured, a
Sandbox booted from a snapshot under it, a fork under its source with its own capture and its
children under it. With NAME (a Sandbox, or TYPE/NAME) it shows the one tree that holds it,
from its oldest ancestor still present. A root whose source is deleted says so.`,
		Example: `  kubectl sandbox tree
  kubectl sandbox tree dev -o json`,
		Args: cobra.MaximumNArgs(1),
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json, yaml or name (the objects in tree order)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		switch output {
		case "", "json", "yaml", "name":
		default:
			return fmt.Errorf("--output %q: tree prints json, yaml or name", output)
		}
		c, ns, err := o.client()
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		v1 := c.Clientset().SandboxV1alpha1()
		sbxs, err := v1.Sandboxes(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		snaps, err := v1.SandboxSnapshots(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		forks, err := v1.SandboxForks(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		roots, nodes := lineage(sbxs.Items, snaps.Items, forks.Items)
		if len(args) == 1 {
			kind, name, err := parseRef(args[0])
			if err != nil {
				return err
			}
			if nodes[nodeKey(kind, name)] == nil {
				return fmt.Errorf("%s %q not found in namespace %s", kind, name, ns)
			}
			roots = []*treeNode{rootOf(nodes, nodeKey(kind, name))}
		}
		if roots == nil {
			roots = []*treeNode{}
		}
		switch output {
		case "json":
			b, err := json.MarshalIndent(roots, "", "    ")
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.Out, "%s\n", b)
			return err
		case "yaml":
			b, err := yaml.Marshal(roots)
			if err != nil {
				return err
			}
			_, err = o.Out.Write(b)
			return err
		case "name":
			for _, r := range roots {
				printNames(o.Out, r)
			}
			return nil
		}
		if len(roots) == 0 {
			fmt.Fprintln(o.ErrOut, "No resources found.")
		}
		for _, r := range roots {
			printTree(o.Out, r, "", "")
		}
		return nil
	}
	return cmd
}
