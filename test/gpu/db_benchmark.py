#!/usr/bin/env python3
"""The in-database benchmark: kmeans_fit on a 1M-row table of real[128],
k = 1024, 20 iterations, against (the time of SELECT sum(cardinality(v)) in
one backend + 20 x a strict-fp32 cuBLAS SGEMM of the same product).  Target:
the fit takes at most 1.5 times that.  Prints the figures and the ratio, for
the fit reading the table with 8 parallel workers (kmeans_gpu.read_workers)
and, for reference, in one backend.

  test/gpu/db_benchmark.py SGEMM_TIME_BINARY
Runs on the GPU machine after `source .devbundle/up`.
"""
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pgload import load, psql  # noqa: E402

DB = "kmeans_gpu_bench"
N, D, K, ITERS = 1000000, 128, 1024, 20
WORKERS = 8
PAR = f"SET kmeans_gpu.read_workers = {WORKERS};\n"


def session(script):
    """Run a psql script in one session with \\timing; return the times (ms)."""
    r = subprocess.run(["psql", "-X", "-q", "-d", DB, "-f", "-"], input=script.encode(),
                       capture_output=True)
    out = r.stdout.decode() + r.stderr.decode()
    if r.returncode != 0 or "ERROR" in out:
        raise RuntimeError(out)
    return [float(t) for t in re.findall(r"Time: ([0-9.]+) ms", out)], out


def main():
    sgemm_bin = sys.argv[1]
    psql(f"DROP DATABASE IF EXISTS {DB}")
    psql(f"CREATE DATABASE {DB}")
    psql("CREATE EXTENSION kmeans_gpu", DB)
    # uniform rows: no cluster structure, so 20 iterations with tol 0 run to the end
    X = np.random.default_rng(11).uniform(0, 1, size=(N, D)).astype(np.float32)
    load("bench", X, DB)
    load("warm", X[:1000], DB)
    psql("VACUUM ANALYZE bench", DB)

    fit = (f"SELECT (m).iterations, (m).engine FROM (SELECT kmeans_fit('bench', 'v', {K}, "
           f"max_iter => {ITERS}, tol => 0, seed => 1, engine => 'gpu') AS m) q;\n")
    scan = "SELECT sum(cardinality(v)) FROM bench;"
    # a new backend: the first GPU call pays for starting CUDA
    cold, _ = session(PAR + "\\timing on\n" + fit)
    times, out = session("SET max_parallel_workers_per_gather = 0;\n"
                         "SELECT (kmeans_fit('warm', 'v', 4, engine => 'gpu')).engine;\n"
                         "\\timing on\n" + scan * 3 + "\\timing off\n"
                         "SET kmeans_gpu.read_workers = 0;\n\\timing on\n" + fit * 3 +
                         "\\timing off\n" + PAR + "\\timing on\n" + fit * 3 + "\\timing off\n"
                         f"SET max_parallel_workers_per_gather = {WORKERS};\n\\timing on\n" + scan * 3)
    if len(re.findall(rf"\b{ITERS}\s*\|\s*gpu", out)) != 6:
        raise RuntimeError("the fits did not run 20 iterations on the GPU:\n" + out)
    scan_ms = min(times[1:3])
    serial_fit_ms = min(times[3:6])  # read in one backend
    fit_ms = min(times[6:9])  # read by the workers
    pscan_ms = min(times[9:12])  # for reference: the same scan by the workers
    cpu, _ = session(PAR + "\\timing on\n" + fit.replace("'gpu'", "'cpu'"))
    # where the time goes: the engine's own clock, from kmeans_gpu.verbose
    _, verbose = session(PAR + "SELECT (kmeans_fit('warm', 'v', 4, engine => 'gpu')).engine;\n"
                         "SET kmeans_gpu.\"verbose\" = on;\n\\timing on\n" + fit)
    rnd, _ = session(PAR + "SELECT (kmeans_fit('warm', 'v', 4, engine => 'gpu')).engine;\n\\timing on\n"
                     + fit.replace("seed => 1", "seed => 1, init => 'random'"))

    sg = subprocess.run([sgemm_bin, str(N), str(D), str(K)], capture_output=True, check=True)
    sgemm_ms = float(sg.stdout.decode().split()[-1])
    floor_ms = scan_ms + ITERS * sgemm_ms
    print(f"table: {N} rows of real[{D}]; kmeans_fit k = {K}, {ITERS} iterations, k-means++ seeding")
    print(f"SELECT sum(cardinality(v)) in one backend: {scan_ms:9.1f} ms")
    print(f"  the same with {WORKERS} parallel workers:       {pscan_ms:9.1f} ms")
    print(f"cuBLAS strict-fp32 SGEMM ({N}x{D})x({D}x{K}):  {sgemm_ms:9.3f} ms")
    print(f"kmeans_fit on the GPU (warm backend):     {fit_ms:9.1f} ms   read by {WORKERS} workers")
    print(f"  the same, read in one backend:          {serial_fit_ms:9.1f} ms   "
          f"ratio {serial_fit_ms / floor_ms:.3f}")
    print(f"kmeans_fit on the GPU (new backend):      {cold[0]:9.1f} ms")
    print(f"kmeans_fit on the GPU, init 'random':     {rnd[0]:9.1f} ms")
    print(f"kmeans_fit on the CPU engine:             {cpu[0]:9.1f} ms")
    print(f"(every fit but the second reads with kmeans_gpu.read_workers = {WORKERS})")
    print("the GPU fit as kmeans_gpu.verbose reports it (engine clock, from the engine call):")
    for line in verbose.splitlines():
        if ("INFO:" in line or "DETAIL:" in line) and ("iteration" not in line or re.search(r"iteration (1|2|20):", line)):
            print("  " + line.strip())
    print(f"ratio fit / (scan + {ITERS} x SGEMM) = {fit_ms:.1f} / {floor_ms:.1f} = "
          f"{fit_ms / floor_ms:.3f} (target <= 1.5)")
    psql(f"DROP DATABASE {DB}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
