#!/usr/bin/env bash
# Runs every Go fuzz target of the repository for FUZZTIME each (default 15s),
# not only their seed corpora (which `go test` runs). A target is any
# `func FuzzXxx(f *testing.F)` in a committed _test.go file, so a new one is
# picked up without an edit here. A failure leaves the failing input under the
# package's testdata/fuzz/ for `go test` to replay.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-15s}
targets=$(git ls-files '*_test.go' | xargs grep -H -o '^func Fuzz[A-Za-z0-9_]*(f \*testing\.F)' |
  sed -E 's#^(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*#\1 \2#' | sort -u)
if [[ -z "$targets" ]]; then
  echo "fuzz: no fuzz targets found" >&2
  exit 1
fi
n=0
while read -r dir name; do
  echo "fuzz: $name in ./$dir for $fuzztime"
  go test -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" "./$dir"
  n=$((n + 1))
done <<<"$targets"
echo "fuzz: $n targets passed"
