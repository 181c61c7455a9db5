#!/usr/bin/env bash
# Installs (once) the Node.js that builds and tests the TypeScript client
# (clients/typescript) into bin/node-<version>/ and prints its bin directory;
# callers put that first on PATH, so npm and everything npm starts run on it
# (make ts-generate and test/clients do).
#
# Node comes from the npm registry, the one download site the repository
# already needs for the client's own dependencies: the node-linux-<arch>
# packages carry the official Node.js builds. The version is pinned here, and
# so is each tarball's sha512 (npm checks the registry's checksum as it
# downloads; the pin also fails when the registry serves something else for
# the same version). About 30 MB, 5 s on a fresh machine. Where no package is
# pinned (macOS), a node already on PATH is used if it is new enough.
#
# Usage: hack/node.sh          (prints the directory holding node)
set -euo pipefail
cd "$(dirname "$0")/.."

# The client's engines.node: @kubernetes/client-node 2.x depends on undici 8,
# which needs 22.19 or later.
NODE_VERSION=22.23.5
MIN_MAJOR=22
MIN_MINOR=19
declare -A SHA512=(
  [linux-x64]=3jhC+wcoWxKZxcRqF2sUSl0c9HEXFnur/nuIPx6O6CWKV0jOUWQm7Htw5SuXqqlMCEhi0cJqybFPEb5hhcBiMw==
  [linux-arm64]=e1LOUGKVruPGuLVutn8+Cgm5pI1APm4Kvh+zbb/qe/ZpD9s+TQby5iUgZOWmPpbSKpj0Td8DP1N0NEnXasHizg==
)

os=$(uname -s | tr '[:upper:]' '[:lower:]')
case "$(uname -m)" in
  x86_64 | amd64) arch=x64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) arch=$(uname -m) ;;
esac
platform="$os-$arch"
dir="bin/node-v$NODE_VERSION-$platform"

if [ -x "$dir/bin/node" ]; then
  echo "$PWD/$dir/bin"
  exit 0
fi

if [ -z "${SHA512[$platform]:-}" ]; then
  # No pinned build for this platform: a node on PATH that is new enough.
  if p=$(command -v node) && v=$(node -p 'process.versions.node') &&
    node -e "const [a,b]=process.versions.node.split('.').map(Number); process.exit(a>$MIN_MAJOR||(a===$MIN_MAJOR&&b>=$MIN_MINOR)?0:1)"; then
    echo "node: no pinned build for $platform; using $p ($v)" >&2
    dirname "$p"
    exit 0
  fi
  echo "node: no pinned build for $platform and no Node.js $MIN_MAJOR.$MIN_MINOR or later on PATH; install one (e.g. brew install node@22)" >&2
  exit 1
fi

command -v npm >/dev/null || { echo "node: npm is required to download Node.js $NODE_VERSION from the npm registry" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pkg="node-$platform@$NODE_VERSION"
if ! (cd "$tmp" && npm pack --silent --no-update-notifier "$pkg" >"$tmp/pack.out" 2>"$tmp/pack.err"); then
  cat "$tmp/pack.err" >&2
  echo "node: npm pack $pkg failed (is the npm registry reachable?)" >&2
  exit 1
fi
tgz="$tmp/$(tail -1 "$tmp/pack.out")"
got=$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)
if [ "$got" != "${SHA512[$platform]}" ]; then
  echo "node: $pkg has sha512 $got, want ${SHA512[$platform]}: not installing it" >&2
  exit 1
fi
mkdir -p "$tmp/x"
tar -xzf "$tgz" -C "$tmp/x" package/bin/node package/LICENSE
mkdir -p "$dir.tmp/bin"
mv "$tmp/x/package/bin/node" "$dir.tmp/bin/node"
mv "$tmp/x/package/LICENSE" "$dir.tmp/LICENSE"
"$dir.tmp/bin/node" --version >&2
rm -rf "$dir"
mv "$dir.tmp" "$dir"
echo "$PWD/$dir/bin"
