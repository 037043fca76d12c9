#!/usr/bin/env bash
# Runs every test of every Go module in this repository, with the race
# detector, plus go vet and a gofmt check. Extra arguments go to `go test`
# (e.g. scripts/test.sh -run TestCrash -v).
#
# Besides the tests, which vet every package (go test -vet=all: all of go
# vet's checks, on the packages as the tests compile them), three static
# steps: what users build elsewhere type-checks, tests included, for darwin
# and windows (amd64) too (cross_targets, below);
# staticcheck (the pinned version below) finds nothing; and `go mod tidy`
# would change nothing in go.mod or go.sum.
# scripts/release-check.sh then shows that a release of the tree installs
# from a module proxy.
#
# Each `go test` gets -timeout $IDEM_TEST_TIMEOUT (default 15m; a -timeout
# among the arguments wins): a test that hangs fails its module with a
# goroutine dump instead of holding the run. (The Postgres ledger's tests
# take 3-4 minutes beside two CPU burners on 2 cores and went past 8 when
# two runs of this script shared such a machine: they wait on the server's
# fsyncs, not on a lock.) A failing step does not stop the
# others; the last lines name the steps that failed.
#
# After a compile of every module's packages and tests for the race
# detector (which builds every dependency once), the other steps
# (the type-check for darwin and windows and staticcheck, go mod tidy,
# each module's tests,
# the fuzz pass) run $IDEM_TEST_JOBS at a time (default 4; the root
# module's tests beside staticcheck's step and the Postgres ledger's
# alone, see below): much of a module's test time is waiting (real
# processes, a real PostgreSQL, leases running out), which another step
# fills. (With 2 at a time, on 2 cores and an empty build cache, those
# steps used 1.39 cores on average: the Postgres and MySQL ledgers' tests,
# 406 and 309 s, took 156 and 164 s of CPU. With 3, the steps after the
# root module's used 310 s of CPU in 236 s: 1.3 cores; most of them wait
# on a server, the MySQL ledger's 132 s for 49 s of CPU, the RabbitMQ
# outbox's 34 s for 8.) A step's output is held and
# printed whole when it ends ("== start NAME (at Ns)" says when it began,
# N seconds into the run).
# IDEM_TEST_JOBS=1 runs them one after the other, in the order queued below.
# Each step's last line gives its wall time and the CPU time of its
# processes, the run's last line the whole run's (the servers' own CPU time
# is not counted).
#
# Usage: scripts/test.sh [go test flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# -trimpath: what is compiled is keyed by its contents, not by its
# directory, so a clean clone reuses the build cache of another (which
# then does not grow by a copy of every package per clone), and
# scripts/release-check.sh's fresh module cache reuses the dependencies
# the tests compiled (without it, it compiled them all again).
export GOFLAGS="${GOFLAGS:-} -trimpath"
# GOGC=400 for the Go toolchain this script runs (the compiler, the linker,
# vet, staticcheck, the type-check for other systems, the release check's
# builds): the compiler spends a large part of its time collecting garbage
# at the default 100. The race compile of every module on an empty build
# cache (2 cores, back to back): 252 s of CPU and 131 s of wall time, against
# 310 s and 161 s at the default, for a larger heap (the largest compile,
# modernc.org/sqlite/lib's, 1.9 GB at most instead of 1.2 GB). The test
# binaries run without it (go test -exec 'env -u GOGC': test_exec), as
# users run them, and so do the processes they start (the idem command's
# tests build it with the default); the other Go programs this script
# starts have it (kfakeserver, the release check's consumer and idem
# version). A GOGC of the caller's is kept, for all of them.
test_exec=()
if [ -z "${GOGC+set}" ]; then
	export GOGC=400
	test_exec=(-exec "env -u GOGC")
fi
timeout=${IDEM_TEST_TIMEOUT:-15m}
failed=()

