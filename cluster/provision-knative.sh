#!/usr/bin/env bash
# Provision Knative's CustomResourceDefinitions from the release's own Go modules
# (knative.dev/serving and knative.dev/eventing carry their config/ folders), and print the
# folder that holds them. The generated manifests are checked against these CRDs and the local
# plane installs them.
#
# `provision-knative.sh adapters` instead builds Knative's data-plane programs the project runs
# against its test control plane as plain processes (the ApiServerSource receive adapter and the
# PingSource adapter, knative.dev/eventing's cmd/apiserver_receive_adapter and cmd/mtping) and
# prints the folder that holds them (~/.cache/operator-functions/knative-<version>/bin), built as
# cluster/provision.sh builds Kubernetes: a small module of our own requires knative.dev/eventing
# at the release's version (its go.mod has no replace directives to carry over).
#
# `provision-knative.sh eventing-module` prints the folder of knative.dev/eventing's module source
# (config/ among it) in the Go module cache, downloading it if need be.
#
# KNATIVE_VERSION selects another release (Knative 1.N is module version v0.(N+27).x).
# Progress goes to stderr; the only line on stdout is the folder.
set -euo pipefail

KNATIVE_VERSION="${KNATIVE_VERSION:-1.23.0}"
CACHE_ROOT="${OPFN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/operator-functions}"
OUT_DIR="$CACHE_ROOT/knative-$KNATIVE_VERSION"
CRD_DIR="$OUT_DIR/crds"

# shellcheck source=go-build.sh
. "$(dirname "$0")/go-build.sh"

[[ "$KNATIVE_VERSION" =~ ^1\.([0-9]+)\.([0-9]+)$ ]] || fail "KNATIVE_VERSION=$KNATIVE_VERSION is not a release such as 1.23.0"
MODULE_VERSION="v0.$(( BASH_REMATCH[1] + 27 )).${BASH_REMATCH[2]}"

# Which files of each module's config/ are the kinds the project generates or runs.
SERVING_CRDS=(service configuration revision route)
EVENTING_CRDS=(apiserversource pingsource broker trigger eventpolicy)

# The folder of `$1@$MODULE_VERSION` in the module cache, downloaded if need be.
module_dir() {
  module_field "$1@$MODULE_VERSION" Dir \
    || fail "the Go module proxy did not serve $1@$MODULE_VERSION: check the network to it (go env GOPROXY), or set KNATIVE_VERSION to a release it has (go list -m -versions $1)"
}

BIN_DIR="$OUT_DIR/bin"
PROGRAMS=(apiserver_receive_adapter mtping)
adapters_complete() { for p in "${PROGRAMS[@]}"; do [ -x "$BIN_DIR/$p" ] || return 1; done; }

build_adapters() {
  adapters_complete && return 0 # the build waited for made them
  local start dir="$OUT_DIR/build" packages=()
  start=$(date +%s)
  for p in "${PROGRAMS[@]}"; do packages+=("knative.dev/eventing/cmd/$p"); done
  module_dir knative.dev/eventing >/dev/null
  wrapper_module "$dir" knative.dev/eventing "$MODULE_VERSION" </dev/null
  say "building ${PROGRAMS[*]} of Knative $KNATIVE_VERSION (this takes a while, once; progress below)"
  build_packages "$dir" "-s -w" "${packages[@]}" \
    || fail "building Knative $KNATIVE_VERSION's adapters failed (see the lines above); the module is kept in $dir"
  mkdir -p "$BIN_DIR"
  for p in "${PROGRAMS[@]}"; do install -m 0755 "$dir/bin/$p" "$BIN_DIR/$p"; done
  say "built in $(( $(date +%s) - start ))s; cached in $BIN_DIR"
}

case "${1:-crds}" in
  crds) ;;
  adapters)
    if ! adapters_complete; then
      command -v go >/dev/null || fail "no Go on this machine: Knative's adapters are built from the Go module knative.dev/eventing. Install Go 1.25 or later"
      with_build_lock "$OUT_DIR/build.lock" "Knative's adapters" build_adapters
    fi
    echo "$BIN_DIR"; exit 0 ;;
  eventing-module)
    command -v go >/dev/null || fail "no Go on this machine: knative.dev/eventing's module source is read from the Go module cache. Install Go 1.25 or later"
    module_dir knative.dev/eventing; exit 0 ;;
  *) fail "unknown part \"$1\": provision-knative.sh [crds|adapters|eventing-module]" ;;
esac

if [ ! -f "$CRD_DIR/SOURCE.txt" ]; then
  command -v go >/dev/null || fail "no Go on this machine: Knative's CRDs are read from its Go modules. Install Go 1.25 or later, or set KNATIVE_CRDS_DIR to a folder with Knative's CRD files"
  say "fetching Knative $KNATIVE_VERSION's CRDs (knative.dev/serving and knative.dev/eventing $MODULE_VERSION)"
  serving=$(module_dir knative.dev/serving)
  eventing=$(module_dir knative.dev/eventing)
  staging="$OUT_DIR/crds.partial"
  rm -rf "$staging"; mkdir -p "$staging"
  for name in "${SERVING_CRDS[@]}"; do cp "$serving/config/core/300-resources/$name.yaml" "$staging/"; done
  for name in "${EVENTING_CRDS[@]}"; do cp "$eventing/config/core/resources/$name.yaml" "$staging/"; done
  chmod u+w "$staging"/*
  printf 'Knative %s CRDs, unchanged, from the Go modules knative.dev/serving@%s (config/core/300-resources) and knative.dev/eventing@%s (config/core/resources).\n' \
    "$KNATIVE_VERSION" "$MODULE_VERSION" "$MODULE_VERSION" > "$staging/SOURCE.txt"
  rm -rf "$CRD_DIR"; mv "$staging" "$CRD_DIR"
fi
echo "$CRD_DIR"
