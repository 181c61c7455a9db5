package e2e

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/getsentry/sandbox-controller/localstack/controlplane"
)

// The user the manager's pods run as, for impersonation.
const managerUser = "system:serviceaccount:" + systemNamespace + ":" + managerSA

// grant is one rule the manager's ServiceAccount holds, with where it comes from.
type grant struct {
	from string // "ClusterRoleBinding x -> ClusterRole y"
	rule rbacv1.PolicyRule
}

func (g grant) String() string {
	r := g.rule
	s := fmt.Sprintf("apiGroups=%q resources=%q verbs=%q", r.APIGroups, r.Resources, r.Verbs)
	if len(r.ResourceNames) > 0 {
		s += fmt.Sprintf(" resourceNames=%q", r.ResourceNames)
	}
	if len(r.NonResourceURLs) > 0 {
		s = fmt.Sprintf("nonResourceURLs=%q verbs=%q", r.NonResourceURLs, r.Verbs)
	}
	return s + " (" + g.from + ")"
}

// rbacObjects is the RBAC part of a rendering or of a live cluster.
type rbacObjects struct {
	clusterRoles        map[string]rbacv1.ClusterRole
	roles               map[string]rbacv1.Role // by namespace/name
	clusterRoleBindings []rbacv1.ClusterRoleBinding
	roleBindings        []rbacv1.RoleBinding
}

// TestRenderedManagerRBAC checks, without a cluster, every rule that
// `make deploy`'s rendering grants the manager's ServiceAccount.
func TestRenderedManagerRBAC(t *testing.T) {
	manifests, err := controlplane.RenderDeploy(repoRoot, deployImage)
	must(t, err)
	grants := managerGrants(t, renderedRBAC(t, manifests), true, true)
	checkLeastPrivilege(t, grants)
	t.Logf("%d rules granted to the manager:\n  %s", len(grants), strings.Join(ruleStrings(grants), "\n  "))
}

