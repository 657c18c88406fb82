# Sourced by provision.sh and provision-knative.sh: builds programs of the field's own components
# (Kubernetes, etcd, Knative) from their published Go modules with the machine's Go. Each build
# is a small module of our own whose go.mod requires the component at the release's version and
# carries the replace directives its own go.mod can only resolve inside its repository.

say() { printf '[provision] %s\n' "$*" >&2; }
fail() { printf '[provision] error: %s\n' "$*" >&2; exit 1; }

export GOFLAGS="-mod=mod -trimpath" CGO_ENABLED=0

# Runs `$3…` holding the lock file `$1`, one build at a time: concurrent test files (or a second
# terminal) wait for the first, naming what (`$2`) they wait for. The command should first check
# whether the build it waited for made what it needs. The lock is held until the script ends.
with_build_lock() {
  local lock="$1" what="$2"; shift 2
  mkdir -p "$(dirname "$lock")"
  exec 9>"$lock"
  if ! flock -n 9; then
    say "another build of $what is running; waiting for it"
    flock 9
  fi
  "$@"
}

# The field `$2` (Dir, GoMod) of module `$1` (name@version) in the module cache, downloaded if
# need be. Run outside any module (in $CACHE_ROOT), so no go.mod is consulted or changed.
module_field() {
  (mkdir -p "$CACHE_ROOT" && cd "$CACHE_ROOT" && GOFLAGS= go mod download -json "$1" | sed -n "s/.*\"$2\": \"\(.*\)\",*/\1/p")
}

# A module in `$1` that requires `$2@$3` and replaces each module named on stdin (a line
# "name replacement@version" each); go.sum entries are checked against the checksum database as
# the build adds them.
wrapper_module() {
  local dir="$1" module="$2" version="$3"
  rm -rf "$dir"; mkdir -p "$dir"
  (
    cd "$dir"
    printf 'module operator-functions.local/build\n\ngo 1.25.0\n\nrequire %s %s\n' "$module" "$version" > go.mod
    while read -r name replacement; do go mod edit -replace "$name=$replacement"; done
  )
}

# Builds the packages `$3…` of the module in `$1` with ldflags `$2` into `$1/bin/`. Listing them
# first downloads the modules they need, counted as they come; `go build -v` then names each
# package as it compiles: a live counter against the number of packages, without flooding.
build_packages() {
  local dir="$1" ldflags="$2"; shift 2
  (
    cd "$dir"
    say "resolving $* (the first time downloads their Go modules)"
    total=$(go list -deps "$@" 2> >(awk '
        /^go: downloading/ { n++; if (n % 25 == 0) { printf "[provision]   %d modules downloaded\n", n > "/dev/stderr"; fflush("/dev/stderr") } next }
        { print > "/dev/stderr" }') | wc -l) || exit 1
    go build -v -ldflags "$ldflags" -o "$dir/bin/" "$@" 2>&1 \
      | awk -v total="$total" '
          /^go: downloading/ { next }
          /\.go:[0-9]+:|^# |^go: / { print > "/dev/stderr"; next }
          { n++; if (n % 100 == 0) { printf "[provision]   %d of at most %s packages compiled\n", n, total > "/dev/stderr"; fflush("/dev/stderr") } }'
    exit "${PIPESTATUS[0]}"
  )
}
