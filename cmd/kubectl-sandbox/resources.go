package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/pkg/sandboxclient"
)

// getObject reads one object of a kind.
func getObject(ctx context.Context, c *sandboxclient.Client, kind resourceKind, ns, name string) (runtime.Object, error) {
	v1 := c.Clientset().SandboxV1alpha1()
	switch kind {
	case kindSnapshot:
		return v1.SandboxSnapshots(ns).Get(ctx, name, metav1.GetOptions{})
	case kindFork:
		return v1.SandboxForks(ns).Get(ctx, name, metav1.GetOptions{})
	case kindPool:
		return v1.SandboxPools(ns).Get(ctx, name, metav1.GetOptions{})
	}
	return v1.Sandboxes(ns).Get(ctx, name, metav1.GetOptions{})
}

// qualified is the name kubectl prints for an object (-o name).
func qualified(kind resourceKind, name string) string {
	return strings.ToLower(string(kind)) + "." + sandboxv1.GroupVersion.Group + "/" + name
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// readyText is the Ready condition as one word: True, False or Unknown.
func readyText(conds []metav1.Condition) string {
	if c := meta.FindStatusCondition(conds, sandboxv1.ConditionReady); c != nil {
		return string(c.Status)
	}
	return "Unknown"
}

func sandboxSource(s sandboxv1.SandboxSource) string {
	switch {
	case s.Runtime != nil:
		return "runtime " + string(*s.Runtime)
	case s.Git != nil:
		if s.Git.Revision != "" {
			return "git " + s.Git.URL + "@" + s.Git.Revision
		}
		return "git " + s.Git.URL
	case s.Tarball != nil:
		return "tarball " + s.Tarball.URL
	case s.SnapshotRef != nil:
		return "sandboxsnapshot/" + s.SnapshotRef.Name
	case s.SnapshotID != nil:
		return "snapshot id " + *s.SnapshotID
	}
	return "<none>"
}

func snapshotSource(s sandboxv1.SandboxSnapshotSource) string {
	switch {
	case s.SandboxRef != nil:
		return "sandbox/" + s.SandboxRef.Name
	case s.SnapshotID != nil:
		return "snapshot id " + *s.SnapshotID
	case s.Recipe != nil && s.Recipe.BaseSnapshotRef != nil:
		return "recipe on sandboxsnapshot/" + s.Recipe.BaseSnapshotRef.Name
	case s.Recipe != nil:
		return "recipe"
	}
	return "<none>"
}

func forkSource(s sandboxv1.SandboxForkSource) string {
	switch {
	case s.SandboxRef != nil:
		return "sandbox/" + s.SandboxRef.Name
	case s.SnapshotRef != nil:
		return "sandboxsnapshot/" + s.SnapshotRef.Name
	}
	return "<none>"
}

func forkWant(f *sandboxv1.SandboxFork) int32 {
	if f.Spec.Replicas != nil {
		return *f.Spec.Replicas
	}
	return 1
}

// describe prints an object for people, as kubectl describe does.
func describe(w io.Writer, obj runtime.Object) error {
	tw := tabwriter.NewWriter(escapingWriter{w}, 0, 8, 2, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	var conds []metav1.Condition
	var lastErr *sandboxv1.ErrorStatus
	switch o := obj.(type) {
	case *sandboxv1.Sandbox:
		line("Name", o.Name)
		line("Namespace", o.Namespace)
		line("Kind", string(kindSandbox))
		line("Phase", orNone(string(o.Status.Phase)))
		line("Ready", readyText(o.Status.Conditions))
		line("State", orNone(string(o.Spec.State)))
		line("Source", sandboxSource(o.Spec.Source))
		line("Session", orNone(o.Status.SessionID))
		line("Vercel name", orNone(o.Status.VercelName))
		for _, r := range o.Status.Routes {
			line(fmt.Sprintf("Route %d", r.Port), r.URL)
		}
		if o.Status.BootedFrom != nil {
			line("Booted from", orNone(o.Status.BootedFrom.SnapshotName)+" ("+orNone(o.Status.BootedFrom.SnapshotID)+")")
		}
		if st := o.Status.Setup; st != nil {
			line("Setup", fmt.Sprintf("%s, %d/%d done", orNone(string(st.State)), st.Completed, len(o.Spec.Setup)))
		}
		if a := o.Annotations[sandboxv1.AnnotationLastActivity]; a != "" {
			line("Last activity", a)
		}
		if o.Status.ExpiresAt != nil {
			line("Expires", o.Status.ExpiresAt.UTC().Format(time.RFC3339))
		}
		if fork := o.Labels[sandboxv1.LabelFork]; fork != "" {
			line("Fork", "sandboxfork/"+fork)
		}
		conds, lastErr = o.Status.Conditions, o.Status.LastError
	case *sandboxv1.SandboxSnapshot:
		line("Name", o.Name)
		line("Namespace", o.Namespace)
		line("Kind", string(kindSnapshot))
		line("Phase", orNone(string(o.Status.Phase)))
		line("Ready to use", fmt.Sprint(o.Status.ReadyToUse))
		line("Source", snapshotSource(o.Spec.Source))
		line("Snapshot ID", orNone(o.Status.SnapshotID))
		if p := o.Status.Provenance; p != nil {
			line("Provenance", fmt.Sprintf("%s from session %s of %s", p.Origin, orNone(p.SourceSessionID), orNone(p.SourceVercelName)))
		}
		if o.Status.SizeBytes > 0 {
			line("Size", fmt.Sprintf("%d bytes", o.Status.SizeBytes))
		}
		if o.Status.ExpiresAt != nil {
			line("Expires", o.Status.ExpiresAt.UTC().Format(time.RFC3339))
		}
		conds, lastErr = o.Status.Conditions, o.Status.LastError
	case *sandboxv1.SandboxFork:
		line("Name", o.Name)
		line("Namespace", o.Namespace)
		line("Kind", string(kindFork))
		line("Phase", orNone(string(o.Status.Phase)))
		line("Replicas", fmt.Sprintf("%d/%d ready, %d wanted", o.Status.ReadyReplicas, o.Status.Replicas, forkWant(o)))
		line("Source", forkSource(o.Spec.Source))
		if o.Status.SnapshotRef != nil {
			line("Snapshot", "sandboxsnapshot/"+o.Status.SnapshotRef.Name)
		}
		for _, ch := range o.Status.Children {
			line("Child", fmt.Sprintf("sandbox/%s %s ready=%v", ch.Name, orNone(string(ch.Phase)), ch.Ready))
		}
		conds, lastErr = o.Status.Conditions, o.Status.LastError
	case *sandboxv1.SandboxPool:
		conds, lastErr = describePool(line, o)
	default:
		return fmt.Errorf("cannot describe %T", obj)
	}
	if lastErr != nil && lastErr.Message != "" {
		line("Last error", lastErr.Message)
	}
	if len(conds) > 0 {
		fmt.Fprintln(tw, "Conditions:")
		fmt.Fprintln(tw, "  TYPE\tSTATUS\tREASON\tMESSAGE")
		for _, c := range conds {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return tw.Flush()
}

// isNotFound reports a missing object (also through sandboxclient's wrapping).
func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
