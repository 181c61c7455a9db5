#!/usr/bin/env bash
# Prints what `make deploy` applies: config/default rendered by kustomize with
# the manager image set to IMG. The image is set in a throwaway overlay under
# bin/, so the committed config/ never changes (kubebuilder's `kustomize edit`
# on config/manager would leave the tree dirty after every deploy).
#
# Usage: hack/render-deploy.sh <kustomize binary> <image>
set -euo pipefail
kustomize=$(command -v "${1:?usage: $0 <kustomize> <image>}")
kustomize=$(cd "$(dirname "$kustomize")" && pwd)/$(basename "$kustomize")
img=${2:?usage: $0 <kustomize> <image>}
root=$(cd "$(dirname "$0")/.." && pwd)
overlay=$(mktemp -d "$root/bin/deploy-overlay.XXXXXX")
trap 'rm -rf "$overlay"' EXIT
# The base's images transformer has already renamed `controller` to
# sandbox-controller, so the overlay matches that name.
printf 'resources:\n- ../../config/default\n' >"$overlay/kustomization.yaml"
(cd "$overlay" && "$kustomize" edit set image "sandbox-controller=$img")
"$kustomize" build "$overlay"
