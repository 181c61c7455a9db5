// Command printversion prints version.Get() as JSON: the smallest binary
// TestPlainGoBuildReportsTheCommit can build to see what a build without
// -ldflags reports.
package main

import (
	"encoding/json"
	"os"

	"github.com/getsentry/sandbox-controller/internal/version"
)

func main() {
	_ = json.NewEncoder(os.Stdout).Encode(version.Get())
}
