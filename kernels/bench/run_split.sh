#!/bin/bash
# run_split.sh: the split fits of the CUDA engine on the GPU machine, in one
# run: bench_engine split (every split layout against the CPU engine, bit for
# bit) on one device and on every device count the machine has, then
# bench_engine splitbench (time per iteration against the one-GPU in-memory
# path, and out of core against the copy-rate floor) on 1, 2, 4, 8 GPUs as
# there are.  Binaries from `make -C kernels/bench ARCH=90 bin/bench_engine`
# (carried in kernels/bench/bin).  Logs in $OUT (or /tmp/split_out).
#
#   kernels/bench/run_split.sh
#   SPLIT_PATHS (default 15: all four) and SPLIT_SHAPES (default all) pass to
#   splitbench, MULTI_PATHS (default SPLIT_PATHS) to its runs on several
#   GPUs; SKIP="split" or SKIP="splitbench" leaves a part out; KMG_CUDA_SO
#   names the engine (default kernels/bench/bin/kmeans_gpu_cuda.so).
set -u
OUT=${OUT:-/tmp/split_out}
mkdir -p "$OUT"
B=kernels/bench/bin
SO=${KMG_CUDA_SO:-$B/kmeans_gpu_cuda.so}	# the engine bench_engine drives
SKIP=" ${SKIP:-} "
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
ngpu=$(nvidia-smi -L | grep -c '^GPU ')
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
nvidia-smi topo -m 2>/dev/null | head -$((ngpu + 1))
lists="0"
for c in 2 4 8; do
	[ "$ngpu" -ge "$c" ] && lists="$lists $(seq -s, 0 $((c - 1)))"
done
tag() { echo "$1" | tr , _; }
case "$SKIP" in *" split "*) ;; *)
	for l in $lists; do
		SPLIT_DEVICES=$l timeout 300 $B/bench_engine --so "$SO" split > "$OUT/split_$(tag $l).log" 2>&1
		echo "split, devices $l and $l,$l: rc=$?, $(grep -c '^ok' "$OUT/split_$(tag $l).log") ok, $(grep -c '^FAIL' "$OUT/split_$(tag $l).log") FAIL"
		grep -E '^FAIL' "$OUT/split_$(tag $l).log" | cut -c1-300 | head -10
	done ;;
esac
case "$SKIP" in *" splitbench "*) ;; *)
	for l in $lists; do
		paths=${SPLIT_PATHS:-15}
		[ "$l" != 0 ] && paths=${MULTI_PATHS:-$paths}
		SPLIT_DEVICES=$l SPLIT_PATHS=$paths BENCH_VERBOSE=1 timeout 400 $B/bench_engine --so "$SO" splitbench \
			> "$OUT/splitbench_$(tag $l).log" 2> "$OUT/splitbench_$(tag $l).trace"
		echo "splitbench, devices $l: rc=$?"
		sed -n '/^split fits/,/^$/p' "$OUT/splitbench_$(tag $l).log"
		grep 'split fit of' "$OUT/splitbench_$(tag $l).trace" | sed 's/^kmg: split fit of //'
	done ;;
esac