# cpu_seconds FILE: writes to FILE the CPU time (user + system, whole
# seconds) of the processes this shell has waited for: bash's times, run
# in this shell itself (in a pipe or a $(...) it would be a new process's).
cpu_seconds() {
	times >"$1.times"
	awk 'NR == 2 {
		t = 0
		for (i = 1; i <= 2; i++) { split($i, p, "m"); t += p[1] * 60 + p[2] }
		printf "%d\n", t
	}' "$1.times" >"$1"
	rm -f "$1.times"
}
# with_cpu FILE COMMAND...: runs COMMAND in a subshell of its own, writes
# to FILE the CPU time of its processes (cpu_seconds) and returns
# COMMAND's status. On 2 cores a step whose CPU time is near twice its wall
# time is bound by CPU; one far below it, by waiting (servers, fsyncs,
# leases, kills).
with_cpu() {
	local file=$1
	shift
	(
		rc=0
		"$@" || rc=$?
		cpu_seconds "$file"
		exit $rc
	)
}
# took START CPUFILE: "Ns wall, Ms CPU" of a step that began at START.
took() {
	echo "$((SECONDS - $1))s wall, $(cat "$2" 2>/dev/null || echo '?')s CPU"
}

# step NAME COMMAND...: runs COMMAND, reports its wall and CPU time, and
# records NAME if it fails.
step() {
	local name=$1 start=$SECONDS cpu
	shift
	cpu=$(mktemp)
	if with_cpu "$cpu" "$@"; then
		echo "== ok   $name ($(took "$start" "$cpu"))"
	else
		echo "== FAIL $name ($(took "$start" "$cpu"))"
		failed+=("$name")
	fi
	rm -f "$cpu"
}

unformatted=$(find . -name '*.go' -not -path './.git/*' -print0 | xargs -0 gofmt -l)
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" $unformatted >&2
	failed+=("gofmt")
fi

# The throwaway servers (start_server, below) start in the background, all
# at once and beside the race compile: most of a start is waiting (initdb,
# a broker's boot, kfake's build), which took 30 s before the compile
# began when they started one after the other. wait_servers waits for them
# before the first step. Each is stopped at exit, on every path (one whose
# start is still under way is waited for first).
srv_names=() srv_scripts=() srv_vars=() srv_hints=() srv_pids=()
srv_dir=$(mktemp -d) # the output of each start: N.env, N.log
started=()           # "SCRIPT VAR" of each server up (wait_servers)
running=()           # pids of the steps running in the background (run_steps)
cleanup() {
	local pid i s
	for pid in "${running[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for i in "${!srv_pids[@]}"; do
		if [ -n "${srv_pids[$i]}" ]; then
			wait "${srv_pids[$i]}" 2>/dev/null || true
			if [ -s "$srv_dir/$i.env" ]; then
				eval "$(cat "$srv_dir/$i.env")"
				started+=("${srv_scripts[$i]} ${srv_vars[$i]}")
			fi
		fi
	done
	for s in "${started[@]}"; do
		set -- $s
		scripts/"$1" stop "${!2}" >/dev/null 2>&1 || true
	done
	rm -rf "$srv_dir"
	if [ -n "${staticcheck_dir:-}" ]; then
		rm -rf "$staticcheck_dir"
	fi
}
trap cleanup EXIT
ci() { [ -n "${CI:-}" ] && [ "${CI}" != false ] && [ "${CI}" != 0 ]; }

