#!/bin/bash
# run_engine.sh: every check and benchmark of the CUDA engine, on the GPU
# machine, from binaries built beforehand (make -C kernels/bench engine, and
# bench_assign_gemm for the filter's own harness).  Fashion-MNIST: copy
# /usr/share/datasets/fashion-mnist/{train,t10k}-images-idx3-ubyte.gz into
# kernels/bench/bin first (carried with the binaries; decompressed here).
# When kernels/bench/bin/pack.tar.xz exists (the binaries packed to fit the
# carry limit: make -C kernels/bench pack), it is unpacked first.
# Full logs go to $OUT (or /tmp/engine_out) and are tarred into
# $OUT/logs.tar.gz; a short summary is printed last, the per-iteration table
# at the very end.
#
#   kernels/bench/run_engine.sh [quick|full] [gemm]
#     quick: no compute-sanitizer, no ncu (default)
#     full:  with them, time permitting
#     gemm:  also bench_assign_gemm (validation of the production filter, k3 and k3s, and its timing)
#   SKIP="name ..." leaves steps out: kval seed seedbench bench cases api
#   kbench gemm sanitizer ncu ncuseed; SAN_CASES / RACE_CASES: the cases
#   memcheck / racecheck run (default "2 6 9 12 14 17 24" / "17")
#
# Everything is bounded by DEADLINE seconds (default 280), most important
# first: kernel validation, the seeding checks and time, the per-iteration
# table, the engine cases, the step times, then the rest.
set -u
OUT=${OUT:-/tmp/engine_out}
mkdir -p "$OUT/logs"
L="$OUT/logs"
B=kernels/bench/bin
S="$L/summary.txt"
: > "$S"
export OMP_NUM_THREADS=$(nproc)
DEADLINE=${DEADLINE:-280}
MODE=${1:-quick}
GEMM=${2:-}
SKIP=" ${SKIP:-} "
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
left() { echo $((DEADLINE - SECONDS)); }
cap() { local l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $((l > 5 ? l - 5 : 1)); }
want() { case "$SKIP" in *" $1 "*) return 1;; esac; [ $(left) -gt ${2:-10} ]; }

[ -f $B/pack.tar.xz ] && tar -C $B -xJf $B/pack.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used,memory.total \
	--format=csv >> "$S" 2>&1

# 1. every kernel family against its C reference
if want kval; then
	timeout $(cap 70) $B/bench_kernels validate > "$L/kernels_validate.log" 2>&1
	echo "bench_kernels validate rc=$?: $(grep -c '^ok' "$L/kernels_validate.log") ok, $(grep -c '^FAIL' "$L/kernels_validate.log") FAIL [$SECONDS s]" >> "$S"
	grep -E '^FAIL' "$L/kernels_validate.log" | head -12 >> "$S"
fi

# 2. k-means++ seeding: the seeds against the reference (bit for bit), twice,
#    with the filter off, on permuted rows, and their quality against the CPU
#    engine; then the seeding time at (1000000,128,1024)
if want seed; then
	timeout $(cap 80) $B/bench_engine seed > "$L/seed_checks.log" 2>&1
	echo "seed checks rc=$?: $(grep -c '^ok' "$L/seed_checks.log") ok, $(grep -c '^FAIL' "$L/seed_checks.log") FAIL [$SECONDS s]" >> "$S"
	grep -E '^FAIL' "$L/seed_checks.log" | cut -c1-300 | head -12 >> "$S"
	# the unit kernel's instances for 16 and 24 candidates, which a fit takes only from k ~ 60 000
	for lb in 16 24; do
		want seed 20 || break
		KMG_PP_LB=$lb timeout $(cap 40) $B/bench_engine seed > "$L/seed_checks_lb$lb.log" 2>&1
		echo "seed checks, KMG_PP_LB=$lb rc=$?: $(grep -c '^ok' "$L/seed_checks_lb$lb.log") ok, $(grep -c '^FAIL' "$L/seed_checks_lb$lb.log") FAIL [$SECONDS s]" >> "$S"
		grep -E '^FAIL' "$L/seed_checks_lb$lb.log" | cut -c1-300 | head -6 >> "$S"
	done
