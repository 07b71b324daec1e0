#!/bin/bash
# run_peer.sh: peer_flash.py (our engine against flash-kmeans, same data, same
# process) on the GPU machine.  The peer's wheels travel in .whl (ignored by
# git through .git/info/exclude: python3 -m pip download --no-deps -d .whl
# flash-kmeans==0.3.1 tqdm) and are installed into /tmp/site, offline; the
# engine is kernels/bench/bin/kmeans_gpu_cuda.so (make -C kernels/bench ARCH=90
# bin/kmeans_gpu_cuda.so), or bin/pack.tar.xz unpacked when it is newer.
# Fashion-MNIST: copy {train,t10k}-images-idx3-ubyte.gz into kernels/bench/bin.
#
#   kernels/bench/run_peer.sh --fmnist kernels/bench/bin [--shapes A,C] [--quick]
#   (every argument goes to peer_flash.py; --help lists them)
set -u
cd "$(dirname "$0")/../.." || exit 2
B=kernels/bench/bin
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
[ -f $B/pack.tar.xz ] && [ $B/pack.tar.xz -nt $B/kmeans_gpu_cuda.so ] && tar -C $B -xJf $B/pack.tar.xz
if ls .whl/*.whl > /dev/null 2>&1; then
	python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
		--target /tmp/site .whl/*.whl 2>&1 | grep -v 'WARNING: Running pip as' || true
fi
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used,memory.total \
	--format=csv 2>&1
exec python3 kernels/bench/peer_flash.py "$@"
