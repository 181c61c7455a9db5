#!/usr/bin/env bash
# Puts promtool at the path given (make promtool: bin/promtool), for
# test/monitoring's `promtool test rules` of config/prometheus.
#
# promtool comes from Debian's prometheus package (19 MB download): the
# package is downloaded, not installed, and only usr/bin/promtool is
# extracted, so no Prometheus server is installed or started. About 20 s on a
# fresh machine (apt-get update first when the package lists are empty). Where
# there is no apt-get (macOS), a promtool already on PATH is linked instead.
#
# Usage: hack/promtool.sh <destination>
set -euo pipefail
dest=${1:?usage: $0 <destination>}
mkdir -p "$(dirname "$dest")"

if ! command -v apt-get >/dev/null; then
  if p=$(command -v promtool); then
    ln -sf "$p" "$dest"
    exit 0
  fi
  echo "promtool: no apt-get and no promtool on PATH; install Prometheus's promtool (e.g. brew install prometheus)" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp" # apt-get download runs as _apt where it can
download() { (cd "$tmp" && apt-get download -q prometheus >/dev/null 2>"$tmp/apt.err"); }
if ! download; then
  echo "promtool: apt-get download prometheus failed; updating the package lists" >&2
  apt-get update -q >/dev/null
  download || { cat "$tmp/apt.err" >&2; exit 1; }
fi
dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -x -C "$tmp" ./usr/bin/promtool
mv "$tmp/usr/bin/promtool" "$dest"
"$dest" --version 2>&1 | head -1