# start_server NAME SCRIPT VAR MODULE HINT: unless $VAR names a server
# already, or the repository has no MODULE, starts a throwaway one with
# scripts/SCRIPT start (which prints VAR=...) in the background;
# wait_servers exports VAR. In CI (CI=true) a server that cannot start
# fails the run; elsewhere the tests that need it skip, and HINT says how
# to get one.
start_server() {
	local i=${#srv_pids[@]}
	if [ ! -f "$4/go.mod" ] || [ -n "${!3:-}" ]; then
		return 0
	fi
	srv_names+=("$1") srv_scripts+=("$2") srv_vars+=("$3") srv_hints+=("$5")
	scripts/"$2" start >"$srv_dir/$i.env" 2>"$srv_dir/$i.log" </dev/null &
	srv_pids+=($!)
}
# wait_servers waits for every start of start_server and exports the
# variables of the servers that came up.
wait_servers() {
	local i var
	for i in "${!srv_pids[@]}"; do
		if wait "${srv_pids[$i]}"; then
			srv_pids[i]=""
			var=${srv_vars[$i]}
			eval "$(cat "$srv_dir/$i.env")"
			export "${var?}"
			started+=("${srv_scripts[$i]} $var")
		elif ci; then
			srv_pids[i]=""
			cat "$srv_dir/$i.log" >&2
			echo "scripts/test.sh: cannot start ${srv_names[$i]} for the tests that need it (CI requires them)" >&2
			exit 1
		else
			srv_pids[i]=""
			echo "== ${srv_names[$i]} not started ($(tail -n 1 "$srv_dir/$i.log")): the tests that need it skip; ${srv_hints[$i]} and rerun scripts/test.sh"
		fi
	done
}

# PostgreSQL, for ./pgledger (and the idem command's --postgres).
start_server PostgreSQL pg.sh IDEM_TEST_PG_DSN pgledger \
	"install postgresql (initdb under /usr/lib/postgresql/*/bin) or set IDEM_TEST_PG_DSN=postgres://..."
# redis-server (appendonly yes, appendfsync always), for ./redisstore.
start_server redis-server redis.sh IDEM_TEST_REDIS_ADDR redisstore \
	"install redis-server or set IDEM_TEST_REDIS_ADDR=host:port"
# MariaDB (innodb_flush_log_at_trx_commit=1, sync_binlog=1), for
# ./mysqlledger, the idem command's --mysql and the bench's mysql_ lines.
start_server MariaDB mysql.sh IDEM_TEST_MYSQL_DSN mysqlledger \
	"install mariadb-server or set IDEM_TEST_MYSQL_DSN='user@tcp(host:port)/db'"
# nats-server with JetStream (its store in a temporary directory), for
# ./natsoutbox and the idem command's --to nats://.
start_server nats-server nats.sh IDEM_TEST_NATS_URL natsoutbox \
	"install nats-server or set IDEM_TEST_NATS_URL=nats://host:port"
# kfake, franz-go's Kafka-protocol broker (not Apache Kafka), for
# ./kafkaoutbox and the idem command's --to kafka:// (kafkaoutbox's kill
# test starts one of its own, which it restarts).
start_server kfake kafka.sh IDEM_TEST_KAFKA_ADDR kafkaoutbox \
	"set IDEM_TEST_KAFKA_ADDR=host:port"
# RabbitMQ, for ./rabbitoutbox's tests and cmd/idem's `outbox relay --to
# amqp://` test (scripts/rabbitmq.sh, as the current user, on ports of its
# own; 5-15 s to boot).
start_server rabbitmq-server rabbitmq.sh IDEM_TEST_AMQP_URL rabbitoutbox \
	"install rabbitmq-server or set IDEM_TEST_AMQP_URL=amqp://..."

# Every directory with a go.mod is a module; test each on its own.
mapfile -t modules < <(find . -name go.mod -not -path '*/testdata/*' -printf '%h\n' | sort)

# staticcheck 2026.2.2 (v0.8.2), which knows Go 1.26. Raise it on purpose,
# with the findings of the new version fixed in the same change.
staticcheck=honnef.co/go/tools/cmd/staticcheck@v0.8.2
# cross_targets: what is type-checked (cross_check) for other systems than
# linux, besides each module's tests on
# linux: DIR:OS,OS... (DIR a module's directory, for its packages and
# tests, ./..., or a package of a module alone). The root
# module for darwin and windows (users build and run it there; it has
# files for unix, linux, !linux and windows). The idem command's
# system-specific files are in cmd/idem/internal/hostsys, linux and !linux
# ones (which darwin builds as windows does): that package alone for
# windows, not the command's dependencies (pgx, go-redis, franz-go, ...),
# which are system-neutral. bench's system-specific files are in
# bench/internal/rusage, checked alone for both (the rest of bench, River
# and asynq among its dependencies, is system-neutral). The other
# modules (the stores, the outboxes, the adapters, the page) have no
# system-specific files outside their tests. TestCrossTargetsCoverSystemFiles
# (architecture_test.go) holds all this true: a file that builds on some
# systems and not on others is under a target, and a target without darwin
# (or windows) has no file that builds differently on the two.
cross_targets=(.:darwin,windows ./cmd/idem/internal/hostsys:windows ./bench/internal/rusage:darwin,windows)
# target_parts TARGET: a target of cross_targets as "MODULE PATTERN OS...":
# the directory of the module it lies in, the package pattern it names
# there (./... for the module's directory) and its OSes.
target_parts() {
	local dir=${1%%:*} rel=""
	until [ -f "$root/$dir/go.mod" ]; do
		rel=$(basename "$dir")${rel:+/$rel}
		dir=$(dirname "$dir")
	done
	if [ -z "$rel" ]; then
		rel=...
	fi
	echo "$dir ./$rel $(echo "${1#*:}" | tr , ' ')"
}

# cross_check: every target of cross_targets type-checks, tests included,
# for each of its OSes (internal/crosscheck: go list says which files build
# there, go/types checks them and every package they import, the standard
# library's declarations and the dependencies whole). Nothing is compiled:
# compiling the dependencies for two more systems, modernc.org/sqlite's in
# particular, cost about 150 s of CPU on an empty build cache (2 cores),
# the type-check about 6 s, on what makes a build fail there (undefined
# names, wrong types, unused imports and variables in the files of that
# system). Not done for them: go vet and staticcheck, which run for linux
# (each module's tests, go test -vet=all; run_staticcheck): they see every
# file but the !linux, windows and darwin ones, which are few and small
# (file locks, fsync, free disk space, the idem command's and the
# benchmarks' system calls) and which this type-check holds to compile.
cross_check() {
	local t dir pkgs oses rc=0 bin
	bin=$(mktemp -d)/crosscheck
	(cd "$root" && env "$nonrace_env" go build -o "$bin" ./internal/crosscheck) || return
	for t in "${cross_targets[@]}"; do
		read -r dir pkgs oses <<<"$(target_parts "$t")"
		if ! (cd "$root/$dir" && "$bin" -os "${oses// /,}" "$pkgs"); then
			echo "$pkgs does not type-check for ${oses// / or }, in $dir" >&2
			rc=1
		fi
	done
	rm -rf "$(dirname "$bin")"
	return $rc
}
# nonrace_env: how everything this script builds without the race detector
# is built: with cgo off, as docs/operators.md installs the idem command
# and scripts/binaries.sh builds a release's (cmd/idem's tests build it
# so, and scripts/release-check.sh installs it so). Nothing here needs cgo
# (modernc.org/sqlite is Go), and one configuration compiles SQLite and the
# other dependencies once, where cgo on beside it compiled them twice (an
# empty build cache, 2 cores: the idem command built with cgo off after the
# race-instrumented compile and the root module's tests with cgo on took
# 104 s of CPU; with cgo on, 57 s).
nonrace_env=CGO_ENABLED=0
# run_staticcheck: staticcheck finds nothing in any module, built for
# linux. Every file but the !linux, windows and darwin ones is in that
# build (cross_check type-checks those): a configuration for another
# system costs a full analysis of the dependencies (modernc.org/sqlite's
# is minutes) and their compile for it.
# Code used only by such a file would show as unused here:
# say so where it is declared (//lint:ignore U1000 with the reason). The
# linux configuration reads its dependencies' export data from the race
# detector's build, made already. The root module is the exception: its
# configuration is built without -race, for its tests that run without it
# (//go:build !race), as its tests without -race below build it.
#
# Its cache is the checkout's own (.staticcheck-cache, ignored by git):
# with -trimpath, the same package in two checkouts has one build key, and
# staticcheck's results cached for one carry that checkout's file paths
# (with a second configuration, the -matrix merge then matched no object
# of the other one, seen in a clean clone after another's run).
#
# The other modules are checked in one run, from the root (the workspace,
# go.work, holds them all: ./DIR/... of each), which loads and analyses
# the dependencies they share once: on a warm build cache and an empty
# staticcheck cache, 47 s of CPU for those 17 modules, against 57 s one
# module after the other. Its findings name files from the root.
run_staticcheck() {
	local rc=0 m patterns=()
	export STATICCHECK_CACHE="$root/.staticcheck-cache"
	echo "linux: GOOS=linux GOARCH=amd64 $nonrace_env" | (cd "$root" && "$staticcheck_bin" -matrix ./...) || rc=1
	for m in "${modules[@]}"; do
		if [ "$m" != . ]; then
			patterns+=("$m/...")
		fi
	done
	if [ ${#patterns[@]} -gt 0 ]; then
		echo "linux: GOOS=linux GOARCH=amd64 CGO_ENABLED=1 -race" | (cd "$root" && "$staticcheck_bin" -matrix "${patterns[@]}") || rc=1
	fi
	return $rc
}
# install_staticcheck: builds staticcheck once, for its two runs (go run
# would link it for each), with cgo off as everything this
# script builds without the race detector (nonrace_env): the standard
# library it compiles is theirs. Its configurations above say their own
# CGO_ENABLED.
install_staticcheck() {
	env "$nonrace_env" GOBIN="$staticcheck_dir" go install "$staticcheck"
}
staticcheck_dir=$(mktemp -d)
staticcheck_bin=$staticcheck_dir/staticcheck
# test_module DIR [go test flags...]: the module's tests under the race
# detector, and all of go vet's checks on its packages as they compile them.
test_module() {
	local dir=$1
	shift
	(cd "$dir" && go test -race -vet=all -count=1 -timeout "$timeout" "${test_exec[@]}" "$@" ./...)
}

# The race-instrumented packages and tests of every module, compiled once
# here (go list -export compiles without linking): the modules' tests
# below, run side by side, would otherwise each compile the dependencies
# they share (modernc.org/sqlite) at the same time. One go list for every
# module (the workspace, go.work, holds them all): the compiles of
# different modules overlap, where one module after the other waited at
# each module's end for its longest compile. A package that does not
# compile fails its module's step below, which says so; this pass only
# fills the build cache.
echo "== compile (-race) every module's packages and tests"
start=$SECONDS
cpu=$(mktemp)
compile_race() {
	local m patterns=()
	for m in "${modules[@]}"; do
		patterns+=("$m/...")
	done
	go list -race -export -deps -test "${patterns[@]}" >/dev/null 2>&1 || true
}
with_cpu "$cpu" compile_race
echo "== done compile (-race) ($(took "$start" "$cpu"))"
rm -f "$cpu"
# The same, once, for what is built without the race detector (with cgo
# off: nonrace_env): the root module's packages and tests (the tests
# without -race, staticcheck's run for the root) and the idem command
# (cmd/idem's tests build it), so SQLite, pgx and what else they import.
# Left to the steps below, two of them that start together (staticcheck's
# root run and the Postgres rolling-upgrade test's build of the old
# worker) both compiled SQLite at once, as two go commands do when the
# build cache has not got it yet: seen on an empty build cache, 2 cores,
# by sampling the compiler's processes every 2 s. One go list after the
# other: run side by side, they would do the same.
echo "== compile (without -race) the root module's packages and tests, and the idem command"
start=$SECONDS
cpu=$(mktemp)
compile_nonrace() {
	env "$nonrace_env" go list -export -deps -test ./... >/dev/null 2>&1 || true
	env "$nonrace_env" go list -export -deps ./cmd/idem/... >/dev/null 2>&1 || true
}
with_cpu "$cpu" compile_nonrace
echo "== done compile (without -race) ($(took "$start" "$cpu"))"
rm -f "$cpu"
wait_servers

# run_steps: runs the steps queued by queue (NAME, then its COMMAND...
# separated by a "--" line) $IDEM_TEST_JOBS at a time, in the order queued;
# each one's output is printed whole, with its result, when it ends. A step
# queued by queue_apart starts as the others do (beside the steps already
# running), but no step starts after it until it has ended.
jobs=${IDEM_TEST_JOBS:-4}
case $jobs in
'' | *[!0-9]* | 0)
	echo "scripts/test.sh: IDEM_TEST_JOBS=$jobs: want a number of steps to run at once, 1 or more" >&2
	exit 2
	;;
esac
queued=()
queue() { queued+=("$@" "--"); }
queue_apart() { queued+=("!$1" "${@:2}" "--"); }
logs=$(mktemp -d)
declare -A step_name step_start step_log failed_why
# fail_summary LOG: the lines of a failed step's output that name what
# failed (go test's --- FAIL lines, a test binary's panic, a package's
# FAIL line), 30 at most: printed again at the end of the run, where a
# long output (a stuck child's goroutines) has pushed them out of sight.
fail_summary() {
	grep -E '^[[:space:]]*--- FAIL: |^panic: |^FAIL[[:space:]]' "$1" | cut -c1-200 | head -n 30 || true
}
finish_one() {
	local pid="" rc=0 i
	wait -n -p pid "${running[@]}" || rc=$?
	if [ -z "$pid" ]; then
		echo "scripts/test.sh: lost track of a running step" >&2
		exit 2
	fi
	for i in "${!running[@]}"; do
		if [ "${running[$i]}" = "$pid" ]; then
			unset 'running[i]'
		fi
	done
	running=("${running[@]}")
	echo "== ${step_name[$pid]}"
	cat "${step_log[$pid]}"
	if [ $rc -eq 0 ]; then
		echo "== ok   ${step_name[$pid]} ($(took "${step_start[$pid]}" "${step_log[$pid]}.cpu"))"
	else
		echo "== FAIL ${step_name[$pid]} ($(took "${step_start[$pid]}" "${step_log[$pid]}.cpu"))"
		failed+=("${step_name[$pid]}")
		failed_why[${step_name[$pid]}]=$(fail_summary "${step_log[$pid]}")
	fi
}
# is_running PID: whether the step PID has not been finished yet.
is_running() {
	local p
	for p in "${running[@]}"; do
		if [ "$p" = "$1" ]; then
			return 0
		fi
	done
	return 1
}
run_steps() {
	local i=0 name cmd pid apart
	while [ $i -lt ${#queued[@]} ]; do
		name=${queued[$i]}
		apart=""
		if [ "${name:0:1}" = "!" ]; then
			name=${name:1}
			apart=1
		fi
		cmd=()
		i=$((i + 1))
		while [ "${queued[$i]}" != "--" ]; do
			cmd+=("${queued[$i]}")
			i=$((i + 1))
		done
		i=$((i + 1))
		while [ ${#running[@]} -ge "$jobs" ]; do
			finish_one
		done
		echo "== start $name (at ${SECONDS}s)"
		with_cpu "$logs/$i.cpu" "${cmd[@]}" >"$logs/$i" 2>&1 </dev/null &
		pid=$!
		running+=("$pid")
		step_log[$pid]=$logs/$i
		step_name[$pid]=$name
		step_start[$pid]=$SECONDS
		if [ -n "$apart" ]; then
			while is_running "$pid"; do
				finish_one
			done
		fi
	done
	while [ ${#running[@]} -gt 0 ]; do
		finish_one
	done
	rm -rf "$logs"
}

# The root module's tests run apart, beside staticcheck and the Postgres
# ledger's tests alone: its kill -9 torture passes (internal/torture) are
# CPU-bound and settle within a minute each, which the CPU-bound passes of
# the other stores' (the SQLite ledger's without -race, the MySQL
# ledger's) beside them can make too short on a loaded machine (seen with
# two passes side by side at a load of 22 on 2 cores). Staticcheck's step
# (the type-check for darwin and windows, then staticcheck), queued first,
# has no processes to
# kill or leases to keep: it weighs on them as two CPU-burning loops do,
# beside which the test command must pass anyway, and it fills the core
# the root module's tests leave (alone, on an empty build cache, they used
# 206 s of CPU in 198 s). The Postgres
# ledger's tests, the longest step (220 s of wall time for 72 s of CPU on
# an empty build cache), mostly wait on the server's fsyncs: beside the
# root module's they take the part of the run's length they used to add
# after it.
# The other steps are queued longest first (as measured on 2 cores, an
# empty build cache: the MySQL ledger's tests 120-190 s, the idem
# command's 117-166 s, the browser's 45-95 s, the tests without -race
# 57-89 s, the release check 71-88 s, the fuzz pass 35-42 s; then the
# modules whose tests mostly wait on a server, 27-58 s each: bench's,
# the Postgres compatibility tests, the Kafka, RabbitMQ and Redis ones;
# then the other modules' in their order, 10 s or less), so that the short
# ones fill the end: queued in their order, the waiting ones were the
# run's last 45 s, with the cores half idle.
staticcheck_all() {
	local rc=0
	echo "== type-check for other systems (${cross_targets[*]})"
	cross_check || rc=1
	echo "== staticcheck"
	install_staticcheck && run_staticcheck || rc=1
	return $rc
}
# queue_modules DIR...: queues the tests of each module DIR that the
# repository has (with this script's go test flags), once: a module queued
# already is left out.
go_test_args=("$@")
queued_modules=" . " # the root's, queued apart below
queue_modules() {
	local m
	for m in "$@"; do
		if [ -f "$m/go.mod" ] && [[ $queued_modules != *" $m "* ]]; then
			queue "module $m" test_module "$root/$m" "${go_test_args[@]}"
			queued_modules+="$m "
		fi
	done
}
queue "type-check for darwin and windows, and staticcheck" staticcheck_all
queue_modules ./pgledger
queue_apart "module ." test_module "$root" "$@"
queue_modules ./mysqlledger ./cmd/idem ./ui/browsertest
# The multi-process fan-out tests (10k items, real kills) and the kill kit
# of concurrent Runs (16 goroutines SIGKILLed at random, the group commit's
# crash test) are built without the race detector: through
# race-instrumented SQLite they take minutes. So are the model tests at
# full size (under -race they run a quarter of it), and the
# fault-injection test (hundreds of child processes under strace).
# Vetted here too: some of these tests' files build without -race only.
# Built with cgo off, as every build of this script without the race
# detector (nonrace_env, above).
queue "module . (kill, model and fault-injection tests, without -race)" env "$nonrace_env" go test -vet=all -count=1 -timeout "$timeout" "${test_exec[@]}" -run '^TestEach(Killed|FourProcesses|RandomKills)$|^TestConcurrentRunKills$|^Test(Ledger|StateFile)Model$|^TestFaultInjection$' .
# A release of this tree at a throwaway version installs from a module
# proxy: go get of every published module, a program using them together,
# go install …/cmd/idem@VERSION and its idem version (scripts/release-check.sh).
queue "release-check v0.9.0-check" scripts/release-check.sh v0.9.0-check
# A short pass of the state-file decoder's fuzz test (its seed corpus is
# in internal/statefmt/testdata/fuzz); it must never panic. The decoder is
# in a package of its own so that the coverage-instrumented build is small
# (no SQLite). Queued before the short modules: its 10-20 s keep both
# cores busy, and queued last they were the run's last 20 s (an empty
# build cache, 2 cores), the other steps done.
# The pass is 200,000 inputs (about 10 s on a quiet machine), not a
# duration: Go 1.26's fuzzing coordinator can report its own -fuzztime
# deadline as a failure ("context deadline exceeded", no input) when a
# worker is busy as it expires, which a loaded machine makes likely (it
# failed a clean-clone CI run so); a count sets no deadline
# (golang/go#75804, fixed in Go 1.27).
queue "fuzz FuzzDecodeState" env "$nonrace_env" go test -timeout "$timeout" "${test_exec[@]}" -run '^$' -fuzz '^FuzzDecodeState$' -fuzztime 200000x ./internal/statefmt
queue_modules ./bench ./pgledger/compattest ./kafkaoutbox ./rabbitoutbox ./redisstore
queue_modules "${modules[@]}"
queue "go mod tidy" scripts/tidy.sh --check
# idem serve's crontab parser has a fuzz test too (cmd/idem/internal/crontab
# FuzzParse); its seeds run with cmd/idem's tests. It is not fuzzed here: it
# needs package idem, so its instrumented build includes SQLite (about ten
# minutes on a cold build cache, on 2 cores). Fuzz it after changing the
# parser: go -C cmd/idem test -run '^$' -fuzz FuzzParse ./internal/crontab
run_steps

# The CPU time of every process this script waited for (the servers it
# started are not among them); cpu_seconds runs in this shell, not in a
# $(...).
total_cpu=$(mktemp)
cpu_seconds "$total_cpu"
total_cpu=$(cat "$total_cpu" && rm -f "$total_cpu")
if [ ${#failed[@]} -gt 0 ]; then
	echo "== FAILED (${#failed[@]}; ${SECONDS}s wall, ${total_cpu}s CPU):"
	for name in "${failed[@]}"; do
		printf '   %s\n' "$name"
		if [ -n "${failed_why[$name]:-}" ]; then
			printf '%s\n' "${failed_why[$name]}" | sed 's/^/      /'
		fi
	done
	exit 1
fi
echo "== all passed (${SECONDS}s wall, ${total_cpu}s CPU)"
