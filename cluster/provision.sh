#!/usr/bin/env bash
# Provision the binaries of a real Kubernetes control plane (etcd, kube-apiserver,
# kube-controller-manager) for tests and local runs, and print the folder that holds them.
#
# Order of preference, so users who already have binaries never wait for a build:
#   1. KUBEBUILDER_ASSETS (the envtest convention: a folder with etcd and kube-apiserver, and
#      kube-controller-manager if it has one);
#   2. the cache from an earlier build (~/.cache/operator-functions/k8s-<version>);
#   3. a build from Debian's `kubernetes` source package (about 9 minutes on 2 cores, once).
#
# Progress goes to stderr; the only line on stdout is the folder, so callers can capture it.
set -euo pipefail

K8S_VERSION=1.20.2
# Bumped whenever the patches applied to the source change, so a stale cache is never reused.
PATCH_LEVEL=3
CACHE_ROOT="${OPFN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/operator-functions}"
BIN_DIR="$CACHE_ROOT/k8s-$K8S_VERSION-p$PATCH_LEVEL"

say() { printf '[provision] %s\n' "$*" >&2; }
fail() { printf '[provision] error: %s\n' "$*" >&2; exit 1; }

have_binaries() { [ -x "$1/kube-apiserver" ] && { [ -x "$1/etcd" ] || command -v etcd >/dev/null; }; }

if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  have_binaries "$KUBEBUILDER_ASSETS" || fail "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no etcd and kube-apiserver; unset it to build them, or point it at a setup-envtest folder"
  echo "$KUBEBUILDER_ASSETS"; exit 0
fi

link_etcd() { [ -x "$BIN_DIR/etcd" ] || ln -sf "$(command -v etcd)" "$BIN_DIR/etcd"; }

if [ -x "$BIN_DIR/kube-apiserver" ] && [ -x "$BIN_DIR/kube-controller-manager" ] && command -v etcd >/dev/null; then
  link_etcd; echo "$BIN_DIR"; exit 0
fi

# One build at a time: concurrent test files (or a second terminal) wait for the first.
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/build.lock"
if ! flock -n 9; then
  say "another build of the control plane binaries is running; waiting for it"
  flock 9
  if [ -x "$BIN_DIR/kube-apiserver" ] && [ -x "$BIN_DIR/kube-controller-manager" ]; then link_etcd; echo "$BIN_DIR"; exit 0; fi
fi

command -v apt-get >/dev/null || fail "no apt-get: this machine cannot build Kubernetes from Debian's source; set KUBEBUILDER_ASSETS to a folder with etcd and kube-apiserver (setup-envtest) or export KUBECONFIG for an existing cluster"
[ "$(id -u)" = 0 ] || command -v sudo >/dev/null || fail "installing Debian packages needs root or sudo; run as root, or set KUBEBUILDER_ASSETS"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo

PACKAGES=(etcd-server golang-go dpkg-dev rsync golang-github-modern-go-reflect2-dev make)
missing=()
for p in "${PACKAGES[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done

