#!/usr/bin/env bash
# Starts and stops a throwaway NATS server with JetStream for the tests of
# ./natsoutbox and cmd/idem (and for trying their examples): a nats-server
# listening on a free loopback port (127.0.0.1) only, with JetStream on and
# its store in a temporary directory. Nothing is shared with a system-wide
# NATS server.
#
# Usage:
#   eval "$(scripts/nats.sh start)"   # prints only: export IDEM_TEST_NATS_URL='nats://127.0.0.1:PORT'
#   scripts/nats.sh url [URL|PORT]    # prints the URL of a running throwaway server
#   scripts/nats.sh stop [URL|PORT]   # stops it and removes its directory
#   scripts/nats.sh crash [URL|PORT]  # SIGKILLs it and starts it again on the same port
#                                     # and store (JetStream recovers its streams)
#
# stop, url and crash find the server by the port of URL (default:
# $IDEM_TEST_NATS_URL); with neither, they act on the only throwaway server
# running, if there is one. Each server lives in ${TMPDIR:-/tmp}/idem-nats-<port>.
# Needs nats-server (Debian: apt-get install nats-server) on PATH.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib/ports.sh"

die() {
	echo "nats.sh: $*" >&2
	exit 1
}

base=${TMPDIR:-/tmp}
base=${base%/}
PATH=$PATH:/usr/sbin:/usr/local/sbin # Debian installs nats-server in /usr/sbin

# ready PORT: the server greets with an INFO line that has JetStream on.
ready() {
	local reply
	# In a subshell: its descriptors and redirections end with it.
	reply=$( (exec 3<>"/dev/tcp/127.0.0.1/$1" && IFS= read -r -t 2 line <&3 && printf '%s' "$line") 2>/dev/null) || return 1
	case $reply in
	INFO*'"jetstream":true'*) return 0 ;;
	esac
	return 1
}

# port_of prints the port of URL (nats://host:port) or a bare port number.
port_of() {
	case $1 in
	'' | *[!0-9]*)
		local p=${1##*:}
		p=${p%%/*}
		case $p in '' | *[!0-9]*) die "cannot find a port in $1" ;; esac
		echo "$p"
		;;
	*) echo "$1" ;;
	esac
}

# serverdir prints the directory of the server named by $1 (URL or port),
# else by $IDEM_TEST_NATS_URL, else the only one running.
serverdir() {
	local arg=${1:-${IDEM_TEST_NATS_URL:-}}
	if [ -n "$arg" ]; then
		local d="$base/idem-nats-$(port_of "$arg")"
		[ -f "$d/url" ] || die "no throwaway server of nats.sh at $d"
		echo "$d"
		return
	fi
	local dirs=() d
	for d in "$base"/idem-nats-*; do
		[ -f "$d/url" ] && dirs+=("$d")
	done
	case ${#dirs[@]} in
	0) die "no throwaway server is running (start one: eval \"\$(scripts/nats.sh start)\")" ;;
	1) echo "${dirs[0]}" ;;
	*) die "several throwaway servers run (${dirs[*]}); name one by its URL or port" ;;
	esac
}

# run_server DIR PORT: starts nats-server in the background, detached from
# this shell's output (so that $(nats.sh start) returns), its pid in
# DIR/nats.pid.
run_server() {
	nats-server -a 127.0.0.1 -p "$2" -js -sd "$1/store" -l "$1/server.log" </dev/null >"$1/start.log" 2>&1 &
	echo $! >"$1/nats.pid"
}

# wait_ready DIR PORT SECONDS: waits for the server to take clients.
wait_ready() {
	local i
	for i in $(seq $(($3 * 10))); do
		if ready "$2"; then
			return 0
		fi
		kill -0 "$(cat "$1/nats.pid")" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

start() {
	command -v nats-server >/dev/null 2>&1 ||
		die "nats-server not found on PATH; install it (Debian: apt-get install nats-server)"
	local try port dir
	for try in 1 2 3 4 5 6 7 8; do
		port=$(free_port)
		dir="$base/idem-nats-$port"
		if ! mkdir "$dir" 2>/dev/null; then
			continue
		fi
		chmod 700 "$dir"
		run_server "$dir" "$port"
		# 10 s for the server to take clients.
		if wait_ready "$dir" "$port" 10; then
			echo "nats://127.0.0.1:$port" >"$dir/url"
			echo "export IDEM_TEST_NATS_URL='nats://127.0.0.1:$port'"
			return
		fi
		# Most likely someone took the port in between: try another one.
		if [ "$try" -eq 8 ]; then
			cat "$dir/start.log" "$dir/server.log" >&2 2>/dev/null || true
		fi
		kill_server "$dir"
		rm -rf "$dir"
	done
	die "could not start nats-server (last log above)"
}

# kill_server DIR [SIGNAL]: ends the server of DIR, if it runs, and waits
# (10 s at most) for it to exit.
kill_server() {
	local pid i
	pid=$(cat "$1/nats.pid" 2>/dev/null || true)
	[ -n "$pid" ] || return 0
	kill "-${2:-TERM}" "$pid" 2>/dev/null || return 0
	for i in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null || true
}

crash() {
	local dir port
	dir=$(serverdir "${1:-}")
	port=$(port_of "$(cat "$dir/url")")
	kill_server "$dir" KILL
	run_server "$dir" "$port"
	# JetStream recovers its streams before it takes clients: 30 s.
	wait_ready "$dir" "$port" 30 ||
		die "nats-server on port $port did not take clients within 30 s of its restart (log: $dir/server.log)"
	echo "nats.sh: nats-server on port $port killed and restarted" >&2
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
url) cat "$(serverdir "${2:-}")/url" ;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
