#!/usr/bin/env bash
# Starts and stops a throwaway PostgreSQL server for the tests of ./pgledger
# (and for trying its examples): a fresh cluster in a temporary directory,
# listening on a free loopback port (127.0.0.1) and on a unix socket in that
# directory, run as an unprivileged user (when this script runs as root it
# uses the `postgres` account Debian's package creates, or creates a system
# user idem-pg, and runs the server through runuser). Nothing is shared with
# a system-wide PostgreSQL; fsync stays on.
#
# Its superuser role is named app, not idem: a role named like the ledger's
# default schema (idem) would have that schema on its default search_path
# ("$user", public), where it captures the application's unqualified table
# names; pgledger refuses such a connection (ErrSchemaOnSearchPath).
#
# Usage:
#   eval "$(scripts/pg.sh start)"   # prints only: export IDEM_TEST_PG_DSN='postgres://...'
#   scripts/pg.sh dsn [DSN|PORT]    # prints the DSN of a running throwaway server
#   scripts/pg.sh stop [DSN|PORT]   # stops it and removes its directory
#   scripts/pg.sh crash [DSN|PORT]  # SIGKILLs every process of the server (what
#                                   # its shared memory held is lost, as in a
#                                   # crash) and starts it again: crash recovery
#
# stop, crash and dsn find the server by the port of DSN (default: $IDEM_TEST_PG_DSN);
# with neither, they act on the only throwaway server running, if there is one.
# Each server lives in ${TMPDIR:-/tmp}/idem-pg-<port> (/tmp when root).
# Needs initdb and pg_ctl: /usr/lib/postgresql/*/bin (Debian: apt-get install
# postgresql) or on PATH.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib/ports.sh"

die() {
	echo "pg.sh: $*" >&2
	exit 1
}

base=${TMPDIR:-/tmp}
if [ "$(id -u)" -eq 0 ]; then
	base=/tmp # the server's user must be able to reach it
fi
base=${base%/}

bindir() {
	local d
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
	if [ -n "$d" ] && [ -x "$d/initdb" ]; then
		echo "$d"
		return
	fi
	if command -v initdb >/dev/null 2>&1; then
		dirname "$(command -v initdb)"
		return
	fi
	die "initdb not found (looked in /usr/lib/postgresql/*/bin and PATH); install PostgreSQL (Debian: apt-get install postgresql)"
}

# pguser prints the unprivileged account to run the server as ("" when this
# script does not run as root).
pguser() {
	if [ "$(id -u)" -ne 0 ]; then
		return
	fi
	if id -u postgres >/dev/null 2>&1; then
		echo postgres
		return
	fi
	if ! id -u idem-pg >/dev/null 2>&1; then
		useradd --system --no-create-home --shell /usr/sbin/nologin idem-pg >/dev/null 2>&1 ||
			die "cannot create the system user idem-pg to run PostgreSQL as"
	fi
	echo idem-pg
}

# as runs a command as the server's user.
as() {
	if [ -n "$user" ]; then
		runuser -u "$user" -- "$@"
	else
		"$@"
	fi
}

# port_of prints the port of a DSN or a bare port number.
port_of() {
	case $1 in
	'' | *[!0-9]*)
		local p
		p=$(sed -n 's#^postgres\(ql\)\{0,1\}://[^/]*:\([0-9][0-9]*\)\(/.*\)\{0,1\}$#\2#p' <<<"$1")
		[ -n "$p" ] || die "cannot find a port in $1"
		echo "$p"
		;;
	*) echo "$1" ;;
	esac
}