// TestLeastPrivilegeViolations shows the check catches what it is for.
func TestLeastPrivilegeViolations(t *testing.T) {
	rule := func(groups, resources, verbs []string) []grant {
		return []grant{{from: "test", rule: rbacv1.PolicyRule{APIGroups: groups, Resources: resources, Verbs: verbs}}}
	}
	core := []string{""}
	keyRule := func(ns string, names []string, verbs ...string) []grant {
		return []grant{{from: "RoleBinding " + ns + "/b -> Role " + ns + "/r", rule: rbacv1.PolicyRule{APIGroups: core, Resources: []string{"secrets"}, ResourceNames: names, Verbs: verbs}}}
	}
	for _, tc := range []struct {
		name   string
		grants []grant
		want   int
	}{
		{"get secrets", rule(core, []string{"secrets"}, []string{"get"}), 0},
		{"sandboxes", rule([]string{"sandbox.sentry.io"}, []string{"sandboxes", "sandboxes/status"}, []string{"get", "list", "watch", "patch"}), 0},
		{"list and watch secrets", rule(core, []string{"secrets"}, []string{"get", "list", "watch"}), 0},
		{"create secrets", rule(core, []string{"configmaps", "secrets"}, []string{"create"}), 1},
		{"update secrets", rule(core, []string{"secrets"}, []string{"update", "delete"}), 2},
		{"patch secrets", rule(core, []string{"secrets"}, []string{"watch", "patch", "deletecollection"}), 2},
		{"list configmaps", rule(core, []string{"configmaps"}, []string{"list"}), 0},
		{"secrets of another group", rule([]string{"example.com"}, []string{"secrets"}, []string{"list"}), 0},
		{"verb wildcard", rule([]string{"sandbox.sentry.io"}, []string{"sandboxes"}, []string{"*"}), 1},
		{"resource wildcard", rule([]string{"sandbox.sentry.io"}, []string{"*"}, []string{"get"}), 1},
		{"group wildcard", rule([]string{"*"}, []string{"sandboxes"}, []string{"get"}), 1},
		{"core resource wildcard patches secrets", rule(core, []string{"*"}, []string{"patch"}), 2},
		{"secrets subresource", rule(core, []string{"secrets/status"}, []string{"patch"}), 1},
		{"non-resource wildcard", []grant{{from: "test", rule: rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics/*"}, Verbs: []string{"get"}}}}, 1},
		{"update the digest key", keyRule(systemNamespace, []string{digestKeySecret}, "get", "update"), 0},
		{"patch or delete the digest key", keyRule(systemNamespace, []string{digestKeySecret}, "patch", "delete"), 2},
		{"create secrets by name", keyRule(systemNamespace, []string{digestKeySecret}, "create"), 1},
		{"update another Secret", keyRule(systemNamespace, []string{"vercel-credentials"}, "update"), 1},
		{"update the digest key and another", keyRule(systemNamespace, []string{digestKeySecret, "vercel-credentials"}, "update"), 1},
		{"update a Secret of that name elsewhere", keyRule("default", []string{digestKeySecret}, "update"), 1},
	} {
		if got := leastPrivilegeViolations(tc.grants); len(got) != tc.want {
			t.Errorf("%s: %d violations %q, want %d", tc.name, len(got), got, tc.want)
		}
	}
}

// renderedRBAC collects the RBAC objects of a rendering.
func renderedRBAC(t *testing.T, manifests []byte) rbacObjects {
	t.Helper()
	o := rbacObjects{clusterRoles: map[string]rbacv1.ClusterRole{}, roles: map[string]rbacv1.Role{}}
	for _, doc := range splitYAML(t, manifests) {
		var meta metav1.TypeMeta
		must(t, yaml.Unmarshal(doc, &meta))
		if meta.APIVersion != rbacv1.SchemeGroupVersion.String() {
			if strings.HasPrefix(meta.APIVersion, "rbac.authorization.k8s.io/") {
				t.Errorf("RBAC object of unexpected version %s", meta.APIVersion)
			}
			continue
		}
		switch meta.Kind {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			must(t, yaml.UnmarshalStrict(doc, &r))
			o.clusterRoles[r.Name] = r
		case "Role":
			var r rbacv1.Role
			must(t, yaml.UnmarshalStrict(doc, &r))
			o.roles[r.Namespace+"/"+r.Name] = r
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			must(t, yaml.UnmarshalStrict(doc, &b))
			o.clusterRoleBindings = append(o.clusterRoleBindings, b)
		case "RoleBinding":
			var b rbacv1.RoleBinding
			must(t, yaml.UnmarshalStrict(doc, &b))
			o.roleBindings = append(o.roleBindings, b)
		}
	}
	return o
}

// liveRBAC reads every ClusterRole, Role and binding from the API server.
func liveRBAC(t *testing.T, e *env) rbacObjects {
	t.Helper()
	o := rbacObjects{clusterRoles: map[string]rbacv1.ClusterRole{}, roles: map[string]rbacv1.Role{}}
	var crs rbacv1.ClusterRoleList
	must(t, e.client.List(e.ctx, &crs))
	for _, r := range crs.Items {
		o.clusterRoles[r.Name] = r
	}
	var rs rbacv1.RoleList
	must(t, e.client.List(e.ctx, &rs))
	for _, r := range rs.Items {
		o.roles[r.Namespace+"/"+r.Name] = r
	}
	var crbs rbacv1.ClusterRoleBindingList
	must(t, e.client.List(e.ctx, &crbs))
	o.clusterRoleBindings = crbs.Items
	var rbs rbacv1.RoleBindingList
	must(t, e.client.List(e.ctx, &rbs))
	o.roleBindings = rbs.Items
	return o
}

// bindsManager reports whether a binding's subjects name the manager's
// ServiceAccount; with viaGroups also whether they name a group every
// ServiceAccount of its namespace is in (the cluster's default bindings do).
func bindsManager(subjects []rbacv1.Subject, bindingNamespace string, viaGroups bool) bool {
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.ServiceAccountKind:
			ns := s.Namespace
			if ns == "" {
				ns = bindingNamespace
			}
			if ns == systemNamespace && s.Name == managerSA {
				return true
			}
		case rbacv1.UserKind:
			if s.Name == managerUser {
				return true
			}
		case rbacv1.GroupKind:
			if viaGroups && (s.Name == "system:serviceaccounts" || s.Name == "system:serviceaccounts:"+systemNamespace) {
				return true
			}
		}
	}
	return false
}

// managerGrants lists every rule bound to the manager's ServiceAccount by
// name (viaGroups: also through its groups). resolveAggregation expands aggregated ClusterRoles from the objects at hand
// (a rendering); on a live cluster kube-controller-manager has already
// written the aggregated rules into the role.
func managerGrants(t *testing.T, o rbacObjects, resolveAggregation, viaGroups bool) []grant {
	t.Helper()
	var out []grant
	clusterRoleRules := func(from, name string) {
		r, ok := o.clusterRoles[name]
		if !ok {
			t.Errorf("%s: ClusterRole %s does not exist", from, name)
			return
		}
		rules := r.Rules
		if resolveAggregation && r.AggregationRule != nil {
			rules = aggregatedRules(t, o, r)
		}
		for _, rule := range rules {
			out = append(out, grant{from: from + " -> ClusterRole " + name, rule: rule})
		}
	}
	for _, b := range o.clusterRoleBindings {
		if !bindsManager(b.Subjects, "", viaGroups) {
			continue
		}
		from := "ClusterRoleBinding " + b.Name
		if b.RoleRef.Kind != "ClusterRole" {
			t.Errorf("%s refers to a %s", from, b.RoleRef.Kind)
			continue
		}
		clusterRoleRules(from, b.RoleRef.Name)
	}
	for _, b := range o.roleBindings {
		if !bindsManager(b.Subjects, b.Namespace, viaGroups) {
			continue
		}
		from := "RoleBinding " + b.Namespace + "/" + b.Name
		switch b.RoleRef.Kind {
		case "ClusterRole":
			clusterRoleRules(from, b.RoleRef.Name)
		case "Role":
			r, ok := o.roles[b.Namespace+"/"+b.RoleRef.Name]
			if !ok {
				t.Errorf("%s: Role %s/%s does not exist", from, b.Namespace, b.RoleRef.Name)
				continue
			}
			for _, rule := range r.Rules {
				out = append(out, grant{from: from + " -> Role " + b.RoleRef.Name, rule: rule})
			}
		default:
			t.Errorf("%s refers to a %s", from, b.RoleRef.Kind)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no rule is bound to ServiceAccount %s/%s", systemNamespace, managerSA)
	}
	return out
}

// aggregatedRules is what the cluster-role aggregation controller would write
// into r: the rules of every ClusterRole whose labels match r's selectors.
func aggregatedRules(t *testing.T, o rbacObjects, r rbacv1.ClusterRole) []rbacv1.PolicyRule {
	t.Helper()
	var rules []rbacv1.PolicyRule
	names := make([]string, 0, len(o.clusterRoles))
	for n := range o.clusterRoles {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := o.clusterRoles[n]
		if n == r.Name {
			continue
		}
		for _, sel := range r.AggregationRule.ClusterRoleSelectors {
			s, err := metav1.LabelSelectorAsSelector(&sel)
			must(t, err)
			if s.Matches(labels.Set(c.Labels)) {
				rules = append(rules, c.Rules...)
				break
			}
		}
	}
	return rules
}

// secretVerbs are the verbs the manager may hold on Secrets: it reads the
// ones a Sandbox references (get) and watches their metadata to notice a
// rotation (list, watch; RBAC cannot grant a metadata-only watch). It writes
// one only: the status digest key Secret (digestKeySecret).
var secretVerbs = []string{"get", "list", "watch"}

// digestKeySecret is the Secret of the manager's namespace that `make deploy`
// installs empty and the manager fills with its status digest key
// (config/rbac/status_digest_key.yaml): a Role there may let it get and
// update that one Secret, by name. It may create none.
const digestKeySecret = "sandbox-controller-status-digest-key"

var digestKeyVerbs = []string{"get", "update"}

// isDigestKeyGrant: g is a Role's rule of the manager's namespace naming only
// the digest key Secret.
func isDigestKeyGrant(g grant) bool {
	return strings.HasPrefix(g.from, "RoleBinding "+systemNamespace+"/") && slices.Equal(g.rule.ResourceNames, []string{digestKeySecret})
}

// leastPrivilegeViolations lists the wildcards among grants and every verb
// on Secrets other than secretVerbs.
func leastPrivilegeViolations(grants []grant) []string {
	var out []string
	for _, g := range grants {
		r := g.rule
		for _, field := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.NonResourceURLs, r.ResourceNames} {
			for _, v := range field {
				if strings.Contains(v, "*") {
					out = append(out, fmt.Sprintf("wildcard %q: %v", v, g))
				}
			}
		}
		if (slices.Contains(r.APIGroups, "") || slices.Contains(r.APIGroups, "*")) && touchesSecrets(r.Resources) {
			for _, v := range r.Verbs {
				if !slices.Contains(secretVerbs, v) && (!isDigestKeyGrant(g) || !slices.Contains(digestKeyVerbs, v)) {
					out = append(out, fmt.Sprintf("verb %q on Secrets (only %s are allowed, and update of %s/%s): %v", v, strings.Join(secretVerbs, ", "), systemNamespace, digestKeySecret, g))
				}
			}
		}
	}
	return out
}

func checkLeastPrivilege(t *testing.T, grants []grant) {
	t.Helper()
	for _, v := range leastPrivilegeViolations(grants) {
		t.Errorf("granted to the manager: %s", v)
	}
}

func touchesSecrets(resources []string) bool {
	for _, res := range resources {
		if res == "secrets" || strings.HasPrefix(res, "secrets/") || res == "*" {
			return true
		}
	}
	return false
}

// bindingKeys names the bindings that grant grants, sorted and unique.
func bindingKeys(grants []grant) []string {
	var keys []string
	for _, g := range grants {
		keys = append(keys, g.from)
	}
	sort.Strings(keys)
	return slices.Compact(keys)
}

// checkLiveManagerRBAC is the live half of the rules test: what the API server
// holds after `make deploy`'s apply, and what it answers when asked as the
// manager's ServiceAccount.
func checkLiveManagerRBAC(t *testing.T, e *env) {
	rendered := managerGrants(t, renderedRBAC(t, e.manifests), true, true)
	liveObjects := liveRBAC(t, e)
	live := managerGrants(t, liveObjects, false, false)
	// The cluster's default bindings for every ServiceAccount (issuer
	// discovery, trust bundles) come on top; they must be as narrow.
	checkLeastPrivilege(t, managerGrants(t, liveObjects, false, true))
	if r, l := bindingKeys(rendered), bindingKeys(live); !slices.Equal(r, l) {
		t.Errorf("the live cluster binds the manager through\n  %s\nbut the rendering through\n  %s",
			strings.Join(l, "\n  "), strings.Join(r, "\n  "))
	}
	if r, l := ruleStrings(rendered), ruleStrings(live); !slices.Equal(r, l) {
		t.Errorf("live rules of the manager differ from the rendering:\nlive:\n  %s\nrendered:\n  %s",
			strings.Join(l, "\n  "), strings.Join(r, "\n  "))
	}

	// What the API server's authorizer really allows, asked through the
	// real kubectl impersonating the ServiceAccount (as its pods run).
	canI := func(want bool, args ...string) {
		t.Helper()
		out, err := e.kubectl(append([]string{"auth", "can-i", "--as=" + managerUser}, args...)...)
		// The answer is the last line; warnings may come before it.
		lines := strings.Split(strings.TrimSpace(out), "\n")
		got := strings.TrimSpace(lines[len(lines)-1])
		switch {
		case err == nil && got == "yes":
			if !want {
				t.Errorf("kubectl auth can-i %s as the manager: yes, want no", strings.Join(args, " "))
			}
		case err != nil && strings.HasPrefix(got, "no"):
			if want {
				t.Errorf("kubectl auth can-i %s as the manager: %s, want yes", strings.Join(args, " "), got)
			}
		default:
			t.Errorf("kubectl auth can-i %s: %q, %v", strings.Join(args, " "), got, err)
		}
	}
	// The positive answers prove the question reaches the manager's rules
	// (a mistyped user would be refused everything).
	canI(true, "get", "secrets", "-A")
	canI(true, "watch", "secrets", "-A")
	canI(true, "list", "sandboxes.sandbox.sentry.io", "-A")
	canI(true, "update", "sandboxforks.sandbox.sentry.io", "--subresource=status", "-A")
	canI(true, "update", "sandboxquotas.sandbox.sentry.io", "--subresource=status", "-A")
	// The class label is the manager's to write (config/admission/class-label.yaml).
	for _, kind := range []string{"sandboxes", "sandboxsnapshots", "sandboxforks"} {
		canI(true, "update", kind+".sandbox.sentry.io", "--subresource=class", "-A")
	}
	// A budget is set by people, never by the manager it limits.
	canI(false, "update", "sandboxquotas.sandbox.sentry.io", "-A")
	canI(true, "create", "events.events.k8s.io", "-n", "default")
	canI(true, "create", "leases.coordination.k8s.io", "-n", systemNamespace)
	for _, verb := range []string{"create", "update", "patch", "delete", "deletecollection"} {
		canI(false, verb, "secrets", "-A")
		canI(false, verb, "secrets", "-n", systemNamespace)
	}
	// The status digest key, by name, in its own namespace only.
	canI(true, "update", "secrets/"+digestKeySecret, "-n", systemNamespace)
	canI(false, "update", "secrets/"+digestKeySecret, "-n", "default")
	canI(false, "update", "secrets/vercel-credentials", "-n", systemNamespace)
	canI(false, "patch", "secrets/"+digestKeySecret, "-n", systemNamespace)
	canI(false, "create", "leases.coordination.k8s.io", "-n", "default")
	canI(false, "list", "pods", "-A")
	canI(false, "impersonate", "serviceaccounts", "-A")
	canI(false, "escalate", "clusterroles.rbac.authorization.k8s.io", "-A")

	// The effective rule lists, cluster-wide rules included, in the
	// manager's own namespace and in an ordinary one.
	for _, ns := range []string{systemNamespace, "default"} {
		out, err := e.kubectl("auth", "can-i", "--list", "--as="+managerUser, "-n", ns)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		rows := parseCanIList(t, out)
		var sawSandboxes bool
		for _, r := range rows {
			if r.resource == "sandboxes.sandbox.sentry.io" {
				sawSandboxes = true
			}
			if r.resource == "" { // non-resource URLs: discovery, health, version
				continue
			}
			if strings.Contains(r.resource, "*") || slices.Contains(r.verbs, "*") {
				t.Errorf("can-i --list -n %s: wildcard for the manager: %s", ns, r.line)
			}
			if r.resource == "secrets" && ns == systemNamespace && slices.Equal(r.names, []string{digestKeySecret}) {
				if !slices.Equal(slices.Sorted(slices.Values(r.verbs)), digestKeyVerbs) {
					t.Errorf("can-i --list -n %s: verbs %q on the digest key Secret, want only %q: %s", ns, r.verbs, digestKeyVerbs, r.line)
				}
			} else if r.resource == "secrets" || strings.HasPrefix(r.resource, "secrets/") {
				if !slices.Equal(slices.Sorted(slices.Values(r.verbs)), secretVerbs) {
					t.Errorf("can-i --list -n %s: Secrets verbs %q, want only %q: %s", ns, r.verbs, secretVerbs, r.line)
				}
			}
		}
		if !sawSandboxes {
			t.Errorf("can-i --list -n %s does not list sandboxes.sandbox.sentry.io for the manager:\n%s", ns, out)
		}
	}
}

func ruleStrings(grants []grant) []string {
	var s []string
	for _, g := range grants {
		s = append(s, g.String())
	}
	sort.Strings(s)
	return s
}

// canIRow is one line of `kubectl auth can-i --list`.
type canIRow struct {
	resource string
	names    []string
	verbs    []string
	line     string
}

// A row: an optional resource, then three bracketed lists: non-resource URLs,
// resource names, verbs.
var canIRowRE = regexp.MustCompile(`^(?:(\S+)\s+)?\[([^\]]*)\]\s+\[([^\]]*)\]\s+\[([^\]]*)\]\s*$`)

func parseCanIList(t *testing.T, out string) []canIRow {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "Resources") {
		t.Fatalf("unexpected kubectl auth can-i --list output:\n%s", out)
	}
	var rows []canIRow
	for _, l := range lines[1:] {
		m := canIRowRE.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			t.Fatalf("unparsable kubectl auth can-i --list row %q", l)
		}
		rows = append(rows, canIRow{resource: m[1], names: strings.Fields(m[3]), verbs: strings.Fields(m[4]), line: strings.TrimSpace(l)})
	}
	return rows
}
