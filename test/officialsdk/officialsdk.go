// Package officialsdk installs Vercel's official Sandbox CLI and SDK (npm
// packages, pinned) for the programs that drive them against the emulator:
// the client conformance tests (test/clients) and the time-to-first-command
// benchmark (test/perf). Neither package has a base-URL setting; Shim is the
// `node --import` module that sends their requests to the emulator.
package officialsdk

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The versions the repository drives (see docs/dev/interactive-sessions.md
// for what was read from them).
const (
	CLI = "sandbox@4.5.0"
	SDK = "@vercel/sandbox@3.5.0"
)

// Install returns the node_modules directory holding CLI and SDK under
// <repoRoot>/bin/npm, installing them with npm when absent. npm's output goes
// to log.
func Install(ctx context.Context, repoRoot string, log func(format string, args ...any)) (string, error) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("%s is not on PATH: the official clients need Node.js 20 or later and npm", tool)
		}
	}
	dir := filepath.Join(repoRoot, "bin", "npm", "official-"+strings.NewReplacer("@", "", "/", "-").Replace(CLI+"-"+SDK))
	modules := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(modules, ".bin", "sandbox")); err == nil {
		if _, err := os.Stat(filepath.Join(modules, "@vercel", "sandbox", "package.json")); err == nil {
			return modules, nil
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-save", "--no-package-lock", "--no-audit", "--no-fund", CLI, SDK)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "npm_config_update_notifier=false")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	log("npm install %s %s:\n%s", CLI, SDK, out.String())
	if err != nil {
		return "", fmt.Errorf("npm install %s %s in %s: %w", CLI, SDK, dir, err)
	}
	return modules, nil
}

// Shim is the module that, loaded with `node --import`, sends the official
// clients' requests for Vercel's API to the emulator named by the
// environment variable SANDBOX_EMULATOR_URL.
func Shim(repoRoot string) string {
	return filepath.Join(repoRoot, "test", "clients", "testdata", "vercel-to-emulator.mjs")
}

// NodeEnv is the environment of a node program using the official CLI or
// SDK with token: the packages in modules, telemetry, version checks and
// colour off, and a home of its own; with apiURL set, the shim that sends
// their Vercel requests to the emulator there (they have no base-URL
// setting). apiURL "" leaves them talking to Vercel.
func NodeEnv(repoRoot, modules, apiURL, token, home string) []string {
	env := []string{
		"HOME=" + home, "XDG_CONFIG_HOME=" + home, "XDG_DATA_HOME=" + home, "XDG_CACHE_HOME=" + home,
		"VERCEL_AUTH_TOKEN=" + token,
		"VERCEL_TELEMETRY_DISABLED=1", "SANDBOX_SKIP_VERSION_CHECK=1", "NO_COLOR=1", "FORCE_COLOR=0",
		"OFFICIAL_NODE_MODULES=" + modules,
	}
	if apiURL != "" {
		env = append(env, "SANDBOX_EMULATOR_URL="+apiURL, "NODE_OPTIONS=--import="+Shim(repoRoot))
	}
	return env
}
