#!/usr/bin/env bash
# Starts and stops a throwaway RabbitMQ broker for the tests of ./rabbitoutbox
# (and for trying its examples): a node of its own, run as the current user,
# with every file in a temporary directory (its Mnesia database, its logs,
# its configuration, an empty plugin list, a HOME with its own Erlang
# cookie), listening on free loopback ports only: AMQP, the Erlang
# distribution port and a port mapper (epmd) of its own. Its one user is
# idem, with a random password. Nothing is shared with a system-wide
# RabbitMQ (Debian's service, which its package may start on install, can
# stay stopped).
#
# Usage:
#   eval "$(scripts/rabbitmq.sh start)"  # prints only: export IDEM_TEST_AMQP_URL='amqp://idem:...@127.0.0.1:PORT/'
#   scripts/rabbitmq.sh url [URL|PORT]   # prints the URL of a running throwaway broker
#   scripts/rabbitmq.sh stop [URL|PORT]  # stops it and removes its directory
#   scripts/rabbitmq.sh crash [URL|PORT] # SIGKILLs it and starts it again on the same ports and
#                                        # files: it recovers its durable queues and persistent
#                                        # messages (what a crash of the broker does)
#
# stop, crash and url find the broker by the port of URL (default:
# $IDEM_TEST_AMQP_URL); with neither, they act on the only throwaway broker
# running, if there is one. Each broker lives in ${TMPDIR:-/tmp}/idem-rabbitmq-<port>.
# A broker takes 5-15 s to start (longer on a loaded machine): start and
# crash wait for it to answer AMQP's protocol header, 120 s at most, and say
# on stderr what they wait for.
# Needs rabbitmq-server (Debian: apt-get install rabbitmq-server; its
# scripts in /usr/lib/rabbitmq/bin run the node as the current user) and
# epmd (Erlang's, a dependency of the package).
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib/ports.sh"

die() {
	echo "rabbitmq.sh: $*" >&2
	exit 1
}

base=${TMPDIR:-/tmp}
base=${base%/}

# How long start and crash wait for the broker, in tenths of a second.
wait_tenths=1200

