#!/usr/bin/env bash
# Starts and stops a throwaway Kafka-protocol broker for the tests of
# ./kafkaoutbox and cmd/idem: kfakeserver (./kafkaoutbox/kfakeserver),
# which runs kfake, franz-go's in-memory fake cluster (3 brokers on free
# loopback ports). It is NOT Apache Kafka: it speaks the Kafka protocol
# (idempotent producers, acks, partitions, fetch), with no real
# replication and nothing on disk. Debian packages no Kafka.
#
# Usage:
#   eval "$(scripts/kafka.sh start)"   # prints only: export IDEM_TEST_KAFKA_ADDR='127.0.0.1:P1,127.0.0.1:P2,...'
#   scripts/kafka.sh stop [ADDR]       # stops it and removes its directory
#
# stop finds the broker by ADDR (default: $IDEM_TEST_KAFKA_ADDR); with
# neither, it stops the only throwaway broker running, if there is one.
# Each lives in ${TMPDIR:-/tmp}/idem-kafka-XXXXXX. Needs go (it builds
# kfakeserver).
set -euo pipefail

die() {
	echo "kafka.sh: $*" >&2
	exit 1
}

root=$(cd "$(dirname "$0")/.." && pwd)
base=${TMPDIR:-/tmp}
base=${base%/}

# serverdir prints the directory of the broker with address $1, else
# $IDEM_TEST_KAFKA_ADDR's, else the only one running.
serverdir() {
	local arg=${1:-${IDEM_TEST_KAFKA_ADDR:-}} dirs=() d
	for d in "$base"/idem-kafka-*; do
		[ -f "$d/addr" ] || continue
		if [ -z "$arg" ] || [ "$(cat "$d/addr")" = "$arg" ]; then
			dirs+=("$d")
		fi
	done
	case ${#dirs[@]} in
	0) die "no throwaway broker of kafka.sh${arg:+ at $arg} is running" ;;
	1) echo "${dirs[0]}" ;;
	*) die "several throwaway brokers run (${dirs[*]}); name one by its address" ;;
	esac
}

start() {
	local dir i
	dir=$(mktemp -d "$base/idem-kafka-XXXXXX")
	(cd "$root/kafkaoutbox/kfakeserver" && go build -o "$dir/kfakeserver" .) >"$dir/build.log" 2>&1 ||
		{
			cat "$dir/build.log" >&2
			rm -rf "$dir"
			die "could not build kfakeserver"
		}
	"$dir/kfakeserver" -addrfile "$dir/addr" </dev/null >"$dir/server.log" 2>&1 &
	echo $! >"$dir/pid"
	# 10 s for the brokers to listen.
	for i in $(seq 100); do
		if [ -f "$dir/addr" ]; then
			echo "export IDEM_TEST_KAFKA_ADDR='$(cat "$dir/addr")'"
			return
		fi
		kill -0 "$(cat "$dir/pid")" 2>/dev/null || break
		sleep 0.1
	done
	cat "$dir/server.log" >&2 || true
	stop_dir "$dir"
	die "kfakeserver did not listen within 10 s"
}

# stop_dir DIR: ends the broker of DIR (10 s at most) and removes DIR.
stop_dir() {
	local pid i
	pid=$(cat "$1/pid" 2>/dev/null || true)
	if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
		for i in $(seq 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -rf "$1"
}

case ${1:-} in
start) start ;;
stop) stop_dir "$(serverdir "${2:-}")" ;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
