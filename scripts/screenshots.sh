#!/usr/bin/env bash
# Regenerates the screenshots of the web page (docs/img/ui-*.png) that
# docs/ui.md shows: writes a ledger filled by real Runs (the browser tests'
# fixture, ui/internal/uitest, through ui/fixture_test.go's
# TestWriteFixture), serves it with `idem ui`
# on a free loopback port, and has headless Chromium (Debian: apt-get
# install chromium; or $IDEM_CHROMIUM) take a picture of the overview, a
# job's grid and a record, in light and dark mode.
#
# Usage: scripts/screenshots.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
browser=${IDEM_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
[ -n "$browser" ] || { echo "screenshots.sh: no chromium (apt-get install chromium, or set \$IDEM_CHROMIUM)" >&2; exit 1; }

tmp=$(mktemp -d)
server=""
cleanup() {
	if [ -n "$server" ]; then
		kill "$server" 2>/dev/null || true
		wait "$server" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

(cd ui && IDEM_UI_FIXTURE="$tmp/ledger.db" go test -count=1 -run '^TestWriteFixture$' . >/dev/null)
(cd cmd/idem && go build -o "$tmp/idem" .)
"$tmp/idem" ui --ledger "$tmp/ledger.db" --addr 127.0.0.1:0 --refresh 0 \
	--schedule settle=daily --tz UTC >"$tmp/out" 2>"$tmp/err" &
server=$!
base=""
for _ in $(seq 1 100); do
	base=$(sed -n 's|.* at \(http://[^ ]*/\) .*|\1|p' "$tmp/out")
	[ -n "$base" ] && break
	kill -0 "$server" 2>/dev/null || { cat "$tmp/err" >&2; exit 1; }
	sleep 0.1
done
[ -n "$base" ] || { echo "screenshots.sh: idem ui printed no address in 10 s" >&2; cat "$tmp/err" >&2; exit 1; }

mkdir -p docs/img
shot() { # NAME PATH WIDTH HEIGHT [dark]
	local name=$1 path=$2 w=$3 h=$4 scheme=${5:-light}
	local flags=()
	if [ "$scheme" = dark ]; then
		flags+=(--force-dark-mode --blink-settings=preferredColorScheme=0)
	else
		flags+=(--blink-settings=preferredColorScheme=1)
	fi
	timeout 60 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
		--user-data-dir="$tmp/profile" "${flags[@]}" \
		--window-size="$w,$h" --screenshot="$root/docs/img/$name.png" "$base$path" >/dev/null 2>&1
	echo "docs/img/$name.png"
}
shot ui-overview "" 1200 760
shot ui-job "job?job=settle" 1200 760
shot ui-record "record?job=notify&period=2026-10-27" 1200 900
shot ui-record-phone-dark "record?job=grant&period=2026-10-27" 390 844 dark
