#!/usr/bin/env bash
# Generates the Go client of api/v1alpha1 under pkg/client: the apply
# configurations (controller-gen; the +kubebuilder:ac markers in
# api/v1alpha1/doc.go place them), then with k8s.io/code-generator the typed
# clientset (client-gen, whose Apply methods take those apply configurations),
# listers (lister-gen) and informers (informer-gen). Each output directory is
# emptied first, so a removed type leaves no stale file behind.
#
# `make generate` runs it with the tools it built into bin/:
#   CONTROLLER_GEN=bin/controller-gen CLIENT_GEN=bin/client-gen \
#   LISTER_GEN=bin/lister-gen INFORMER_GEN=bin/informer-gen hack/codegen.sh
set -euo pipefail
cd "$(dirname "$0")/.."

module=github.com/getsentry/sandbox-controller
out=pkg/client
header=hack/boilerplate.go.txt
apis=("$module/api/v1alpha1")

rm -rf "$out/applyconfiguration" "$out/clientset" "$out/listers" "$out/informers"

"${CONTROLLER_GEN:?}" applyconfiguration:headerFile="$header" paths=./api/...

"${CLIENT_GEN:?}" \
  --go-header-file "$header" \
  --input-base "$module" --input api/v1alpha1 \
  --clientset-name versioned \
  --fake-clientset=false \
  --apply-configuration-package "$module/$out/applyconfiguration" \
  --output-dir "$out/clientset" --output-pkg "$module/$out/clientset"

"${LISTER_GEN:?}" \
  --go-header-file "$header" \
  --output-dir "$out/listers" --output-pkg "$module/$out/listers" \
  "${apis[@]}"

"${INFORMER_GEN:?}" \
  --go-header-file "$header" \
  --versioned-clientset-package "$module/$out/clientset/versioned" \
  --listers-package "$module/$out/listers" \
  --output-dir "$out/informers" --output-pkg "$module/$out/informers" \
  "${apis[@]}"
