package controllers

// SandboxClasses: which Vercel credentials an object uses, and one Vercel
// client per class. An object's class is spec.className, else the class its
// sandbox.sentry.io/class label pinned at its first reconcile, else the
// default class (annotation sandbox.sentry.io/is-default-class), else none:
// the manager's own client, built from its flags, exactly as before classes
// existed. The skeleton resolves the class before the kind's reconcile runs
// and hands the class's client down in the context (apiFor), so the
// reconcilers' code is the same for every class.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/httplimit"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxclasses,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxclasses/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxclasses/finalizers,verbs=update
// The class label is the controller's to set (config/admission/class-label.yaml):
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxes/class;sandboxsnapshots/class;sandboxforks/class,verbs=update

// classBinding is the class an object is reconciled with.
type classBinding struct {
	name string
	api  SandboxAPI
}

type classKey struct{}

// apiFor is the Vercel client of the object being reconciled: its class's,
// or def (the manager's own) for an object of no class.
func apiFor(ctx context.Context, def SandboxAPI) SandboxAPI {
	if b, ok := ctx.Value(classKey{}).(*classBinding); ok {
		return b.api
	}
	return def
}

// classNameIn is the class of the object being reconciled; "" for none.
func classNameIn(ctx context.Context) string {
	if b, ok := ctx.Value(classKey{}).(*classBinding); ok {
		return b.name
	}
	return ""
}

// classError is a class that cannot be used by an object; reported with its
// reason on Ready and Synced, retried with backoff, nothing called in Vercel.
type classError struct {
	reason, message string
}

func (e *classError) Error() string { return e.message }

// specClassName is spec.className of an object of one of the three kinds.
func specClassName(o client.Object) string {
	var p *string
	switch o := o.(type) {
	case *sandboxv1.Sandbox:
		p = o.Spec.ClassName
	case *sandboxv1.SandboxSnapshot:
		p = o.Spec.ClassName
	case *sandboxv1.SandboxFork:
		p = o.Spec.ClassName
	}
	if p == nil {
		return ""
	}
	return *p
}

// pinnedClass is the class an object is known to use, when it is known:
// spec.className, else the class its label pinned.
func pinnedClass(o client.Object) (string, bool) {
	if n := specClassName(o); n != "" {
		return n, true
	}
	n, ok := o.GetLabels()[sandboxv1.LabelClass]
	return n, ok
}

// classOfFresh is the class of an object that neither names one nor was
// pinned, and whether it must be pinned now. Which of the two an unpinned
// object uses is decided by something no tenant can produce — the API
// server's creationTimestamp against the default class's: an object created
// before the default class existed used (and uses) the manager's own
// credentials, any later one the default class. A condition, an annotation
// or a status a tenant may write never decides it (the red-team review
// reached the manager's credentials past the default class through a
// Paused or ClassNotAllowed condition).
//
// Once any SandboxClass exists every object is pinned on its first
// reconcile, "" included, so that a class annotated as the default later
// moves no object. While none exists an object of no class is left
// unlabelled: nothing can move it (a default class created later is newer
// than it), and its create keeps to one API write.
func (c *ClassClients) classOfFresh(ctx context.Context, o client.Object) (name string, pin bool, err error) {
	def, any, err := c.defaultClass(ctx)
	if err != nil {
		return "", false, err
	}
	return freshClass(o.GetCreationTimestamp(), def), any, nil
}

// freshClass is the class of an unpinned object created at created, when def
// is the default class (nil: none). An object created in the same second as
// the default class (the timestamps' resolution) gets the default class.
func freshClass(created metav1.Time, def *sandboxv1.SandboxClass) string {
	if def == nil || (!created.IsZero() && created.Before(&def.CreationTimestamp)) {
		return ""
	}
	return def.Name
}

