package controllers_test

import (
	"context"
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Setup steps may run as a named user of the sandbox, as the official SDK's
// asUser runs a command (sudo -u USER -- bash -c ...), after an earlier sudo
// step created the user.
var _ = Describe("Setup steps run as a user", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("creates a user in one step and runs the next as that user", func() {
		key := types.NamespacedName{Namespace: ns, Name: "as-user"}
		newSandbox(ns, key.Name, sandboxv1.SandboxSpec{
			Source: runtimeSource("node24"),
			Setup: []sandboxv1.SetupCommand{
				{Name: "adduser", Command: "useradd", Args: []string{"-m", "-s", "/bin/bash", "alice"}, Sudo: true},
				{Name: "share", Command: "chmod", Args: []string{"1777", "/vercel/sandbox"}, Sudo: true},
				{Name: "who", Command: "sh", Args: []string{"-c", `id -un > /vercel/sandbox/who; pwd >> /vercel/sandbox/who`}, User: "alice"},
			},
		})
		sbx := waitReady(key)
		Expect(sbx.Status.Setup).To(HaveField("Completed", int32(3)))
		who, err := vc.ReadFile(ctx, sbx.Status.SessionID, "/vercel/sandbox/who", "")
		Expect(err).NotTo(HaveOccurred())
		Expect(string(who)).To(Equal("alice\n/home/alice\n"))

		// Vercel received the SDK's request shape: sudo is the command.
		cmds, err := vc.ListCommands(ctx, sbx.Status.SessionID)
		Expect(err).NotTo(HaveOccurred())
		i := slices.IndexFunc(cmds, func(c vercel.Command) bool { return c.Name == "sudo" })
		Expect(i).To(BeNumerically(">=", 0), "no sudo command among %+v", cmds)
		Expect(cmds[i].Args[:6]).To(Equal([]string{"-u", "alice", "--", "bash", "-c", `cd "$1" || exit 1; shift; exec "$@"`}))
	})

	It("fails the step with sudo's message when the user does not exist", func() {
		key := types.NamespacedName{Namespace: ns, Name: "no-user"}
		newSandbox(ns, key.Name, sandboxv1.SandboxSpec{
			Source: runtimeSource("node24"),
			Setup:  []sandboxv1.SetupCommand{{Name: "who", Command: "id", User: "bob"}},
		})
		Eventually(readyCondition(key)).Should(And(Not(BeNil()), HaveField("Reason", sandboxv1.ReasonSetupFailed)))
		Expect(readyCondition(key)(Default).Message).To(And(
			ContainSubstring("step 1 (who) exited with code 1"), ContainSubstring("unknown user bob")))
		Expect(getSandbox(key).Status.Phase).To(Equal(sandboxv1.SandboxFailed))
		Expect(readyCondition(key)(Default).Status).To(Equal(metav1.ConditionFalse))
	})

	It("refuses a user name that is not a Linux user name, and a step with both user and sudo, naming the field", func() {
		for _, c := range []struct {
			step sandboxv1.SetupCommand
			want string
		}{
			{sandboxv1.SetupCommand{Command: "id", User: "Alice;rm"}, "spec.setup[0].user"},
			{sandboxv1.SetupCommand{Command: "id", User: "alice", Sudo: true}, "user and sudo are exclusive"},
		} {
			err := k8sClient.Create(ctx, &sandboxv1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad-user"},
				Spec:       sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Setup: []sandboxv1.SetupCommand{c.step}},
			})
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(c.want))
			Expect(err.Error()).To(ContainSubstring("spec.setup[0].user"))
		}
	})
})
