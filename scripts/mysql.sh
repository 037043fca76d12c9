#!/usr/bin/env bash
# Starts and stops a throwaway MariaDB server for the tests of ./mysqlledger
# (and for trying its examples): a fresh data directory in a temporary
# directory, listening on a free loopback port (127.0.0.1) and on a unix
# socket in that directory. Nothing is shared with a system-wide server.
# Durability stays on: innodb_flush_log_at_trx_commit=1, sync_binlog=1 (the
# binary log is on, as on a replicated production server).
#
# Usage:
#   eval "$(scripts/mysql.sh start)"   # prints only: export IDEM_TEST_MYSQL_DSN='root@tcp(127.0.0.1:PORT)/idem'
#   scripts/mysql.sh dsn [DSN|PORT]    # prints the DSN of a running throwaway server
#   scripts/mysql.sh stop [DSN|PORT]   # stops it and removes its directory
#   scripts/mysql.sh crash [DSN|PORT]  # SIGKILLs the server and starts it again
#                                      # on the same data: crash recovery
#
# stop, crash and dsn find the server by the port of DSN (default:
# $IDEM_TEST_MYSQL_DSN); with neither, they act on the only throwaway server
# running, if there is one. Each server lives in ${TMPDIR:-/tmp}/idem-mysql-<port>.
# Needs mariadbd and mariadb-install-db (Debian: apt-get install mariadb-server).
# As root, the server runs as root (--user=root).
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib/ports.sh"

die() {
	echo "mysql.sh: $*" >&2
	exit 1
}

base=${TMPDIR:-/tmp}
base=${base%/}

bin() {
	local b
	for b in "$1" "/usr/sbin/$1" "/usr/bin/$1"; do
		if command -v "$b" >/dev/null 2>&1; then
			command -v "$b"
			return
		fi
	done
	die "$1 not found (on PATH or in /usr/sbin); install MariaDB (Debian: apt-get install mariadb-server)"
}

# port_of prints the port of a DSN (user@tcp(127.0.0.1:PORT)/db) or a bare port.
port_of() {
	case $1 in
	'' | *[!0-9]*)
		local p
		p=$(sed -n 's#^.*tcp([^:]*:\([0-9][0-9]*\)).*$#\1#p' <<<"$1")
		[ -n "$p" ] || die "cannot find a port in $1"
		echo "$p"
		;;
	*) echo "$1" ;;
	esac
}

serverdir() {
	local arg=${1:-${IDEM_TEST_MYSQL_DSN:-}}
	if [ -n "$arg" ]; then
		local d="$base/idem-mysql-$(port_of "$arg")"
		[ -f "$d/dsn" ] || die "no throwaway server of mysql.sh at $d"
		echo "$d"
		return
	fi
	local dirs=()
	for d in "$base"/idem-mysql-*; do
		[ -f "$d/dsn" ] && dirs+=("$d")
	done
	case ${#dirs[@]} in
	0) die "no throwaway server is running (start one: eval \"\$(scripts/mysql.sh start)\")" ;;
	1) echo "${dirs[0]}" ;;
	*) die "several throwaway servers run (${dirs[*]}); name one by its DSN or port" ;;
	esac
}

# launch starts mariadbd on dir's data and waits until it answers.
launch() {
	local dir=$1 port=$2 server i
	server=$(bin mariadbd)
	local user=()
	if [ "$(id -u)" -eq 0 ]; then
		user=(--user=root)
	fi
	"$server" --no-defaults "${user[@]}" --datadir="$dir/data" --socket="$dir/sock" \
		--pid-file="$dir/pid" --port="$port" --bind-address=127.0.0.1 --skip-name-resolve --tmpdir="$dir/tmp" \
		--log-error="$dir/server.log" --log-bin="$dir/data/binlog" --server-id=1 \
		--innodb-flush-log-at-trx-commit=1 --sync-binlog=1 --max-connections=500 \
		--innodb-buffer-pool-size=64M --innodb-log-file-size=48M \
		--character-set-server=utf8mb4 --collation-server=utf8mb4_bin \
		>/dev/null 2>&1 </dev/null &
	echo $! >"$dir/mariadbd.pid"
	for i in $(seq 1 600); do
		if [ -S "$dir/sock" ] && port_in_use "$port"; then
			return 0
		fi
		if ! kill -0 "$(cat "$dir/mariadbd.pid")" 2>/dev/null; then
			return 1
		fi
		sleep 0.1
	done
	return 1
}

