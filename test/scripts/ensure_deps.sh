#!/usr/bin/env bash
# Installs what building, testing and the demo need, when any of it is
# missing, and then checks that everything is there.
#
# What is needed is test/scripts/deps.txt: every command the scripts call,
# every Python module they import and every file they read, each with the
# Debian package (or PyPI release) that provides it.  The decision is made by
# what is actually there (a command on the PATH or in PostgreSQL's bindir, a
# module that imports, a file that exists), not by package names, so a
# package that is installed without the part we need (pg_prove is only a
# Recommends of postgresql-15-pgtap) is still caught.  make test checks that
# the table knows every command the scripts call (test/scripts/check_deps.py).
#
# Needs root (or sudo) only when something is missing.  PyPI modules go into
# .deps/python under the project root (put it on PYTHONPATH).
#
#   ensure_deps.sh           install what is missing, then check
#   ensure_deps.sh --check   only check: list what is missing, exit 1 if any
set -euo pipefail
cd "$(dirname "$0")/../.."
table=test/scripts/deps.txt
pg_bindir=/usr/lib/postgresql/15/bin
pydeps=$PWD/.deps/python
python=/usr/bin/python3

have() {
	local kind=$1 name=$2
	case "$kind" in
	cmd) command -v "$name" >/dev/null 2>&1 || [[ -x "$pg_bindir/$name" ]] ;;
	file) [[ -e "$name" ]] ;;
	py) [[ -x $python ]] && $python -c "import $name" >/dev/null 2>&1 ;;
	pypi) [[ -x $python ]] && PYTHONPATH=$pydeps $python -c "import $name" >/dev/null 2>&1 ;;
	*) echo "ensure_deps: $table: unknown kind '$kind'" >&2; return 2 ;;
	esac
}

# Print "kind name provider" for every entry that is not there (provider "-":
# nothing installs it, so it is never missing).
missing() {
	local kind name provider rest
	while read -r kind name provider rest; do
		[[ -z "$kind" || "$kind" == \#* || "$provider" == - ]] && continue
		have "$kind" "$name" || echo "$kind $name $provider"
	done <"$table"
}

as_root() {
	if [[ $(id -u) -eq 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null; then
		sudo "$@"
	else
		echo "ensure_deps: not root and no sudo: cannot run $*" >&2
		return 1
	fi
}

gaps=$(missing)
if [[ -n "$gaps" && "${1:-}" != --check ]]; then
	debs=$(echo "$gaps" | awk '$3 !~ /^pypi:/ {print $3}' | sort -u | tr '\n' ' ')
	wheels=$(echo "$gaps" | awk '$3 ~ /^pypi:/ {sub(/^pypi:/, "", $3); print $3}' | sort -u | tr '\n' ' ')
	# pip itself comes from Debian
	[[ -n "$wheels" ]] && ! $python -m pip --version >/dev/null 2>&1 && debs+=" python3-pip"
	if [[ -n "${debs// /}" ]]; then
		echo "ensure_deps: installing $debs"
		export DEBIAN_FRONTEND=noninteractive
		as_root apt-get update -qq
		# no Recommends: every part we need is named in the table
		as_root apt-get install -y -qq --no-install-recommends $debs >/dev/null
	fi
	if [[ -n "${wheels// /}" ]]; then
		echo "ensure_deps: installing from PyPI into $pydeps: $wheels"
		mkdir -p "$pydeps"
		$python -m pip install -q --disable-pip-version-check --target "$pydeps" $wheels
	fi
	gaps=$(missing)
fi
if [[ -n "$gaps" ]]; then
	echo "$gaps" | while read -r kind name provider; do
		echo "ensure_deps: still missing: $kind $name (from $provider)" >&2
	done
	exit 1
fi
exit 0
