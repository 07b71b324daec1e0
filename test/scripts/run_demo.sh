#!/usr/bin/env bash
# make demo: install what is missing, build, install, start a throwaway
# server and cluster Fashion-MNIST in it (test/demo/fashion_mnist.py).
set -uo pipefail
cd "$(dirname "$0")/../.."
test/scripts/ensure_deps.sh || exit 1
make -s -j"$(nproc)" || exit 1
if [[ $(id -u) -eq 0 ]]; then
	make -s install >/dev/null || exit 1
else
	sudo make -s install >/dev/null || exit 1
fi
tmp=$(mktemp -d /tmp/kmeans_gpu_demo.XXXXXX)
chmod 755 "$tmp"
eval "$(test/scripts/pg_server.sh start "$tmp/pg" 55433)" || exit 1
trap 'test/scripts/pg_server.sh stop "$tmp/pg"' EXIT
/usr/bin/python3 test/demo/fashion_mnist.py "$PWD/fashion_mnist_centroids.png"