# bindir prints the directory of rabbitmq-server's own scripts (Debian's
# /usr/sbin/rabbitmq-server switches to the rabbitmq user; the scripts in
# /usr/lib/rabbitmq/bin run as the caller).
bindir() {
	if [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
		echo /usr/lib/rabbitmq/bin
		return
	fi
	local p
	p=$(command -v rabbitmq-server 2>/dev/null) ||
		die "rabbitmq-server not found (looked in /usr/lib/rabbitmq/bin and PATH); install RabbitMQ (Debian: apt-get install rabbitmq-server)"
	dirname "$p"
}

epmd_bin() {
	if command -v epmd >/dev/null 2>&1; then
		command -v epmd
		return
	fi
	local p
	p=$(ls /usr/lib/erlang/erts-*/bin/epmd 2>/dev/null | sort -V | tail -n 1 || true)
	[ -n "$p" ] || die "epmd (Erlang's port mapper) not found on PATH or in /usr/lib/erlang/erts-*/bin"
	echo "$p"
}

# answers PORT: the broker on PORT answers AMQP 0-9-1's protocol header with
# a frame of type 1 (its connection.start method), as a broker does only
# once it has booted.
answers() {
	local c=""
	{ exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
	printf 'AMQP\0\0\011\001' >&3
	IFS= read -r -d '' -N 1 -t 2 c <&3 || true
	exec 3>&-
	[ "$c" = $'\001' ]
}

# port_of prints the port of URL (scheme://user:pass@host:port/vhost) or a
# bare port number.
port_of() {
	case $1 in
	'' | *[!0-9]*)
		local hp=${1#*://}
		hp=${hp%%/*}
		hp=${hp%%\?*}
		hp=${hp##*@}
		local p=${hp##*:}
		case $p in '' | *[!0-9]*) die "cannot find a port in $1" ;; esac
		echo "$p"
		;;
	*) echo "$1" ;;
	esac
}

# brokerdir prints the directory of the broker named by $1 (URL or port),
# else by $IDEM_TEST_AMQP_URL, else the only one running.
brokerdir() {
	local arg=${1:-${IDEM_TEST_AMQP_URL:-}}
	if [ -n "$arg" ]; then
		local d="$base/idem-rabbitmq-$(port_of "$arg")"
		[ -f "$d/url" ] || die "no throwaway broker of rabbitmq.sh at $d"
		echo "$d"
		return
	fi
	local dirs=() d
	for d in "$base"/idem-rabbitmq-*; do
		[ -f "$d/url" ] && dirs+=("$d")
	done
	case ${#dirs[@]} in
	0) die "no throwaway broker is running (start one: eval \"\$(scripts/rabbitmq.sh start)\")" ;;
	1) echo "${dirs[0]}" ;;
	*) die "several throwaway brokers run (${dirs[*]}); name one by its URL or port" ;;
	esac
}

# run_node DIR: starts the node of DIR in the background, in a session of
# its own, with the environment of DIR/env. The pid of rabbitmq-server's
# script, which waits for the Erlang VM it starts (and stops it on SIGTERM),
# goes to DIR/wrapper.pid; the VM writes its own to DIR/rabbitmq.pid as it
# boots (and removes it when it stops), which await copies to DIR/vm.pid.
run_node() {
	local dir=$1 pid
	(
		set -a
		# shellcheck disable=SC1091
		. "$dir/env"
		set +a
		cd "$dir"
		exec setsid "$(bindir)/rabbitmq-server" </dev/null >>"$dir/server.out" 2>&1
	) &
	pid=$!
	echo "$pid" >"$dir/wrapper.pid"
}

# run_epmd DIR: starts the port mapper of DIR's node on its own port, on
# loopback, in the background; its pid goes to DIR/epmd.pid.
run_epmd() {
	local dir=$1 port pid
	port=$(cat "$dir/epmd.port")
	setsid "$(epmd_bin)" -port "$port" -address 127.0.0.1 </dev/null >>"$dir/epmd.out" 2>&1 &
	pid=$!
	echo "$pid" >"$dir/epmd.pid"
}

# await DIR PORT WHAT: waits for the broker of DIR to answer on PORT, saying
# on stderr what it waits for; fails (showing the logs) if the node exits or
# the deadline passes.
await() {
	local dir=$1 port=$2 what=$3 pid i start=$SECONDS
	pid=$(cat "$dir/wrapper.pid")
	echo "rabbitmq.sh: waiting up to $((wait_tenths / 10)) s for the broker ($what, node $(sed -n 's/^RABBITMQ_NODENAME=//p' "$dir/env"), pid $pid) to answer AMQP's protocol header on 127.0.0.1:$port" >&2
	for i in $(seq "$wait_tenths"); do
		if answers "$port"; then
			cp "$dir/rabbitmq.pid" "$dir/vm.pid"
			echo "rabbitmq.sh: the broker answered on 127.0.0.1:$port after $((SECONDS - start)) s" >&2
			return 0
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 30 "$dir/server.out" >&2 2>/dev/null || true
			echo "rabbitmq.sh: the broker (pid $pid) exited before it answered on 127.0.0.1:$port (log above; more in $dir/log)" >&2
			return 1
		fi
		sleep 0.1
	done
	tail -n 30 "$dir/server.out" >&2 2>/dev/null || true
	echo "rabbitmq.sh: the broker (pid $pid) did not answer on 127.0.0.1:$port within $((wait_tenths / 10)) s (log above; more in $dir/log)" >&2
	return 1
}

start() {
	bindir >/dev/null
	epmd_bin >/dev/null
	local try port dport eport dir node pass
	for try in 1 2 3 4; do
		port=$(free_port)
		dport=$(free_port)
		eport=$(free_port)
		if [ "$port" = "$dport" ] || [ "$port" = "$eport" ] || [ "$dport" = "$eport" ]; then
			continue
		fi
		dir="$base/idem-rabbitmq-$port"
		mkdir "$dir" 2>/dev/null || continue
		chmod 700 "$dir"
		mkdir "$dir/home" "$dir/mnesia" "$dir/log"
		node="idem-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')@localhost"
		pass=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
		# The node's own Erlang cookie, in its own HOME: rabbitmqctl run with
		# DIR/env reaches this node and no other.
		od -An -N16 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F >"$dir/home/.erlang.cookie"
		chmod 400 "$dir/home/.erlang.cookie"
		echo '[].' >"$dir/enabled_plugins"
		: >"$dir/rabbitmq-env.conf" # not /etc/rabbitmq's
		cat >"$dir/rabbitmq.conf" <<-EOC
			# rabbitmq.sh: a throwaway broker for idem's tests
			listeners.tcp.1 = 127.0.0.1:$port
			default_user = idem
			default_pass = $pass
			default_vhost = /
			loopback_users = none
			log.console = false
			log.file.level = info
		EOC
		cat >"$dir/env" <<-EOE
			HOME=$dir/home
			RABBITMQ_NODENAME=$node
			RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
			RABBITMQ_NODE_PORT=$port
			RABBITMQ_DIST_PORT=$dport
			RABBITMQ_MNESIA_BASE=$dir/mnesia
			RABBITMQ_LOG_BASE=$dir/log
			RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf
			RABBITMQ_ADVANCED_CONFIG_FILE=$dir/advanced.config
			RABBITMQ_CONF_ENV_FILE=$dir/rabbitmq-env.conf
			RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins
			RABBITMQ_PID_FILE=$dir/rabbitmq.pid
			RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
			ERL_EPMD_PORT=$eport
			ERL_EPMD_ADDRESS=127.0.0.1
			ERL_CRASH_DUMP=$dir/erl_crash.dump
		EOE
		echo "$eport" >"$dir/epmd.port"
		run_epmd "$dir"
		run_node "$dir"
		if await "$dir" "$port" "started in $dir"; then
			echo "amqp://idem:$pass@127.0.0.1:$port/" >"$dir/url"
			echo "export IDEM_TEST_AMQP_URL='amqp://idem:$pass@127.0.0.1:$port/'"
			return
		fi
		# Most likely someone took one of its ports in between: try others.
		kill_all "$dir"
		rm -rf "$dir"
	done
	die "could not start rabbitmq-server (last log above)"
}

# kill_pid PIDFILE SIGNAL: sends SIGNAL to the process of PIDFILE, if it
# runs, and waits (30 s at most) for it to exit; then SIGKILLs it.
kill_pid() {
	local pid i
	pid=$(cat "$1" 2>/dev/null || true)
	[ -n "$pid" ] || return 0
	kill "-$2" "$pid" 2>/dev/null || return 0
	for i in $(seq 300); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null || true
}

# kill_all DIR: stops the node of DIR (SIGTERM to its script, which stops
# the VM cleanly and waits for it) and its port mapper.
kill_all() {
	kill_pid "$1/wrapper.pid" TERM
	kill_pid "$1/vm.pid" TERM
	kill_pid "$1/epmd.pid" TERM
}

crash() {
	local dir port pid wrapper i
	dir=$(brokerdir "${1:-}")
	port=$(port_of "$(cat "$dir/url")")
	pid=$(cat "$dir/vm.pid")
	wrapper=$(cat "$dir/wrapper.pid")
	kill -9 "$pid" 2>/dev/null || true
	# The script that waited for the VM exits with it.
	for i in $(seq 100); do
		if ! kill -0 "$pid" 2>/dev/null && ! kill -0 "$wrapper" 2>/dev/null; then
			break
		fi
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && die "the broker's VM ($pid) did not die of SIGKILL in 10 s"
	kill -9 "$wrapper" 2>/dev/null || true
	rm -f "$dir/rabbitmq.pid" "$dir/vm.pid"
	run_node "$dir"
	await "$dir" "$port" "restarted after a SIGKILL of its VM, pid $pid" ||
		die "the broker on port $port did not come back (log: $dir/log)"
	echo "rabbitmq.sh: the broker on port $port killed (VM pid $pid) and restarted (VM pid $(cat "$dir/vm.pid"))" >&2
}

stop() {
	local dir
	dir=$(brokerdir "${1:-}")
	kill_all "$dir"
	rm -rf "$dir"
}

case ${1:-} in
start) start ;;
stop) stop "${2:-}" ;;
crash) crash "${2:-}" ;;
url) cat "$(brokerdir "${2:-}")/url" ;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
