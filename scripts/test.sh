#!/usr/bin/env bash
# Runs every test of every Go module in this repository, with the race
# detector, plus go vet and a gofmt check. Extra arguments go to `go test`
# (e.g. scripts/test.sh -run TestCrash -v).
#
# Before the tests, three static steps check every module: it compiles and
# vets, tests included, for linux, darwin and windows (amd64); staticcheck
# (the pinned version below, through `go run`) finds nothing; and
# `go mod tidy` would change nothing in go.mod or go.sum.
#
# Each `go test` gets -timeout $IDEM_TEST_TIMEOUT (default 8m; a -timeout
# among the arguments wins): a test that hangs fails its module with a
# goroutine dump instead of holding the run. A failing step does not stop the
# others; the last lines name the steps that failed.
#
# Usage: scripts/test.sh [go test flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
timeout=${IDEM_TEST_TIMEOUT:-8m}
failed=()

# step NAME COMMAND...: runs COMMAND, reports its wall time, and records
# NAME if it fails.
step() {
	local name=$1 start=$SECONDS
	shift
	if "$@"; then
		echo "== ok   $name ($((SECONDS - start))s)"
	else
		echo "== FAIL $name ($((SECONDS - start))s)"
		failed+=("$name")
	fi
}

unformatted=$(find . -name '*.go' -not -path './.git/*' -print0 | xargs -0 gofmt -l)
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" $unformatted >&2
	failed+=("gofmt")
fi

# The throwaway servers started below are stopped at exit, on every path.
stop_pg="" stop_redis=""
cleanup() {
	if [ -n "$stop_pg" ]; then
		scripts/pg.sh stop "$IDEM_TEST_PG_DSN" >/dev/null 2>&1 || true
	fi
	if [ -n "$stop_redis" ]; then
		scripts/redis.sh stop "$IDEM_TEST_REDIS_ADDR" >/dev/null 2>&1 || true
	fi
}
trap cleanup EXIT
ci() { [ -n "${CI:-}" ] && [ "${CI}" != false ] && [ "${CI}" != 0 ]; }

# The Postgres ledger's tests need a PostgreSQL: unless IDEM_TEST_PG_DSN
# names one, start a throwaway server (scripts/pg.sh) and stop it at exit.
# In CI (CI=true) a server that cannot start fails the run; elsewhere those
# tests skip.
if [ -f pgledger/go.mod ] && [ -z "${IDEM_TEST_PG_DSN:-}" ]; then
	pglog=$(mktemp)
	if pgenv=$(scripts/pg.sh start 2>"$pglog"); then
		eval "$pgenv"
		export IDEM_TEST_PG_DSN
		stop_pg=1
	elif ci; then
		cat "$pglog" >&2
		echo "scripts/test.sh: cannot start PostgreSQL for ./pgledger's tests (CI requires them)" >&2
		rm -f "$pglog"
		exit 1
	else
		echo "== PostgreSQL not started ($(tail -n 1 "$pglog")): ./pgledger's database tests skip; install postgresql (initdb under /usr/lib/postgresql/*/bin) or set IDEM_TEST_PG_DSN=postgres://... and rerun scripts/test.sh"
	fi
	rm -f "$pglog"
fi

# The Redis store's tests need a redis-server: unless IDEM_TEST_REDIS_ADDR
# names one, start a throwaway server (scripts/redis.sh: appendonly yes,
# appendfsync always) and stop it at exit. In CI a server that cannot start
# fails the run; elsewhere those tests skip.
if [ -f redisstore/go.mod ] && [ -z "${IDEM_TEST_REDIS_ADDR:-}" ]; then
	redislog=$(mktemp)
	if redisenv=$(scripts/redis.sh start 2>"$redislog"); then
		eval "$redisenv"
		export IDEM_TEST_REDIS_ADDR
		stop_redis=1
	elif ci; then
		cat "$redislog" >&2
		echo "scripts/test.sh: cannot start redis-server for ./redisstore's tests (CI requires them)" >&2
		rm -f "$redislog"
		exit 1
	else
		echo "== redis-server not started ($(tail -n 1 "$redislog")): ./redisstore's tests skip; install redis-server or set IDEM_TEST_REDIS_ADDR=host:port and rerun scripts/test.sh"
	fi
	rm -f "$redislog"
