#!/usr/bin/env bash
# scripts/tidy.sh [--check]: `go mod tidy` in every module of the repository.
#
# The modules require their siblings (github.com/idemgo/idem/...) at the
# version of the last release (v0.0.0 before the first), which no proxy may
# have, and go mod tidy works on one module, outside the workspace (go.work).
# So it runs on a copy of each go.mod in which those siblings are replaced
# by their directories (go mod tidy -modfile), and the replace lines are
# dropped again. The siblings' own go.sum lines are kept as they are (a
# directory has none; scripts/release.sh writes them).
#
# Without --check, each module's go.mod and go.sum are replaced by the
# result. With --check, nothing is written: it prints what tidy would change
# and fails if anything would (scripts/test.sh runs this).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
check=""
case ${1:-} in
--check) check=1 ;;
"") ;;
*)
	echo "usage: scripts/tidy.sh [--check]" >&2
	exit 2
	;;
esac
sibling='^github\.com/idemgo/idem(/|$)'    # a module path
sum_sibling='^github\.com/idemgo/idem[/ ]' # a go.sum line

# tidy_module DIR: tidies the module in DIR (or, with --check, compares).
tidy_module() {
	local dir=$1 tmp p siblings rc=0
	tmp=$(mktemp -d)
	cp "$dir/go.mod" "$tmp/go.mod"
	if [ -f "$dir/go.sum" ]; then cp "$dir/go.sum" "$tmp/go.sum"; else : >"$tmp/go.sum"; fi
	siblings=$(re="$sibling" awk '$1 ~ ENVIRON["re"] {print $1} $1 == "require" && $2 ~ ENVIRON["re"] {print $2}' "$dir/go.mod")
	for p in $siblings; do
		(cd "$dir" && go mod edit -modfile="$tmp/go.mod" -replace "$p=$root${p#github.com/idemgo/idem}")
	done
	if ! (cd "$dir" && GOWORK=off go mod tidy -modfile="$tmp/go.mod"); then
		rm -rf "$tmp"
		echo "go mod tidy failed in $dir" >&2
		return 1
	fi
	for p in $siblings; do
		(cd "$dir" && go mod edit -modfile="$tmp/go.mod" -dropreplace "$p")
	done
	# The siblings' go.sum lines (written by a release) stay as they are,
	# where Go keeps them: before the first module path above theirs.
	grep -E "$sum_sibling" "$dir/go.sum" >"$tmp/siblings.sum" 2>/dev/null || true
	grep -v -E "$sum_sibling" "$tmp/go.sum" |
		awk -v f="$tmp/siblings.sum" '!done && $1 > "github.com/idemgo/idem" { while ((getline l < f) > 0) print l; done = 1 } { print } END { if (!done) while ((getline l < f) > 0) print l }' >"$tmp/go.sum.new" || true
	if [ -n "$check" ]; then
		diff -u "$dir/go.mod" "$tmp/go.mod" || rc=1
		if [ -f "$dir/go.sum" ] || [ -s "$tmp/go.sum.new" ]; then
			diff -u "$dir/go.sum" "$tmp/go.sum.new" 2>/dev/null || rc=1
		fi
		if [ $rc -ne 0 ]; then
			echo "go mod tidy would change go.mod or go.sum in $dir (above; scripts/tidy.sh writes it)" >&2
		fi
	else
		cp "$tmp/go.mod" "$dir/go.mod"
		if [ -s "$tmp/go.sum.new" ]; then cp "$tmp/go.sum.new" "$dir/go.sum"; fi
	fi
	rm -rf "$tmp"
	return $rc
}

rc=0
while IFS= read -r dir; do
	tidy_module "$dir" || rc=1
done < <(find . -name go.mod -not -path '*/testdata/*' -not -path './.git/*' -printf '%h\n' | sort)
exit $rc
