#!/usr/bin/env bash
# Starts and stops a throwaway Redis server for the tests of ./redisstore
# (and for trying its examples): a redis-server in a temporary directory,
# listening on a free loopback port (127.0.0.1) only, with the append-only
# file on and fsynced before every reply (appendonly yes, appendfsync
# always: what redisstore requires unless told otherwise) and no RDB
# snapshots. Nothing is shared with a system-wide Redis.
#
# Usage:
#   eval "$(scripts/redis.sh start)"   # prints only: export IDEM_TEST_REDIS_ADDR='127.0.0.1:PORT'
#   scripts/redis.sh addr [ADDR|PORT]  # prints the address of a running throwaway server
#   scripts/redis.sh stop [ADDR|PORT]  # stops it and removes its directory
#   scripts/redis.sh crash [ADDR|PORT] # SIGKILLs it and starts it again on the same port and
#                                      # files: it reloads its append-only file (what a crash
#                                      # of the server does to idem's store; see the torture command)
#
# stop and addr find the server by the port of ADDR (default:
# $IDEM_TEST_REDIS_ADDR); with neither, they act on the only throwaway server
# running, if there is one. Each server lives in ${TMPDIR:-/tmp}/idem-redis-<port>.
# Needs redis-server (Debian: apt-get install redis-server) on PATH.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib/ports.sh"

die() {
	echo "redis.sh: $*" >&2
	exit 1
}

base=${TMPDIR:-/tmp}
base=${base%/}

# ping PORT: the server answers PING with PONG.
ping() {
	if command -v redis-cli >/dev/null 2>&1; then
		[ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ]
		return
	fi
	local reply
	exec 3<>"/dev/tcp/127.0.0.1/$1" 2>/dev/null || return 1
	printf 'PING\r\n' >&3
	IFS= read -r -t 2 reply <&3 || true
	exec 3>&-
	[ "${reply%$'\r'}" = +PONG ]
}

# port_of prints the port of ADDR (host:port) or a bare port number.
port_of() {
	case $1 in
	'' | *[!0-9]*)
		local p=${1##*:}
		case $p in '' | *[!0-9]*) die "cannot find a port in $1" ;; esac
		echo "$p"
		;;
	*) echo "$1" ;;
	esac
}

# serverdir prints the directory of the server named by $1 (address or
# port), else by $IDEM_TEST_REDIS_ADDR, else the only one running.
serverdir() {
	local arg=${1:-${IDEM_TEST_REDIS_ADDR:-}}
	if [ -n "$arg" ]; then
		local d="$base/idem-redis-$(port_of "$arg")"
		[ -f "$d/addr" ] || die "no throwaway server of redis.sh at $d"
		echo "$d"
		return
	fi
	local dirs=() d
	for d in "$base"/idem-redis-*; do
		[ -f "$d/addr" ] && dirs+=("$d")
	done
	case ${#dirs[@]} in
	0) die "no throwaway server is running (start one: eval \"\$(scripts/redis.sh start)\")" ;;
	1) echo "${dirs[0]}" ;;
	*) die "several throwaway servers run (${dirs[*]}); name one by its address or port" ;;
	esac
}

start() {
	command -v redis-server >/dev/null 2>&1 ||
		die "redis-server not found on PATH; install Redis (Debian: apt-get install redis-server)"
	local try port dir i
	for try in 1 2 3 4 5 6 7 8; do
		port=$(free_port)
		dir="$base/idem-redis-$port"
		if ! mkdir "$dir" 2>/dev/null; then
			continue
		fi
		chmod 700 "$dir"
		cat >"$dir/redis.conf" <<-EOC
			# redis.sh: a throwaway server for idem's tests
			bind 127.0.0.1
			port $port
			dir $dir
			daemonize yes
			pidfile $dir/redis.pid
			logfile $dir/server.log
			appendonly yes
			appendfsync always
			save ""
		EOC
		if redis-server "$dir/redis.conf" >"$dir/start.log" 2>&1; then
			# Each wait has its own deadline: 10 s for the server to answer.
			for i in $(seq 100); do
				if ping "$port"; then
					echo "127.0.0.1:$port" >"$dir/addr"
					echo "export IDEM_TEST_REDIS_ADDR='127.0.0.1:$port'"
					return
				fi
				sleep 0.1
			done
		fi
		# Most likely someone took the port in between: try another one.
		if [ "$try" -eq 8 ]; then
			cat "$dir/start.log" "$dir/server.log" >&2 2>/dev/null || true
		fi
		kill_server "$dir"
		rm -rf "$dir"
	done
	die "could not start redis-server (last log above)"
}

# kill_server DIR: ends the server of DIR, if it runs, and waits (10 s at
# most) for it to exit.
kill_server() {
	local pid i
	pid=$(cat "$1/redis.pid" 2>/dev/null || true)
	[ -n "$pid" ] || return 0
	kill "$pid" 2>/dev/null || return 0
	for i in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null || true
}

crash() {
	local dir port pid i
	dir=$(serverdir "${1:-}")
	port=$(port_of "$(cat "$dir/addr")")
	pid=$(cat "$dir/redis.pid")
	kill -9 "$pid"
	for i in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && die "redis-server $pid did not die of SIGKILL in 10 s"
	redis-server "$dir/redis.conf" >"$dir/start.log" 2>&1 || die "restart failed: $(cat "$dir/start.log")"
	# The server answers PONG once it has reloaded its append-only file.
	for i in $(seq 300); do
		if ping "$port"; then
			echo "redis.sh: redis-server on port $port killed (pid $pid) and restarted" >&2
			return
		fi
		sleep 0.1
	done
	die "redis-server on port $port did not answer within 30 s of its restart (log: $dir/server.log)"
}

stop() {
	local dir
	dir=$(serverdir "${1:-}")
	kill_server "$dir"
	rm -rf "$dir"
}

case ${1:-} in
start) start ;;
stop) stop "${2:-}" ;;
crash) crash "${2:-}" ;;
addr) cat "$(serverdir "${2:-}")/addr" ;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
