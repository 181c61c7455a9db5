package main

import (
	"bytes"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// hostile is setup output a tenant's command can print, as it lands in a
// condition message: a window title, a screen clear, a cursor move, a C1 CSI
// and a stray byte.
const hostile = "npm ERR!\x1b]0;pwned\x07\x1b[2J\x1b[1A\u009b31m\xff done\r"

// rawControl reports the first control character but newline and tab in s.
func rawControl(s string) (rune, bool) {
	for _, r := range s {
		if (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r < 0xa0) || r == '\uFFFD' {
			return r, true
		}
	}
	return 0, false
}

func TestEscapeControl(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ü and 日本, a tab\tand a newline\n": "plain text, ü and 日本, a tab\tand a newline\n",
		hostile:    `npm ERR!\x1b]0;pwned\x07\x1b[2J\x1b[1A\u009b31m\xff done\x0d`,
		"\x00\x7f": `\x00\x7f`,
		"":         "",
	} {
		if got := escapeControl(in); got != want {
			t.Errorf("escapeControl(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStatusEscapesWhatStatusCarries(t *testing.T) {
	sbx := &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "dev", Namespace: "team-a"}}
	sbx.Status.Phase = sandboxv1.SandboxFailed
	sbx.Status.LastError = &sandboxv1.ErrorStatus{Message: "setup step 1 failed: " + hostile}
	sbx.Status.Conditions = []metav1.Condition{{Type: sandboxv1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: sandboxv1.ReasonSetupFailed, Message: "exit code 3; output: " + hostile}}
	var out bytes.Buffer
	if err := describe(&out, sbx); err != nil {
		t.Fatal(err)
	}
	if r, found := rawControl(out.String()); found {
		t.Errorf("status printed the control character %U raw:\n%q", r, out.String())
	}
	if n := strings.Count(out.String(), `\x1b]0;pwned\x07`); n != 2 {
		t.Errorf("the escaped sequence is shown %d times, want 2 (last error, condition):\n%s", n, out.String())
	}

	var tree bytes.Buffer
	printTree(&tree, &treeNode{Kind: string(kindSandbox), Name: "dev", Phase: "Failed", Ready: "False", Note: hostile}, "", "")
	if r, found := rawControl(tree.String()); found {
		t.Errorf("tree printed the control character %U raw:\n%q", r, tree.String())
	}
}

// Through the real kubectl and controller: a setup command's output lands in
// status, and neither wait's error nor status replays its escape sequences.
func TestStatusEscapesSetupOutput(t *testing.T) {
	ns := newNamespace(t)
	ok(t, sandbox(ns, "create", "loud", "--setup", `printf 'npm ERR!\033]0;pwned\007\033[2J' >&2; exit 3`)...)
	r := kubectl(t, sandbox(ns, "wait", "loud", "--timeout", "3m")...)
	if r.code != 1 || !strings.Contains(r.stderr, sandboxv1.ReasonSetupFailed) {
		t.Fatalf("wait for a Sandbox whose setup fails: %s", r)
	}
	if c, found := rawControl(r.stderr); found {
		t.Errorf("wait printed the control character %U raw: %q", c, r.stderr)
	}
	desc := ok(t, sandbox(ns, "status", "loud")...)
	if c, found := rawControl(desc); found {
		t.Errorf("status printed the control character %U raw: %q", c, desc)
	}
	if !strings.Contains(desc, `npm ERR!\x1b]0;pwned\x07\x1b[2J`) {
		t.Errorf("status does not show the escaped output:\n%s", desc)
	}
}