# Debian's source index is needed for `apt-get source`; add a deb-src entry for the mirror the
# machine already uses (deb822 or one-line format), once.
SRC_LIST=/etc/apt/sources.list.d/operator-functions-src.list
need_update=0
if [ ! -f "$SRC_LIST" ]; then
  mirror=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | awk '{print $2}' | head -1)
  [ -n "$mirror" ] || mirror=$(grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | grep -v security | awk '{print $2}' | head -1)
  [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
  # apt refuses two entries for one mirror with different keyrings: reuse the existing one's.
  keyring=$(grep -hE '^Signed-By:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | head -1)
  options=""; [ -z "$keyring" ] || options="[signed-by=$keyring] "
  say "adding deb-src entry for $mirror bookworm main"
  echo "deb-src $options$mirror bookworm main" | $SUDO tee "$SRC_LIST" >/dev/null
  need_update=1
fi
if [ ${#missing[@]} -gt 0 ] || [ $need_update = 1 ]; then
  say "apt-get update"
  $SUDO apt-get update -q >&2 || fail "apt-get update failed: check the network to the Debian mirror"
fi
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 \
    || fail "apt-get install ${missing[*]} failed: check the network to the Debian mirror"
fi

# The binaries were cached all along, and only etcd was missing (a cache restored on a new machine).
if [ -x "$BIN_DIR/kube-apiserver" ] && [ -x "$BIN_DIR/kube-controller-manager" ]; then link_etcd; echo "$BIN_DIR"; exit 0; fi

BUILD_ROOT="$CACHE_ROOT/build"
mkdir -p "$BUILD_ROOT" "$BIN_DIR"
cd "$BUILD_ROOT"
# Every time, not only when no tarball is there: apt checks the files it has against the source
# package's hashes and downloads again what an interrupted run left truncated.
say "downloading Debian's kubernetes source package (or checking the copy from an earlier run)"
apt-get source --download-only kubernetes >&2 || fail "apt-get source kubernetes failed: is there a deb-src entry ($SRC_LIST) and network to the mirror?"

TREE="$BUILD_ROOT/kubernetes-$K8S_VERSION"
rm -rf "$TREE"; mkdir -p "$TREE"
say "unpacking $(ls kubernetes_*.orig.tar.gz | head -1)"
tar -xzf "$(ls kubernetes_*.orig.tar.gz | head -1)" -C "$TREE" --strip-components=1

# Go >= 1.18 crashes reflect2 1.0.1 at run time ("unexpected type"); Debian ships 1.0.2.
R2_SRC=/usr/share/gocode/src/github.com/modern-go/reflect2
R2_DST="$TREE/vendor/github.com/modern-go/reflect2"
[ -d "$R2_SRC" ] || fail "missing $R2_SRC (package golang-github-modern-go-reflect2-dev)"
rm -f "$R2_DST"/*.go "$R2_DST"/*.s
cp "$R2_SRC"/*.go "$R2_DST"/ ; cp "$R2_SRC"/*.s "$R2_DST"/ 2>/dev/null || true
rm -f "$R2_DST"/*_test.go

# Go >= 1.16 makes the OpenAPI type check treat "" as null, so the API server refuses any custom
# resource with an empty string field (kubernetes/kubernetes#99804; fixed upstream in 1.21 by
# kube-openapi#230, which this applies). Official 1.20 binaries were built with Go 1.15.
for f in vendor/k8s.io/kube-openapi/pkg/validation/validate/type.go vendor/github.com/go-openapi/validate/type.go; do
  [ -f "$TREE/$f" ] || continue
  sed -i 's/if data == nil || reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data)) {/if data == nil {/' "$TREE/$f"
  grep -q 'reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data))' "$TREE/$f" && fail "could not patch $f (kubernetes#99804)"
done

# A custom resource request that misses the CRD cache while the API server starts should be
# answered 503 ("server is starting"), yet the handler reads the cache before it asks whether the
# cache has synced: a read that misses just before the initial list lands, followed by that
# question (which waits for the list to be stored, then says yes), answers 404 for an object that
# exists -- the answer that makes the garbage collector delete children whose owner exists
# (kubernetes/kubernetes#104342). Seen here at about 1 restart in 15 under load. Ask first.
f=staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/customresource_handler.go
perl -0pi -e 's/(\t)crd, err := r\.crdLister\.Get\(crdName\)\n\tif apierrors\.IsNotFound\(err\) \{\n\t\tif !r\.hasSynced\(\) \{/$1synced := r.hasSynced()\n\tcrd, err := r.crdLister.Get(crdName)\n\tif apierrors.IsNotFound(err) {\n\t\tif !synced {/' "$TREE/$f"
grep -q 'synced := r.hasSynced()' "$TREE/$f" || fail "could not patch $f (kubernetes#104342)"

say "building kube-apiserver and kube-controller-manager (about 9 minutes on 2 cores; progress below)"
start=$(date +%s)
(
  cd "$TREE"
  mkdir -p .go/src/k8s.io && ln -sfn "$TREE" .go/src/k8s.io/kubernetes
  cd .go/src/k8s.io/kubernetes
  export GOPATH="$TREE/.go" GO111MODULE=off GOFLAGS=-mod=vendor CGO_ENABLED=0 GOLDFLAGS="-s -w"
  export GOCACHE="$BUILD_ROOT/gocache"
  # `go build -v` names each package as it compiles: a live progress counter without flooding.
  make WHAT="cmd/kube-apiserver cmd/kube-controller-manager" GOFLAGS="-v" 2>&1 \
    | awk '{ n++; if (n % 100 == 0) { printf "[provision]   %d packages compiled...\n", n > "/dev/stderr"; fflush("/dev/stderr") } if ($0 ~ /\.go:[0-9]+:|^make.*\*\*\*|^!!!|FAIL/) print > "/dev/stderr" }'
  exit "${PIPESTATUS[0]}"
) || fail "building Kubernetes failed (see the lines above); the build tree is kept in $TREE"
for b in kube-apiserver kube-controller-manager; do
  f=$(find "$TREE/_output" -type f -name "$b" -perm -u+x | head -1)
  [ -n "$f" ] || fail "build finished but $b was not produced"
  install -m 0755 "$f" "$BIN_DIR/$b"
done
link_etcd
say "built in $(( $(date +%s) - start ))s; cached in $BIN_DIR"
rm -rf "$TREE"
echo "$BIN_DIR"
