#!/usr/bin/env bash
# Runs every test of every Go module in this repository, with the race
# detector, plus go vet and a gofmt check. Extra arguments go to `go test`
# (e.g. scripts/test.sh -run TestCrash -v).
#
# Usage: scripts/test.sh [go test flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

unformatted=$(find . -name '*.go' -not -path './.git/*' -print0 | xargs -0 gofmt -l)
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
# A short pass of the state-file decoder's fuzz test (its seed corpus is in
# testdata/fuzz); it must never panic.
echo "== fuzz FuzzDecodeState (10s)"
go test -run '^$' -fuzz '^FuzzDecodeState$' -fuzztime 10s . || status=1
exit $status