client() {
	local dir=$1
	shift
	"$(bin mariadb)" --no-defaults --protocol=socket --socket="$dir/sock" -uroot "$@"
}

start() {
	local try port dir
	for try in 1 2 3 4 5 6 7 8; do
		port=$(free_port)
		dir="$base/idem-mysql-$port"
		if ! mkdir "$dir" 2>/dev/null; then
			continue
		fi
		chmod 700 "$dir"
		# A temporary directory of the server's own: two servers that
		# share /tmp for their temporary tables can lose each other's
		# (a bootstrap beside the module's running server failed so:
		# "Could not remove temporary table '/tmp/#sql-temptable-…'",
		# then "Unknown table 'mysql.tmp_proxies_priv'").
		mkdir "$dir/tmp"
		local user=()
		if [ "$(id -u)" -eq 0 ]; then
			user=(--user=root)
		fi
		if ! "$(bin mariadb-install-db)" --no-defaults "${user[@]}" --datadir="$dir/data" --tmpdir="$dir/tmp" \
			--auth-root-authentication-method=normal --skip-test-db >"$dir/install.log" 2>&1; then
			cat "$dir/install.log" >&2
			rm -rf "$dir"
			die "mariadb-install-db failed"
		fi
		if launch "$dir" "$port"; then
			# root may connect over TCP from 127.0.0.1 without a password.
			if ! client "$dir" -e "CREATE DATABASE idem CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
				CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'; GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;" \
				>"$dir/setup.log" 2>&1; then
				cat "$dir/setup.log" >&2
				kill -KILL "$(cat "$dir/mariadbd.pid")" 2>/dev/null || true
				rm -rf "$dir"
				die "creating the database idem failed"
			fi
			local dsn="root@tcp(127.0.0.1:$port)/idem"
			echo "$dsn" >"$dir/dsn"
			echo "export IDEM_TEST_MYSQL_DSN='$dsn'"
			return
		fi
		if [ "$try" -eq 8 ]; then
			cat "$dir/server.log" >&2 || true
		fi
		kill -KILL "$(cat "$dir/mariadbd.pid" 2>/dev/null)" 2>/dev/null || true
		rm -rf "$dir"
	done
	die "could not start mariadbd (last log above)"
}

# waitgone waits until the server's process has ended.
waitgone() {
	local pid=$1 i
	for i in $(seq 1 600); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	return 1
}

stop() {
	local dir pid
	dir=$(serverdir "${1:-}")
	pid=$(cat "$dir/mariadbd.pid" 2>/dev/null || true)
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		waitgone "$pid" || { kill -KILL "$pid" 2>/dev/null || true; waitgone "$pid" || true; }
	fi
	rm -rf "$dir"
}

crash() {
	local dir pid port
	dir=$(serverdir "${1:-}")
	port=${dir##*-}
	pid=$(cat "$dir/mariadbd.pid" 2>/dev/null) || die "no mariadbd.pid in $dir: is the server running?"
	kill -KILL "$pid" 2>/dev/null || true
	waitgone "$pid" || die "mariadbd $pid outlived SIGKILL for 60 s"
	rm -f "$dir/sock"
	if ! launch "$dir" "$port"; then
		tail -n 20 "$dir/server.log" >&2 || true
		die "the server did not start again after the crash (log: $dir/server.log)"
	fi
}

case ${1:-} in
start) start ;;
stop) stop "${2:-}" ;;
crash) crash "${2:-}" ;;
dsn) cat "$(serverdir "${2:-}")/dsn" ;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