// defaultClass is the oldest class annotated as the default that is not
// being deleted, or nil; any reports whether any SandboxClass exists.
func (c *ClassClients) defaultClass(ctx context.Context) (def *sandboxv1.SandboxClass, any bool, err error) {
	list := &sandboxv1.SandboxClassList{}
	if err := c.Client.List(ctx, list); err != nil {
		return nil, false, fmt.Errorf("list SandboxClasses: %w", err)
	}
	var defaults []sandboxv1.SandboxClass
	for _, cl := range list.Items {
		if cl.Annotations[sandboxv1.AnnotationDefaultClass] == "true" && cl.DeletionTimestamp.IsZero() {
			defaults = append(defaults, cl)
		}
	}
	if len(defaults) == 0 {
		return nil, len(list.Items) > 0, nil
	}
	sort.Slice(defaults, func(i, j int) bool {
		ti, tj := defaults[i].CreationTimestamp, defaults[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return defaults[i].Name < defaults[j].Name
	})
	return &defaults[0], true, nil
}

// ClassClients resolves objects' classes and keeps one Vercel client per
// class, each with its own in-flight bound, rate and retry budget (inside
// vercel.Client) and health. A nil *ClassClients resolves every object to
// the manager's own client.
type ClassClients struct {
	// Client reads SandboxClasses (the manager's cache).
	Client client.Reader
	// APIReader reads Secrets and Namespaces uncached: the manager neither
	// lists nor watches them.
	APIReader client.Reader
	// Base is the configuration every class's client starts from: the
	// manager's (base URL, call timeout, requests per minute, retries),
	// without its token, team, project, HTTP client and callbacks.
	Base vercel.Config
	// Limits bound each class's requests in flight (a class's own slots).
	Limits httplimit.Options
	// SecretReload is how often a class's Secret is read again (default
	// vercel.DefaultTokenReloadInterval); after Vercel rejected the token it
	// is read again at once (at most once a second).
	SecretReload time.Duration

	mu      sync.Mutex
	entries map[string]*classEntry
	// changed receives a class whose credentials Vercel started or stopped
	// rejecting, so that its status says so at once (the class controller
	// watches it).
	changed chan ctrlevent.GenericEvent
}

// events is the channel of classes whose credentials changed.
func (c *ClassClients) events() chan ctrlevent.GenericEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.changed == nil {
		c.changed = make(chan ctrlevent.GenericEvent, 64)
	}
	return c.changed
}

// classEntry is the client of one class, rebuilt when its Secret changes.
type classEntry struct {
	mu     sync.Mutex
	hc     *http.Client // bounded in flight; kept across rebuilds
	health *VercelHealth
	api    *vercel.Client
	// secretVersion is the resourceVersion of the Secret api was built
	// from; readAt when it was last read.
	secretVersion string
	readAt        time.Time
	// verifiedAt is when the class controller last checked the team and
	// project (VerifyProject) with api.
	verifiedAt time.Time
	// deprecatedKeys are the keys of the Secret read under their deprecated
	// spelling; warnedVersion the Secret version the class controller last
	// warned of them for.
	deprecatedKeys []string
	warnedVersion  string
}

func (c *ClassClients) entry(name string) *classEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]*classEntry{}
	}
	e := c.entries[name]
	if e == nil {
		limits := c.Limits
		limits.ResponseHeaderTimeout = c.Base.CallTimeout
		hc, _ := httplimit.NewClient(limits)
		e = &classEntry{hc: hc, health: &VercelHealth{project: errProjectUnverified}}
		if c.changed == nil {
			c.changed = make(chan ctrlevent.GenericEvent, 64)
		}
		changed := c.changed
		e.health.onCredentials = func() {
			select {
			case changed <- ctrlevent.GenericEvent{Object: &sandboxv1.SandboxClass{ObjectMeta: metav1.ObjectMeta{Name: name}}}:
			default: // full: the periodic check catches up
			}
		}
		c.entries[name] = e
	}
	return e
}

// forget drops the client of a deleted class.
func (c *ClassClients) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, name)
}

