#!/usr/bin/env bash
# with_server.sh PORT COMMAND [ARG ...]: install what is missing, build,
# install, start a throwaway server on PORT (the PG* variables point at it),
# run COMMAND from the project root, stop the server.  make demo and make
# bench-assign run through it.
set -uo pipefail
cd "$(dirname "$0")/../.."
port=$1
shift
test/scripts/ensure_deps.sh || exit 1
export PYTHONPATH="$PWD/.deps/python${PYTHONPATH:+:$PYTHONPATH}"
make -s -j"$(nproc)" || exit 1
if [[ $(id -u) -eq 0 ]]; then
	make -s install >/dev/null || exit 1
else
	sudo make -s install >/dev/null || exit 1
fi
tmp=$(mktemp -d /tmp/kmeans_gpu_server.XXXXXX)
chmod 755 "$tmp"
eval "$(test/scripts/pg_server.sh start "$tmp/pg" "$port")" || exit 1
trap 'test/scripts/pg_server.sh stop "$tmp/pg"; rm -rf "$tmp"' EXIT
"$@"