fi

# Every directory with a go.mod is a module; test each on its own.
mapfile -t modules < <(find . -name go.mod -not -path '*/testdata/*' -printf '%h\n' | sort)

# staticcheck 2026.2.2 (v0.8.2), which knows Go 1.26. Raise it on purpose,
# with the findings of the new version fixed in the same change.
staticcheck=honnef.co/go/tools/cmd/staticcheck@v0.8.2
oses=(linux darwin windows)

# each_module CMD...: runs CMD in every module's directory, going on past a
# module it fails in; then names those modules and fails.
each_module() {
	local m failed_in=()
	for m in "${modules[@]}"; do
		(cd "$root/$m" && "$@") || failed_in+=("$m")
	done
	if [ ${#failed_in[@]} -gt 0 ]; then
		echo "failed in: ${failed_in[*]}" >&2
		return 1
	fi
}
# cross_vet: the module's packages and tests compile, and go vet finds
# nothing, for every OS of $oses.
cross_vet() {
	local os rc=0
	for os in "${oses[@]}"; do
		if ! GOOS=$os GOARCH=amd64 go vet ./...; then
			echo "GOOS=$os GOARCH=amd64 go vet ./... failed in $m" >&2 # $m: each_module's
			rc=1
		fi
	done
	return $rc
}
# run_staticcheck: staticcheck finds nothing in the module, built for linux
# and for windows (-matrix: code unused on one is used on the other). Every
# file is in one of the two (unix, linux, !linux or windows files; there are
# no darwin-only ones): each configuration costs a full analysis of the
# dependencies (modernc.org/sqlite's is minutes), so darwin is left to
# cross_vet. A darwin-only file would need a third line.
run_staticcheck() {
	printf '%s\n' "linux: GOOS=linux GOARCH=amd64" "windows: GOOS=windows GOARCH=amd64" |
		go run "$staticcheck" -matrix ./...
}
echo "== cross-compile (${oses[*]}): go vet ./... in every module"
step "cross-compile" each_module cross_vet
echo "== staticcheck (${staticcheck#*@}) in every module"
step "staticcheck" each_module run_staticcheck
echo "== go mod tidy -diff in every module"
step "go mod tidy" each_module go mod tidy -diff

# test_module DIR [go test flags...]
test_module() {
	local dir=$1
	shift
	(cd "$dir" && go vet ./... && go test -race -count=1 -timeout "$timeout" "$@" ./...)
}
for m in "${modules[@]}"; do
	echo "== module $m"
	step "module $m" test_module "$root/$m" "$@"
done
# The multi-process fan-out tests (10k items, real kills) are built without
# the race detector: through race-instrumented SQLite they take minutes. So
# are the model tests at full size (under -race they run a quarter of it).
echo "== module . (multi-process fan-out tests and full-size model tests, without -race)"
step "module . (fan-out kill and model tests, without -race)" go test -count=1 -timeout "$timeout" -run '^TestEach(Killed|FourProcesses|RandomKills)$|^Test(Ledger|StateFile)Model$' .
# A short pass of the state-file decoder's fuzz test (its seed corpus is in
# internal/statefmt/testdata/fuzz); it must never panic. The decoder is in a
# package of its own so that the coverage-instrumented build is small (no
# SQLite).
echo "== fuzz FuzzDecodeState (10s)"
step "fuzz FuzzDecodeState" go test -timeout "$timeout" -run '^$' -fuzz '^FuzzDecodeState$' -fuzztime 10s ./internal/statefmt

if [ ${#failed[@]} -gt 0 ]; then
	echo "== FAILED (${#failed[@]}):"
	printf '   %s\n' "${failed[@]}"
	exit 1
fi
echo "== all passed (${SECONDS}s)"