// apiOf returns the client of cl, reading its Secret again when the last read
// is older than SecretReload, or older than a second after Vercel rejected
// the token (it may just have been rotated). A new Secret (another
// resourceVersion) builds a new client, so a rotated token is used without a
// restart.
func (c *ClassClients) apiOf(ctx context.Context, cl *sandboxv1.SandboxClass) (*vercel.Client, *VercelHealth, error) {
	e := c.entry(cl.Name)
	e.mu.Lock()
	defer e.mu.Unlock()
	reload := c.SecretReload
	if reload <= 0 {
		reload = vercel.DefaultTokenReloadInterval
	}
	since := time.Since(e.readAt)
	if e.api != nil && since < reload && (!e.health.rejectedNow() || since < time.Second) {
		return e.api, e.health, nil
	}
	ref := cl.Spec.CredentialsSecretRef
	sec := &corev1.Secret{}
	err := c.APIReader.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, sec)
	e.readAt = time.Now()
	switch {
	case apierrors.IsNotFound(err):
		// A deleted Secret withdraws the credentials: no object of the
		// class uses the last token read any more.
		e.api, e.secretVersion = nil, ""
		return nil, e.health, &classError{sandboxv1.ReasonSecretNotFound,
			fmt.Sprintf("SandboxClass %q: Secret %s/%s (spec.credentialsSecretRef) not found", cl.Name, ref.Namespace, ref.Name)}
	case err != nil && e.api != nil:
		// The API server did not answer: keep the last client, as a token
		// file that cannot be read keeps the last token.
		return e.api, e.health, nil
	case err != nil:
		return nil, e.health, fmt.Errorf("SandboxClass %q: read Secret %s/%s: %w", cl.Name, ref.Namespace, ref.Name, err)
	}
	if e.api != nil && sec.ResourceVersion == e.secretVersion {
		return e.api, e.health, nil
	}
	values, deprecated, missing := classSecretValues(sec)
	if missing != "" {
		return nil, e.health, &classError{sandboxv1.ReasonSecretKeyNotFound,
			fmt.Sprintf("SandboxClass %q: key %q not found in Secret %s/%s (spec.credentialsSecretRef)", cl.Name, missing, ref.Namespace, ref.Name)}
	}
	e.deprecatedKeys = deprecated
	cfg := c.Base
	cfg.Token = values[sandboxv1.ClassSecretTokenKey]
	cfg.TeamID = values[sandboxv1.ClassSecretTeamIDKey]
	cfg.ProjectID = values[sandboxv1.ClassSecretProjectIDKey]
	cfg.TokenFile, cfg.OIDCToken = "", ""
	api, err := instrumentedClient(cfg, e.hc, e.health)
	if err != nil {
		// vercel.New's errors name no token.
		return nil, e.health, &classError{sandboxv1.ReasonSecretRefused, fmt.Sprintf("SandboxClass %q: Secret %s/%s: %v", cl.Name, ref.Namespace, ref.Name, err)}
	}
	e.api, e.secretVersion, e.verifiedAt = api, sec.ResourceVersion, time.Time{}
	return api, e.health, nil
}

// className is the class object o is reconciled with ("" for the manager's
// own client). An error means the class could not be resolved (the
// SandboxClasses could not be listed): nothing may be pinned then.
func (c *ClassClients) className(ctx context.Context, o client.Object) (string, error) {
	n, _, err := c.resolve(ctx, o)
	return n, err
}

// resolve is className, and whether the class must be pinned on o now.
func (c *ClassClients) resolve(ctx context.Context, o client.Object) (name string, pin bool, err error) {
	if n, ok := pinnedClass(o); ok {
		_, labelled := o.GetLabels()[sandboxv1.LabelClass]
		return n, !labelled, nil
	}
	return c.classOfFresh(ctx, o)
}

