#!/usr/bin/env bash
# scripts/release.sh VERSION: releases every published module of this
# repository at VERSION, on a clean tree:
#
#  1. the modules must be in step (go run ./internal/release check: no
#     replace in any go.mod, one version of the siblings everywhere, go.work
#     mapping it);
#  2. scripts/release-check.sh VERSION proves, before anything is tagged,
#     that the release installs from a module proxy (go get of every module,
#     a consumer program, go install …/cmd/idem@VERSION, idem version);
#  3. go run ./internal/release prepare VERSION makes the release commit
#     (every module requires its siblings at VERSION, their go.sum lines,
#     go.work, the commit for `idem version`) and the tags, in dependency
#     order: VERSION, cron/VERSION, …, cmd/idem/VERSION.
#
# Nothing is pushed: the last lines say what to push. Then build the
# binaries from the tag: git checkout VERSION && scripts/binaries.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: scripts/release.sh VERSION (e.g. v0.9.0)}
if [ -n "$(git status --porcelain)" ]; then
	echo "scripts/release.sh: the tree has changes; commit them (or remove them) first:" >&2
	git status --short >&2
	exit 1
fi
go run ./internal/release check
scripts/release-check.sh "$version"
go run ./internal/release prepare "$version"
