#!/usr/bin/env bash
# scripts/release-check.sh VERSION: shows, without publishing anything,
# that a release of this tree at VERSION installs like any Go module:
#
#  1. the working tree's files (tracked, and untracked ones not ignored) are
#     copied into a repository of their own, where `release prepare VERSION`
#     makes the release commit and its tags as scripts/release.sh would;
#  2. `release proxy` puts every published module at VERSION into a module
#     proxy on the file system (GOPROXY=file://...);
#  3. outside any workspace, each published module's packages resolve from
#     that proxy with its own go.sum (-mod=readonly: a missing line fails);
#  4. in a new module outside the repository (no go.work, no replace), a
#     consumer `go get`s each published module at VERSION, and builds and
#     runs a program using the root, pgledger, redisstore, prom, otel and ui
#     together (internal/release/testdata/consumer);
#  5. `go install github.com/idemgo/idem/cmd/idem@VERSION` works, and
#     `idem version` prints VERSION and the commit the release was made from;
#  6. what `go get` of each published module alone adds to a consumer's
#     go.mod and go.sum is printed.
#
# Modules other than idem's come from the local module cache, else from
# $GOPROXY. A fresh module cache is used (and removed), so that a module of
# an earlier check at the same VERSION is never reused.
#
# scripts/test.sh runs it with a throwaway version (v0.9.0-check).
set -euo pipefail
cd "$(dirname "$0")/.."
# Every build here with cgo off, as docs/operators.md installs the idem
# command (the modules need no C toolchain), and as scripts/test.sh builds
# without the race detector: there, what the tests compiled is reused.
export CGO_ENABLED=0
# The go command's "downloading", "finding", "found", "added" and "upgraded" lines (the fresh
# module cache below) are left out.
exec 2> >(grep -v -E '^go: (downloading|finding|found|added|upgraded) ' >&2)
version=${1:?usage: scripts/release-check.sh VERSION (e.g. v0.9.0-check)}
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null || true; rm -rf "$work"' EXIT
usual_proxy=$(go env GOPROXY)
local_cache="file://$(go env GOMODCACHE)/cache/download"

echo "== copy the working tree and prepare $version in it"
mkdir "$work/src"
git ls-files -z --cached --others --exclude-standard --deduplicate |
	while IFS= read -r -d '' f; do
		if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
	done |
	tar --null -T - -cf - | tar -C "$work/src" -xf -
cd "$work/src"
export GIT_AUTHOR_NAME=release-check GIT_AUTHOR_EMAIL=release-check@localhost
export GIT_COMMITTER_NAME=release-check GIT_COMMITTER_EMAIL=release-check@localhost
git init -q
git add -A
git commit -q -m "the tree under check"
go run ./internal/release prepare "$version"
source=$(cat cmd/idem/release_commit.txt)

echo "== module proxy"
go run ./internal/release proxy "$version" "$work/proxy"

list=$(go run ./internal/release list) # DIR=PATH of each published module
mapfile -t published <<<"$list"
if [ ${#published[@]} -lt 2 ]; then
	echo "release-check: release list found ${#published[@]} published modules: $list" >&2
	exit 1
fi

export GOWORK=off GONOSUMDB=github.com/idemgo GOMODCACHE="$work/modcache"
export GOPROXY="file://$work/proxy,$local_cache,$usual_proxy"
echo "== each published module resolves from the proxy with its own go.sum"
for entry in "${published[@]}"; do
	dir=${entry%%=*}
	(cd "$work/src/$dir" && GOFLAGS="${GOFLAGS:-} -mod=readonly -modcacherw" go list -deps ./... >/dev/null) ||
		{ echo "release-check: module in $dir does not build outside the workspace from its go.mod and go.sum" >&2; exit 1; }
done

# (GOFLAGS keeps what the caller set: scripts/test.sh's -trimpath lets
# these builds reuse the dependencies its tests compiled.)
export GOFLAGS="${GOFLAGS:-} -mod=mod -modcacherw"
echo "== a consumer of every published module"
mkdir "$work/consumer"
cd "$work/consumer"
go mod init example.com/consumer 2>/dev/null
for entry in "${published[@]}"; do
	go get "${entry#*=}@$version"
done
cp "$work/src/internal/release/testdata/consumer/main.go" .
go build -o consumer . # -mod=mod: adds what the program imports beyond the modules got
./consumer

echo "== go install github.com/idemgo/idem/cmd/idem@$version"
GOBIN="$work/bin" go install "github.com/idemgo/idem/cmd/idem@$version"
got=$("$work/bin/idem" version)
echo "$got"
case $got in
"idem $version commit $source go"*) ;;
*)
	echo "release-check: idem version printed \"$got\"; want \"idem $version commit $source go...\"" >&2
	exit 1
	;;
esac

echo "== what go get of each published module alone brings into a new consumer's module graph"
for entry in "${published[@]}"; do
	mod=${entry#*=}
	d=$(mktemp -d -p "$work")
	(cd "$d" && go mod init example.com/c >/dev/null 2>&1 && go get "$mod@$version" &&
		printf '   %-38s %3d modules (go list -m all), %3d go.sum lines\n' "$mod" "$(($(go list -m all | wc -l) - 1))" "$(wc -l <go.sum)")
done
echo "== release-check $version passed"