// binding is the outcome of bind: the class resolved for the object (when
// resolved), and why the object may not use it (refused).
type binding struct {
	name     string
	resolved bool
	// refused is a classError (or a failed read of the class) that keeps
	// the object from Vercel; the class is still pinned when pinnable.
	refused error
	// pin says the class is to be recorded on the object's label now: it
	// is not yet, and it is not a class being deleted that the object never
	// used (pinning it would make the object a user of the class).
	pin bool
}

// bind resolves the class of o and returns ctx carrying its client. For an
// object being deleted the namespace selector is not checked: the remote
// objects of a namespace that left the selector are still cleaned up.
func (c *ClassClients) bind(ctx context.Context, o client.Object) (context.Context, binding) {
	if c == nil {
		return ctx, binding{resolved: true}
	}
	name, pin, err := c.resolve(ctx, o)
	if err != nil {
		return ctx, binding{refused: err}
	}
	b := binding{name: name, resolved: true, pin: pin}
	if name == "" {
		return ctx, b
	}
	cl := &sandboxv1.SandboxClass{}
	if err := c.Client.Get(ctx, types.NamespacedName{Name: name}, cl); err != nil {
		if apierrors.IsNotFound(err) {
			err = &classError{sandboxv1.ReasonClassNotFound, fmt.Sprintf("SandboxClass %q does not exist", name)}
		}
		b.refused = err
		return ctx, b
	}
	deleting := !o.GetDeletionTimestamp().IsZero()
	if !deleting {
		if _, pinned := o.GetLabels()[sandboxv1.LabelClass]; !pinned && !cl.DeletionTimestamp.IsZero() {
			b.pin = false
			b.refused = &classError{sandboxv1.ReasonClassNotFound, fmt.Sprintf("SandboxClass %q is being deleted: no new object may use it", name)}
			return ctx, b
		}
		if err := c.checkNamespace(ctx, cl, o.GetNamespace()); err != nil {
			b.refused = err
			return ctx, b
		}
	}
	api, _, err := c.apiOf(ctx, cl)
	if err != nil {
		b.refused = err
		return ctx, b
	}
	return context.WithValue(ctx, classKey{}, &classBinding{name: name, api: api}), b
}

// checkNamespace refuses a namespace outside the class's namespaceSelector.
func (c *ClassClients) checkNamespace(ctx context.Context, cl *sandboxv1.SandboxClass, namespace string) error {
	sel := cl.Spec.NamespaceSelector
	if sel == nil || (len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0) {
		return nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return &classError{sandboxv1.ReasonClassNotAllowed, fmt.Sprintf("SandboxClass %q has an invalid spec.namespaceSelector: %v", cl.Name, err)}
	}
	ns := &corev1.Namespace{}
	if err := c.APIReader.Get(ctx, types.NamespacedName{Name: namespace}, ns); err != nil {
		return fmt.Errorf("read namespace %s for SandboxClass %q: %w", namespace, cl.Name, err)
	}
	if !s.Matches(labels.Set(ns.Labels)) {
		return &classError{sandboxv1.ReasonClassNotAllowed,
			fmt.Sprintf("SandboxClass %q does not allow namespace %q (its spec.namespaceSelector does not select it)", cl.Name, namespace)}
	}
	return nil
}

// pin records the class on o's label — an empty value for the manager's
// own credentials, so that no later reconcile infers it (see classOfFresh
// for when that is needed) — and applies the class's defaults to a
// Sandbox's spec the first time; it reports whether it changed o.
func (c *ClassClients) pin(ctx context.Context, o client.Object, name string) bool {
	if c == nil {
		return false
	}
	old, pinned := o.GetLabels()[sandboxv1.LabelClass]
	if pinned && old == name {
		return false
	}
	l := o.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[sandboxv1.LabelClass] = name
	o.SetLabels(l)
	if sbx, ok := o.(*sandboxv1.Sandbox); ok && !pinned && name != "" {
		cl := &sandboxv1.SandboxClass{}
		if err := c.Client.Get(ctx, types.NamespacedName{Name: name}, cl); err == nil {
			applyClassDefaults(sbx, cl.Spec.Defaults)
		}
	}
	return true
}

