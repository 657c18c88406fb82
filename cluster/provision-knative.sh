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
  (mkdir -p "$CACHE_ROOT" && cd "$CACHE_ROOT" && GOFLAGS= go mod download -json "$1@$MODULE_VERSION" | sed -n 's/.*"Dir": "\(.*\)",*/\1/p') \
    || fail "the Go module proxy did not serve $1@$MODULE_VERSION: check the network to it (go env GOPROXY), or set KNATIVE_VERSION to a release it has (go list -m -versions $1)"
}

build_adapters() {
  local bin_dir="$OUT_DIR/bin" programs=(apiserver_receive_adapter mtping)
  complete() { for p in "${programs[@]}"; do [ -x "$bin_dir/$p" ] || return 1; done; }
  if complete; then echo "$bin_dir"; return 0; fi
  command -v go >/dev/null || fail "no Go on this machine: Knative's adapters are built from the Go module knative.dev/eventing. Install Go 1.25 or later"
  # One build at a time: concurrent test files wait for the first.
  mkdir -p "$OUT_DIR"
  exec 8>"$OUT_DIR/build.lock"
  if ! flock -n 8; then
    say "another build of Knative's adapters is running; waiting for it"
    flock 8
    if complete; then echo "$bin_dir"; return 0; fi
  fi
  local start dir="$OUT_DIR/build" packages=()
  start=$(date +%s)
  for p in "${programs[@]}"; do packages+=("knative.dev/eventing/cmd/$p"); done
  module_dir knative.dev/eventing >/dev/null
  wrapper_module "$dir" knative.dev/eventing "$MODULE_VERSION" </dev/null
  say "building ${programs[*]} of Knative $KNATIVE_VERSION (a few minutes on 2 cores, once; progress below)"
  build_packages "$dir" "-s -w" "${packages[@]}" \
    || fail "building Knative $KNATIVE_VERSION's adapters failed (see the lines above); the module is kept in $dir"
  mkdir -p "$bin_dir"
  for p in "${programs[@]}"; do install -m 0755 "$dir/bin/$p" "$bin_dir/$p"; done
  say "built in $(( $(date +%s) - start ))s; cached in $bin_dir"
  echo "$bin_dir"
}

case "${1:-crds}" in
  crds) ;;
  adapters) build_adapters; exit 0 ;;
  *) fail "unknown part \"$1\": provision-knative.sh [crds|adapters]" ;;
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
