#!/usr/bin/env bash
# Provision the binaries of a real Kubernetes control plane (etcd, kube-apiserver,
# kube-controller-manager, and kubectl for the walkthroughs) and print the folder that holds them.
#
# Order of preference, so users who already have binaries never wait for a build:
#   1. KUBEBUILDER_ASSETS (the envtest convention: a folder with etcd and kube-apiserver, and
#      kube-controller-manager if it has one);
#   2. the cache from an earlier build (~/.cache/operator-functions/k8s-<version>);
#   3. a build from the release's Go modules with the machine's Go (about 15 minutes on 2 cores,
#      once): a small module of our own requires k8s.io/kubernetes and points each of its staging
#      modules (k8s.io/api, k8s.io/client-go, ...) at their published v0.<minor>.<patch>, which
#      is what k8s.io/kubernetes itself cannot do for its dependants. etcd is the main package of
#      go.etcd.io/etcd/server/v3, built the same way.
#
# K8S_VERSION and ETCD_VERSION select other releases. Progress goes to stderr; the only line on
# stdout is the folder, so callers can capture it.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.35.4}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"
CACHE_ROOT="${OPFN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/operator-functions}"
BIN_DIR="$CACHE_ROOT/k8s-$K8S_VERSION"
BINARIES=(kube-apiserver kube-controller-manager kubectl etcd)

# shellcheck source=go-build.sh
. "$(dirname "$0")/go-build.sh"

if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  [ -x "$KUBEBUILDER_ASSETS/kube-apiserver" ] && [ -x "$KUBEBUILDER_ASSETS/etcd" ] \
    || fail "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no etcd and kube-apiserver; unset it to build them, or point it at a setup-envtest folder"
  echo "$KUBEBUILDER_ASSETS"; exit 0
fi

[[ "$K8S_VERSION" =~ ^1\.([0-9]+)\.[0-9]+$ ]] || fail "K8S_VERSION=$K8S_VERSION is not a release such as 1.35.4"
K8S_MINOR="${BASH_REMATCH[1]}"

complete() { for b in "${BINARIES[@]}"; do [ -x "$BIN_DIR/$b" ] || return 1; done; }
if complete; then echo "$BIN_DIR"; exit 0; fi

command -v go >/dev/null || fail "no Go on this machine: the control plane is built from Kubernetes' Go modules. Install Go 1.25 or later, or set KUBEBUILDER_ASSETS to a folder with etcd and kube-apiserver (setup-envtest), or export KUBECONFIG for an existing cluster"

# One build at a time: concurrent test files (or a second terminal) wait for the first.
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/build.lock"
if ! flock -n 9; then
  say "another build of the control plane binaries is running; waiting for it"
  flock 9
  if complete; then echo "$BIN_DIR"; exit 0; fi
fi

BUILD_ROOT="$CACHE_ROOT/build"
mkdir -p "$BUILD_ROOT" "$BIN_DIR"
start=$(date +%s)

# Kubernetes: k8s.io/kubernetes's go.mod points its ~30 staging modules at ./staging, which only
# works inside its own repository; each has a published v0.<minor>.<patch> twin.
K8S_MODULE_DIR="$BUILD_ROOT/kubernetes-$K8S_VERSION"
say "fetching k8s.io/kubernetes v$K8S_VERSION's module list"
k8s_gomod=$(cd "$BUILD_ROOT" && GOFLAGS= go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p') \
  || fail "the Go module proxy did not serve k8s.io/kubernetes@v$K8S_VERSION: check the network to it (go env GOPROXY), or set K8S_VERSION to a release it has (go list -m -versions k8s.io/kubernetes)"
[ -f "$k8s_gomod" ] || fail "no go.mod for k8s.io/kubernetes@v$K8S_VERSION in the module cache"
awk -v version="v0.${K8S_VERSION#1.}" '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1, $1 "@" version }' "$k8s_gomod" \
  | wrapper_module "$K8S_MODULE_DIR" k8s.io/kubernetes "v$K8S_VERSION"

# Stamped as the release scripts stamp it, so /version tells the truth (Knative's components
# refuse an API server older than they support).
stamp=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=" -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$K8S_MINOR -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
done
say "building kube-apiserver, kube-controller-manager and kubectl v$K8S_VERSION (about 15 minutes on 2 cores, once; progress below)"
build_packages "$K8S_MODULE_DIR" "-s -w$stamp" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl \
  || fail "building Kubernetes v$K8S_VERSION failed (see the lines above); the module is kept in $K8S_MODULE_DIR"

# etcd's go.mod points its sibling modules at ../api and so on; they are published at the same version.
ETCD_MODULE_DIR="$BUILD_ROOT/etcd-$ETCD_VERSION"
printf '%s\n' api client/pkg client/v3 pkg | sed "s|.*|go.etcd.io/etcd/&/v3 go.etcd.io/etcd/&/v3@v$ETCD_VERSION|" \
  | wrapper_module "$ETCD_MODULE_DIR" go.etcd.io/etcd/server/v3 "v$ETCD_VERSION"
say "building etcd v$ETCD_VERSION"
build_packages "$ETCD_MODULE_DIR" "-s -w" go.etcd.io/etcd/server/v3 \
  || fail "building etcd v$ETCD_VERSION failed (see the lines above); the module is kept in $ETCD_MODULE_DIR"

for b in kube-apiserver kube-controller-manager kubectl; do install -m 0755 "$K8S_MODULE_DIR/bin/$b" "$BIN_DIR/$b"; done
install -m 0755 "$ETCD_MODULE_DIR/bin/server" "$BIN_DIR/etcd"
"$BIN_DIR/kube-apiserver" --version >&2
say "built in $(( $(date +%s) - start ))s; cached in $BIN_DIR"
echo "$BIN_DIR"
