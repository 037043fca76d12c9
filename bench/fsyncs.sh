#!/usr/bin/env bash
# Counts the fsyncs (fsync + fdatasync) per operation of each side of every
# comparison, with strace. Each comparison is run twice under
# `strace -f -y`, with 1 and with 3 measured rounds and no warm-up; the
# difference is two rounds' worth of operations and nothing of the setup.
# Each fsync is attributed by the file it syncs: ledger.db* and the state
# file's idem/ directory to idem, floor.db* and floor/ to the floor,
# river.db* to River.
#
# For the pg_ comparisons the fsyncs happen in the server, so the script
# reads the WAL syncs of pg_stat_wal (wal_sync) before and after, running
# one side at a time (-side); those counts include whatever else the server
# did meanwhile (River's idle client in the idem runs, the WAL writer).
#
# Usage: bench/fsyncs.sh [n] [pg]   (default n=100; needs strace, and psql
# for pg; with "pg" as the second argument, only the Postgres lines, and of
# them only those $PG_ONLY matches, a bash regexp, if set)
set -euo pipefail
cd "$(dirname "$0")"
n=${1:-100}
only=${2:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/bench" .

# ops ROLE NAME: operations per measured round.
ops() {
	case $2 in
	*duplicate_vs_floor) echo $((n * 20)) ;;
	*fanout_vs_floor) echo $((n * 50)) ;;
	*fanout_vs_river) echo $((n * 5)) ;;
	*duplicate_vs_river) if [ "$1" = idem ]; then echo $((n * 20)); else echo "$n"; fi ;;
	*) echo "$n" ;;
	esac
}

# syncs NAME ROUNDS: prints "idem floor river" fsync counts of one run.
syncs() {
	strace -f -y -qq -e trace=fsync,fdatasync -o "$tmp/trace" \
		"$tmp/bench" -only "^$1\$" -rounds "$2" -no-warmup -n "$n" >/dev/null
	awk '
		/\/ledger\.db|-statefile-[0-9]+\/idem[\/>]/ { i++ }
		/\/floor\.db|-statefile-[0-9]+\/floor[\/>]/ { f++ }
		/\/river\.db/ { r++ }
		END { print i+0, f+0, r+0 }' "$tmp/trace"
}

[ "$only" = pg ] || for name in fresh_run_vs_floor fresh_run_vs_river duplicate_vs_floor duplicate_vs_river runtx_vs_floor statefile_vs_floor concurrent_fresh_run_vs_floor; do
	read -r i1 f1 r1 < <(syncs "$name" 1)
	read -r i3 f3 r3 < <(syncs "$name" 3)
	other=floor o1=$f1 o3=$f3
	case $name in *river) other=river o1=$r1 o3=$r3 ;; esac
	awk -v name="$name" -v other="$other" -v di=$((i3 - i1)) -v dO=$((o3 - o1)) \
		-v ni="$(ops idem "$name")" -v no="$(ops "$other" "$name")" \
		'BEGIN { printf "%s: fsyncs per op: idem %.2f  %s %.2f\n", name, di / (2 * ni), other, dO / (2 * no) }'
done

# Postgres: WAL syncs counted by the server.
dsn=${IDEM_TEST_PG_DSN:-}
started=""
if [ -z "$dsn" ] && [ -f ../scripts/pg.sh ]; then
	if out=$(bash ../scripts/pg.sh start 2>/dev/null); then
		dsn=${out#*=}
		dsn=${dsn//\'/}
		started=$dsn
	fi
fi
if [ -z "$dsn" ] || ! command -v psql >/dev/null; then
	echo "pg: skipped (no Postgres or no psql)"
	exit 0
fi
trap 'rm -rf "$tmp"; if [ -n "$started" ]; then bash ../scripts/pg.sh stop "$started" >/dev/null 2>&1 || true; fi' EXIT
walsyncs() { sleep 1.2; psql "$dsn" -Atc 'SELECT wal_sync FROM pg_stat_wal'; }
pgsyncs() { # NAME SIDE ROUNDS
	local a b
	a=$(walsyncs)
	"$tmp/bench" -pg-dsn "$dsn" -only "^$1\$" -side "$2" -rounds "$3" -no-warmup -n "$n" >/dev/null
	b=$(walsyncs)
	echo $((b - a))
}
for name in pg_fresh_run_vs_river pg_duplicate_vs_river pg_fresh_run_vs_floor pg_duplicate_vs_floor pg_runtx_vs_floor \
	pg_fanout_vs_floor pg_fanout_vs_river pg_concurrent_fresh_run_vs_floor; do
	[[ $name =~ ${PG_ONLY:-.} ]] || continue
	line="$name: WAL syncs per op:"
	for side in idem other; do
		s1=$(pgsyncs "$name" "$side" 1)
		s3=$(pgsyncs "$name" "$side" 3)
		role=$side
		if [ "$side" = other ]; then
			case $name in *river) role=river ;; *) role=floor ;; esac
		fi
		line+=$(awk -v d=$((s3 - s1)) -v o="$(ops "$role" "$name")" -v r="$role" \
			'BEGIN { v = d / (2 * o); printf (v < 0.1 && v > -0.1 ? "  %s %.4f" : "  %s %.2f"), r, v }')
	done
	echo "$line"
done
