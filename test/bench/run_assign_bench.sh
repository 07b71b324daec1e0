#!/usr/bin/env bash
# make bench-assign: kmeans_assign row by row against kmeans_labels
# (test/bench/assign_bench.py), in a throwaway server; arguments go to the
# script, e.g. --shapes 20000x128x1024 --repeat 5.
set -uo pipefail
cd "$(dirname "$0")/../.."
test/scripts/ensure_deps.sh || exit 1
make -s -j"$(nproc)" || exit 1
if [[ $(id -u) -eq 0 ]]; then
	make -s install >/dev/null || exit 1
else
	sudo make -s install >/dev/null || exit 1
fi
tmp=$(mktemp -d /tmp/kmeans_gpu_bench.XXXXXX)
chmod 755 "$tmp"
eval "$(test/scripts/pg_server.sh start "$tmp/pg" "${KM_TEST_PORT:-55434}")" || exit 1
trap 'test/scripts/pg_server.sh stop "$tmp/pg"; rm -rf "$tmp"' EXIT
/usr/bin/python3 test/bench/assign_bench.py "$@"
