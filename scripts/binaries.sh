#!/usr/bin/env bash
# Builds static idem binaries for linux, darwin and windows on amd64 and
# arm64, with a SHA256SUMS file, reproducibly: the same commit gives the
# same bytes on any machine with the same Go version (-trimpath, no build
# id, no VCS stamp; the commit is set with -X main.commit, so
# `idem version` names it).
#
# Usage:
#   scripts/binaries.sh [OUTDIR]          # default dist/
#   scripts/binaries.sh --check [OUTDIR]  # build twice, and fail unless both
#                                         # builds' SHA256SUMS are identical
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
check=false
if [ "${1:-}" = "--check" ]; then
	check=true
	shift
fi
out=${1:-$root/dist}
commit=$(git -C "$root" rev-parse HEAD)
if [ -n "$(git -C "$root" status --porcelain)" ]; then
	commit=$commit+modified
fi
targets="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64"

# build DIR: every target into DIR, and DIR/SHA256SUMS.
build() {
	local dir=$1 t os arch name
	mkdir -p "$dir"
	for t in $targets; do
		os=${t%/*} arch=${t#*/}
		name=idem-$os-$arch
		[ "$os" = windows ] && name=$name.exe
		echo "== $t -> $dir/$name" >&2
		(cd "$root/cmd/idem" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -buildvcs=false \
			-ldflags "-s -w -buildid= -X main.commit=$commit" -o "$dir/$name" .)
	done
	(cd "$dir" && sha256sum idem-* > SHA256SUMS)
}

if ! $check; then
	build "$out"
	cat "$out/SHA256SUMS"
	exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
build "$tmp/a"
# The second build must not come from the build cache's linked binaries:
# a fresh GOCACHE rebuilds every package.
GOCACHE=$tmp/cache build "$tmp/b"
if ! cmp -s "$tmp/a/SHA256SUMS" "$tmp/b/SHA256SUMS"; then
	echo "binaries.sh: two builds of $commit differ:" >&2
	diff "$tmp/a/SHA256SUMS" "$tmp/b/SHA256SUMS" >&2 || true
	exit 1
fi
mkdir -p "$out"
cp "$tmp/a"/idem-* "$tmp/a/SHA256SUMS" "$out/"
echo "binaries.sh: six targets built twice, identical:" >&2
cat "$out/SHA256SUMS"