fi
if want seedbench; then
	timeout $(cap 60) $B/bench_engine seedbench > "$L/seed_bench.log" 2> "$L/seed_bench.trace"
	echo "seed bench rc=$? [$SECONDS s]" >> "$S"
	grep -E '^seeding|FAIL' "$L/seed_bench.log" >> "$S"
	grep -E 'k-means\+\+ run' "$L/seed_bench.trace" | head -4 >> "$S"
fi

# 3. per-iteration time against cuBLAS SGEMM (the targets); BENCH_VERBOSE=1 adds a
#    traced fit per shape (the engine's batches and iterations, KMG_VERBOSE), REPEAT=1
#    a second run of the table (the spread)
if want bench; then
	timeout $(cap 120) $B/bench_engine bench > "$L/engine_bench.log" 2> "$L/engine_bench.trace"
	echo "engine bench rc=$? [$SECONDS s]" >> "$S"
	if [ "${REPEAT:-0}" = 1 ]; then
		BENCH_VERBOSE= timeout $(cap 90) $B/bench_engine bench > "$L/engine_bench2.log" 2>&1
		echo "engine bench (repeat) rc=$? [$SECONDS s]" >> "$S"
	fi
fi

# 4. the engine against ref_kmeans.c and the CPU engine, one process per case, four at a time;
#    then again without bounds and with the running sums re-summed every iteration (the
#    paths a default fit takes only in some iterations), time permitting
cases_with() {
	local tag=$1 log="$L/engine_cases$1.log"
	shift
	N=$($B/bench_engine ncases 2>/dev/null || echo 0)
	mkdir -p "$L/cases"
	T3=$(cap 100)
	seq $((N - 1)) -1 0 | env "$@" xargs -P 4 -I{} sh -c "timeout $T3 $B/bench_engine case {} > $L/cases/{}.log 2>&1; rc=\$?; [ \$rc -ne 0 ] && echo \"case {} rc=\$rc\" >> $L/cases/{}.log"
	cat $(ls "$L"/cases/*.log | sort -V) > "$log" 2>/dev/null
	rm -rf "$L/cases"
	echo "engine cases${*:+ ($*)}: $(grep -c '^ok' "$log") ok, $(grep -c '^FAIL' "$log") FAIL, $(grep -c ' rc=' "$log") crashed/timed out (of $N) [$SECONDS s]" >> "$S"
	grep -E '^FAIL|rc=' "$log" | cut -c1-300 | head -20 >> "$S"
}
if want cases; then
	cases_with ""
	want cases 60 && cases_with _nobounds KMG_BOUNDS=0
	want cases 60 && cases_with _resum KMG_RUNNING_RESUM=always
fi

# 5. API checks (assign, map, streaming, determinism, cancellation, errors)
if want api; then
	timeout $(cap 60) $B/bench_engine api > "$L/engine_api.log" 2>&1
	echo "engine api checks rc=$?: $(grep -c '^ok' "$L/engine_api.log") ok, $(grep -c '^FAIL' "$L/engine_api.log") FAIL [$SECONDS s]" >> "$S"
	grep -E '^FAIL' "$L/engine_api.log" | head -10 >> "$S"
fi

# 6. step times of each kernel family
if want kbench 30; then
	timeout $(cap 60) $B/bench_kernels bench > "$L/kernels_bench.log" 2>&1
	echo "bench_kernels bench rc=$? [$SECONDS s]" >> "$S"
	grep -E 'fused iteration|run-2|filter path|^\(' "$L/kernels_bench.log" >> "$L/steps.txt"
fi

# 7. the filter GEMM's own harness: the production launchers (k3, k3s) against cuBLAS
if [ "$GEMM" = "gemm" ] && want gemm 40; then
	timeout $(cap 60) $B/bench_assign_gemm --versions k3,k3s --max-shapes 3 --reps 10 \
		> "$L/gemm.log" 2>&1
	echo "bench_assign_gemm rc=$?: $(grep -E '^validation:' "$L/gemm.log" | tail -1) [$SECONDS s]" >> "$S"
	grep -E 'FAIL' "$L/gemm.log" | head -10 >> "$S"
	sed -n '/== table/,$p' "$L/gemm.log" | grep -E 'k3|cuBLAS|shape' >> "$L/steps.txt"
fi

# 8. memory checker on small cases (narrow, wide, filter, re-seeding, k-means++), then ncu
if [ "$MODE" = "full" ] && command -v compute-sanitizer > /dev/null && want sanitizer 25; then
	: > "$L/sanitizer.log"
	for i in ${SAN_CASES:-2 6 9 12 14 17 24}; do
		[ $(left) -lt 25 ] && break
		timeout $(cap 40) compute-sanitizer --tool memcheck --error-exitcode 9 $B/bench_engine case $i \
			>> "$L/sanitizer.log" 2>&1
		echo "memcheck case $i rc=$?" >> "$L/sanitizer.log"
	done
	# racecheck: 17 (narrow, k 16) and 18 (narrow, k 2: the tensor-core sums' KB = 4 instance, whose
	# fragment rows past k once wrote into the next warp's cells)
	for i in ${RACE_CASES:-17 18}; do
		[ $(left) -lt 25 ] && break
		timeout $(cap 40) compute-sanitizer --tool racecheck --error-exitcode 9 $B/bench_engine case $i \
			>> "$L/sanitizer.log" 2>&1
		echo "racecheck case $i rc=$?" >> "$L/sanitizer.log"
	done
	grep -E 'rc=' "$L/sanitizer.log" | tr '\n' ' ' >> "$S"
	echo >> "$S"
fi
NCU_SECTIONS="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats --section SourceCounters"
if [ "$MODE" = "full" ] && command -v ncu > /dev/null && want ncuseed 40; then
	# the k-means++ unit: the first SELECT (dense, launch 1), filtered EVALs, a dense EVAL
	# the k-means++ unit: an early (dense) EVAL, then two late (filtered) ones
	timeout $(cap 40) ncu --clock-control none -k regex:kmg_pp_unit --launch-skip 5 --launch-count 1 \
		$NCU_SECTIONS $B/bench_engine seedprof > "$L/ncu_seed.log" 2>&1
	timeout $(cap 40) ncu --clock-control none -k regex:kmg_pp_unit --launch-skip 600 --launch-count 2 \
		$NCU_SECTIONS $B/bench_engine seedprof >> "$L/ncu_seed.log" 2>&1
	echo "ncu seeding rc=$? [$SECONDS s]" >> "$S"
fi
if [ "$MODE" = "full" ] && command -v ncu > /dev/null && want ncu 40; then
	timeout $(cap 90) ncu --clock-control none -k regex:'kmg_(narrow|wide|direct|piece|exact|classify|segment|finalize)' \
		$NCU_SECTIONS $B/bench_kernels profile > "$L/ncu.log" 2>&1
	echo "ncu rc=$? [$SECONDS s]" >> "$S"
fi

tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs 2>/dev/null && cp "$S" "$OUT/summary.txt" && rm -rf "$L"
cat "$OUT/summary.txt"
tar -xzOf "$OUT/logs.tar.gz" logs/steps.txt 2>/dev/null
echo
tar -xzOf "$OUT/logs.tar.gz" logs/engine_bench2.log 2>/dev/null | sed -n '/shape (n,d,k)/,/^$/p' | sed '1s/^/(repeat)\n/'
tar -xzOf "$OUT/logs.tar.gz" logs/engine_bench.log 2>/dev/null | sed -n '/shape (n,d,k)/,/^$/p'
