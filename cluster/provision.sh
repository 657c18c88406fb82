#!/usr/bin/env bash
# Provision the binaries of a real Kubernetes control plane (etcd, kube-apiserver,
# kube-controller-manager, and kubectl for the walkthroughs) and print the folder that holds them.
#
# Order of preference, so users who already have binaries never wait for a build:
#   1. KUBEBUILDER_ASSETS (the envtest convention: a folder with etcd and kube-apiserver, and
#      kube-controller-manager if it has one);
#   2. the cache from an earlier build (~/.cache/operator-functions/k8s-<version>; its etcd is
#      rebuilt when `etcd --version` is not ETCD_VERSION);
#   3. a build from the release's Go modules with the machine's Go (once, cached): a small
#      module of our own requires k8s.io/kubernetes and points each of its staging modules
#      (k8s.io/api, k8s.io/client-go, ...) at their published v0.<minor>.<patch>, which is what
#      k8s.io/kubernetes itself cannot do for its dependants. etcd is the main package of
#      go.etcd.io/etcd/server/v3, built the same way.
#
# K8S_VERSION and ETCD_VERSION select other releases. Progress goes to stderr; the only line on
# stdout is the folder, so callers can capture it.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.35.4}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"
CACHE_ROOT="${OPFN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/operator-functions}"
BIN_DIR="$CACHE_ROOT/k8s-$K8S_VERSION"

# shellcheck source=go-build.sh
. "$(dirname "$0")/go-build.sh"

if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  [ -x "$KUBEBUILDER_ASSETS/kube-apiserver" ] && [ -x "$KUBEBUILDER_ASSETS/etcd" ] \
    || fail "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no etcd and kube-apiserver; unset it to build them, or point it at a setup-envtest folder"
  echo "$KUBEBUILDER_ASSETS"; exit 0
fi

[[ "$K8S_VERSION" =~ ^1\.([0-9]+)\.[0-9]+$ ]] || fail "K8S_VERSION=$K8S_VERSION is not a release such as 1.35.4"
K8S_MINOR="${BASH_REMATCH[1]}"

# The folder is named by the Kubernetes release; which etcd it holds, etcd itself says.
k8s_complete() { for b in kube-apiserver kube-controller-manager kubectl; do [ -x "$BIN_DIR/$b" ] || return 1; done; }
etcd_complete() { local v; v=$("$BIN_DIR/etcd" --version 2>/dev/null) && [[ "$v" == "etcd Version: $ETCD_VERSION"$'\n'* ]]; }
complete() { k8s_complete && etcd_complete; }
if complete; then echo "$BIN_DIR"; exit 0; fi

command -v go >/dev/null || fail "no Go on this machine: the control plane is built from Kubernetes' Go modules. Install Go 1.25 or later, or set KUBEBUILDER_ASSETS to a folder with etcd and kube-apiserver (setup-envtest), or export KUBECONFIG for an existing cluster"

BUILD_ROOT="$CACHE_ROOT/build"

# Kubernetes: k8s.io/kubernetes's go.mod points its ~30 staging modules at ./staging, which only
# works inside its own repository; each has a published v0.<minor>.<patch> twin.
build_kubernetes() {
  local module_dir="$BUILD_ROOT/kubernetes-$K8S_VERSION" gomod stamp=""
  say "fetching k8s.io/kubernetes v$K8S_VERSION's module list"
  gomod=$(module_field "k8s.io/kubernetes@v$K8S_VERSION" GoMod) \
    || fail "the Go module proxy did not serve k8s.io/kubernetes@v$K8S_VERSION: check the network to it (go env GOPROXY), or set K8S_VERSION to a release it has (go list -m -versions k8s.io/kubernetes)"
  [ -f "$gomod" ] || fail "no go.mod for k8s.io/kubernetes@v$K8S_VERSION in the module cache"
  awk -v version="v0.${K8S_VERSION#1.}" '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1, $1 "@" version }' "$gomod" \
    | wrapper_module "$module_dir" k8s.io/kubernetes "v$K8S_VERSION"
  # Stamped as the release scripts stamp it, so /version tells the truth (Knative's components
  # refuse an API server older than they support).
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    stamp+=" -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$K8S_MINOR -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  say "building kube-apiserver, kube-controller-manager and kubectl v$K8S_VERSION (this takes a while, once; progress below)"
  build_packages "$module_dir" "-s -w$stamp" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl \
    || fail "building Kubernetes v$K8S_VERSION failed (see the lines above); the module is kept in $module_dir"
  for b in kube-apiserver kube-controller-manager kubectl; do install -m 0755 "$module_dir/bin/$b" "$BIN_DIR/$b"; done
  "$BIN_DIR/kube-apiserver" --version >&2
}

# etcd's go.mod points its sibling modules at ../api and so on; they are published at the same version.
build_etcd() {
  local module_dir="$BUILD_ROOT/etcd-$ETCD_VERSION"
  printf '%s\n' api client/pkg client/v3 pkg | sed "s|.*|go.etcd.io/etcd/&/v3 go.etcd.io/etcd/&/v3@v$ETCD_VERSION|" \
    | wrapper_module "$module_dir" go.etcd.io/etcd/server/v3 "v$ETCD_VERSION"
  say "building etcd v$ETCD_VERSION"
  build_packages "$module_dir" "-s -w" go.etcd.io/etcd/server/v3 \
    || fail "building etcd v$ETCD_VERSION failed (see the lines above); the module is kept in $module_dir"
  install -m 0755 "$module_dir/bin/server" "$BIN_DIR/etcd"
}

build() {
  complete && return 0 # the build waited for made them
  local start
  start=$(date +%s)
  mkdir -p "$BUILD_ROOT" "$BIN_DIR"
  k8s_complete || build_kubernetes
  etcd_complete || build_etcd
  say "built in $(( $(date +%s) - start ))s; cached in $BIN_DIR"
}

with_build_lock "$CACHE_ROOT/build.lock" "the control plane binaries" build
echo "$BIN_DIR"
