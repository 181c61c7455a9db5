package client_test

import (
	"os"
	"regexp"
	"testing"
)

// TestCodeGeneratorMatchesGoMod keeps the code generators at the version of
// the k8s.io modules the generated code compiles against: a newer client-gen
// can emit calls an older client-go does not have.
func TestCodeGeneratorMatchesGoMod(t *testing.T) {
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	pinned := regexp.MustCompile(`(?m)^CODE_GENERATOR_VERSION \?= (\S+)$`).FindSubmatch(makefile)
	if pinned == nil {
		t.Fatal("Makefile: no CODE_GENERATOR_VERSION")
	}
	clientGo := regexp.MustCompile(`(?m)^\s*k8s\.io/client-go (\S+)`).FindSubmatch(gomod)
	if clientGo == nil {
		t.Fatal("go.mod: no k8s.io/client-go requirement")
	}
	if string(pinned[1]) != string(clientGo[1]) {
		t.Errorf("Makefile pins k8s.io/code-generator %s, go.mod requires k8s.io/client-go %s: keep them equal", pinned[1], clientGo[1])
	}
}