# serverdir prints the directory of the server named by $1 (DSN or port),
# else by $IDEM_TEST_PG_DSN, else the only one running.
serverdir() {
	local arg=${1:-${IDEM_TEST_PG_DSN:-}}
	if [ -n "$arg" ]; then
		local d="$base/idem-pg-$(port_of "$arg")"
		[ -f "$d/dsn" ] || die "no throwaway server of pg.sh at $d"
		echo "$d"
		return
	fi
	local dirs=()
	for d in "$base"/idem-pg-*; do
		[ -f "$d/dsn" ] && dirs+=("$d")
	done
	case ${#dirs[@]} in
	0) die "no throwaway server is running (start one: eval \"\$(scripts/pg.sh start)\")" ;;
	1) echo "${dirs[0]}" ;;
	*) die "several throwaway servers run (${dirs[*]}); name one by its DSN or port" ;;
	esac
}

start() {
	local bin
	bin=$(bindir)
	user=$(pguser)
	local try port dir
	for try in 1 2 3 4 5 6 7 8; do
		port=$(free_port)
		dir="$base/idem-pg-$port"
		if ! mkdir "$dir" 2>/dev/null; then
			continue
		fi
		if [ -n "$user" ]; then
			chown "$user" "$dir"
		fi
		chmod 700 "$dir"
		if ! as "$bin/initdb" -D "$dir/data" -U app --auth=trust --encoding=UTF8 --locale=C \
			--no-instructions >"$dir/initdb.log" 2>&1; then
			cat "$dir/initdb.log" >&2
			rm -rf "$dir"
			die "initdb failed"
		fi
		cat >>"$dir/data/postgresql.conf" <<-EOF
			# pg.sh: a throwaway server for idem's tests
			listen_addresses = '127.0.0.1'
			port = $port
			unix_socket_directories = '$dir'
			max_connections = 200
			fsync = on
			synchronous_commit = on
		EOF
		if as "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null 2>&1; then
			if ! as "$bin/createdb" -h "$dir" -p "$port" -U app idem >/dev/null 2>&1; then
				as "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
				rm -rf "$dir"
				die "createdb failed"
			fi
			local dsn="postgres://app@127.0.0.1:$port/idem?sslmode=disable"
			echo "$dsn" >"$dir/dsn"
			echo "export IDEM_TEST_PG_DSN='$dsn'"
			return
		fi
		# Most likely someone took the port in between: try another one.
		if [ "$try" -eq 8 ]; then
			cat "$dir/server.log" >&2 || true
		fi
		as "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
		rm -rf "$dir"
	done
	die "could not start PostgreSQL (last log above)"
}

stop() {
	local dir bin
	dir=$(serverdir "${1:-}")
	bin=$(bindir)
	user=""
	if [ "$(id -u)" -eq 0 ]; then
		user=$(stat -c %U "$dir")
	fi
	if [ -f "$dir/data/postmaster.pid" ]; then
		as "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null ||
			as "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null || true
	fi
	rm -rf "$dir"
}

# crash kills the server with SIGKILL: it stops the postmaster (SIGSTOP: it
# neither forks a new child nor restarts one that dies), kills every child of
# it, then it, waits until all are gone, and starts it again on the same data directory and port.
crash() {
	local dir bin pid kids p i
	dir=$(serverdir "${1:-}")
	bin=$(bindir)
	user=""
	if [ "$(id -u)" -eq 0 ]; then
		user=$(stat -c %U "$dir")
	fi
	pid=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null) || die "no postmaster.pid in $dir/data: is the server running?"
	kill -STOP "$pid" 2>/dev/null || die "cannot signal the postmaster $pid"
	kids=$(pgrep -P "$pid" || true)
	for p in $kids; do
		kill -KILL "$p" 2>/dev/null || true
	done
	kill -KILL "$pid" 2>/dev/null || true
	for i in $(seq 1 200); do
		local alive=0
		for p in $pid $kids; do
			if kill -0 "$p" 2>/dev/null; then
				alive=1
			fi
		done
		[ "$alive" -eq 0 ] && break
		[ "$i" -eq 200 ] && die "the server's processes ($pid $kids) outlived SIGKILL for 10 s"
		sleep 0.05
	done
	as "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null ||
		die "the server did not start again after the crash (log: $dir/server.log)"
}

user=""
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
