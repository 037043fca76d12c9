#!/usr/bin/env bash
# Runs every test of every Go module in this repository, with the race
# detector, plus go vet and a gofmt check. Extra arguments go to `go test`
# (e.g. scripts/test.sh -run TestCrash -v).
#
# Usage: scripts/test.sh [go test flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" $unformatted >&2
	exit 1
fi

# Every directory with a go.mod is a module; test each on its own.
mapfile -t modules < <(find . -name go.mod -not -path '*/testdata/*' -printf '%h\n' | sort)
status=0
for m in "${modules[@]}"; do
	echo "== module $m"
	(cd "$root/$m" && go vet ./... && go test -race -count=1 "$@" ./...) || status=1
done
exit $status