// applyClassDefaults fills the fields of a Sandbox's spec it leaves unset
// from its class's defaults, as admission defaulting would.
func applyClassDefaults(sbx *sandboxv1.Sandbox, d *sandboxv1.SandboxClassDefaults) {
	if d == nil {
		return
	}
	if d.Resources != nil && d.Resources.VCPUs != nil && (sbx.Spec.Resources == nil || sbx.Spec.Resources.VCPUs == nil) {
		if sbx.Spec.Resources == nil {
			sbx.Spec.Resources = &sandboxv1.SandboxResources{}
		}
		v := *d.Resources.VCPUs
		sbx.Spec.Resources.VCPUs = &v
	}
	if d.Idle != nil && sbx.Spec.Idle == nil {
		sbx.Spec.Idle = d.Idle.DeepCopy()
	}
	if d.NetworkPolicy != nil && sbx.Spec.NetworkPolicy == nil {
		sbx.Spec.NetworkPolicy = d.NetworkPolicy.DeepCopy()
	}
	// Region and failover go together: the class's list is valid for the
	// class's region, not necessarily for the Sandbox's own.
	if sbx.Spec.Region == "" && len(sbx.Spec.FailoverRegions) == 0 {
		sbx.Spec.Region = d.Region
		sbx.Spec.FailoverRegions = slices.Clone(d.FailoverRegions)
	}
	if d.SnapshotRetention != nil && sbx.Spec.SnapshotRetention == nil && (sbx.Spec.Persistent == nil || *sbx.Spec.Persistent) {
		sbx.Spec.SnapshotRetention = d.SnapshotRetention.DeepCopy()
	}
}

// classMismatch says why ref (an object o names) cannot be used by o: it is
// of another class. Objects whose class is not known yet pass.
func classMismatch(ctx context.Context, ref client.Object, kind, field string) string {
	mine := classNameIn(ctx)
	theirs, ok := pinnedClass(ref)
	if !ok || theirs == mine {
		return ""
	}
	return fmt.Sprintf("%s %q (%s) is of class %s, this object of class %s: a snapshot is never used across classes (each is its own Vercel project)",
		kind, ref.GetName(), field, classLabel(theirs), classLabel(mine))
}

func classLabel(name string) string {
	if name == "" {
		return "none (the manager's own credentials)"
	}
	return fmt.Sprintf("%q", name)
}

// classSecretValues reads a class Secret's token, team id and project id,
// each under its key or, failing that, its deprecated spelling (listed in
// deprecated); missing names the first key found under neither.
func classSecretValues(sec *corev1.Secret) (values map[string]string, deprecated []string, missing string) {
	values = map[string]string{}
	for _, k := range [][2]string{
		{sandboxv1.ClassSecretTokenKey, ""},
		{sandboxv1.ClassSecretTeamIDKey, sandboxv1.ClassSecretTeamIDKeyDeprecated},
		{sandboxv1.ClassSecretProjectIDKey, sandboxv1.ClassSecretProjectIDKeyDeprecated},
	} {
		switch key, old := k[0], k[1]; {
		case len(sec.Data[key]) > 0:
			values[key] = string(sec.Data[key])
		case old != "" && len(sec.Data[old]) > 0:
			values[key] = string(sec.Data[old])
			deprecated = append(deprecated, old)
		default:
			return nil, nil, key
		}
	}
	return values, deprecated, ""
}

// deprecationToWarn returns the deprecated keys the class's Secret was read
// with, once per version of the Secret: what the class controller warns of.
func (c *ClassClients) deprecationToWarn(name string) []string {
	e := c.entry(name)
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.deprecatedKeys) == 0 || e.warnedVersion == e.secretVersion {
		return nil
	}
	e.warnedVersion = e.secretVersion
	return e.deprecatedKeys
}
