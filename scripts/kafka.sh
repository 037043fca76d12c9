#!/usr/bin/env bash
# Starts and stops a throwaway Kafka-protocol broker for the tests of
# ./kafkaoutbox and cmd/idem: kfakeserver (./kafkaoutbox/kfakeserver),
# which runs kfake, franz-go's fake cluster (3 brokers in one process on free
# loopback ports). It is NOT Apache Kafka: it speaks the Kafka protocol
# (idempotent producers, acks, partitions, fetch), with no real
# replication. Its state is in its directory's data/ (kfake's DataDir:
# each batch written there before the ack, not fsynced). Debian packages
# no Kafka.
#
# Usage:
#   eval "$(scripts/kafka.sh start)"   # prints only: export IDEM_TEST_KAFKA_ADDR='127.0.0.1:P1,127.0.0.1:P2,...'
#   scripts/kafka.sh stop [ADDR]       # stops it and removes its directory
#   scripts/kafka.sh crash [ADDR]      # SIGKILLs it and starts it again on the same ports
#                                      # and data/ (kfake replays its segment files)
#
# stop and crash find the broker by ADDR (default: $IDEM_TEST_KAFKA_ADDR);
# with neither, they act on the only throwaway broker running, if there is one.
# Each lives in ${TMPDIR:-/tmp}/idem-kafka-XXXXXX. Needs go (it builds
# kfakeserver).
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib/ports.sh"

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
	# cgo off, as scripts/test.sh builds everything it runs without the
	# race detector: the standard library it compiles is then theirs.
	(cd "$root/kafkaoutbox/kfakeserver" && CGO_ENABLED=0 go build -o "$dir/kfakeserver" .) >"$dir/build.log" 2>&1 ||
		{
			cat "$dir/build.log" >&2
			rm -rf "$dir"
			die "could not build kfakeserver"
		}
	# Its three brokers' ports below the kernel's ephemeral range (see
	# lib/ports.sh): crash restarts them on the same ones.
	local try ports
	for try in 1 2 3 4; do
		ports=$(free_port),$(free_port),$(free_port)
		[ "$(echo "$ports" | tr ',' '\n' | sort -u | wc -l)" -eq 3 ] || continue
		run_server "$dir" "$ports"
		# 10 s for the brokers to listen.
		if wait_listen "$dir" 10; then
			echo "export IDEM_TEST_KAFKA_ADDR='$(cat "$dir/addr")'"
			return
		fi
		# Most likely a port was taken in between: try others.
		kill_server "$dir"
		rm -rf "$dir/data"
	done
	cat "$dir/server.log" >&2 || true
	stop_dir "$dir"
	die "kfakeserver did not listen within 10 s (4 tries)"
}

# run_server DIR [PORTS]: starts kfakeserver in the background on DIR/data
# (on PORTS, comma-separated, if given), its pid in DIR/pid; it writes its
# addresses to DIR/addr once it listens.
run_server() {
	"$1/kfakeserver" -addrfile "$1/addr" -datadir "$1/data" ${2:+-ports "$2"} </dev/null >>"$1/server.log" 2>&1 &
	echo $! >"$1/pid"
}

# wait_listen DIR SECONDS: waits for DIR/addr to appear.
wait_listen() {
	local i
	for i in $(seq $(($2 * 10))); do
		[ -f "$1/addr" ] && return 0
		kill -0 "$(cat "$1/pid")" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

crash() {
	local dir addr ports pid i
	dir=$(serverdir "${1:-}")
	addr=$(cat "$dir/addr")
	ports=$(echo "$addr" | tr ',' '\n' | sed 's/.*://' | paste -sd, -)
	pid=$(cat "$dir/pid")
	kill -9 "$pid" 2>/dev/null || true
	for i in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && die "kfakeserver (pid $pid) did not exit within 10 s of SIGKILL"
	# addr is written again once the restarted brokers listen; until then
	# serverdir still finds DIR by addr.keep.
	mv "$dir/addr" "$dir/addr.keep"
	run_server "$dir" "$ports"
	# kfake replays its segments before it listens: 30 s.
	if ! wait_listen "$dir" 30; then
		mv "$dir/addr.keep" "$dir/addr"
		die "kfakeserver on $addr did not listen within 30 s of its restart (log: $dir/server.log)"
	fi
	rm -f "$dir/addr.keep"
	[ "$(cat "$dir/addr")" = "$addr" ] || die "kfakeserver came back on $(cat "$dir/addr"), not $addr"
	echo "kafka.sh: kfakeserver on $addr killed and restarted" >&2
}

# kill_server DIR: stops the server of DIR (SIGTERM, SIGKILL after 10 s).
kill_server() {
	local pid i
	pid=$(cat "$1/pid" 2>/dev/null || true)
	if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
		for i in $(seq 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
	fi
}

# stop_dir DIR: ends the broker of DIR (10 s at most) and removes DIR.
stop_dir() {
	kill_server "$1"
	rm -rf "$1"
}

case ${1:-} in
start) start ;;
stop) stop_dir "$(serverdir "${2:-}")" ;;
crash) crash "${2:-}" ;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
