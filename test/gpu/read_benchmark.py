#!/usr/bin/env python3
"""kmeans_fit's read of a table, in one backend and by parallel workers.

A table of 1,000,000 rows of real[128]; kmeans_fit with k = 2, one
iteration and random initialisation, so that the read is most of the call.
For the CPU engine and for the GPU engine, with kmeans_gpu.read_workers 0
(one backend) and 8, twice each in one session, it prints the read time
that kmeans_gpu.verbose reports (and its parallel detail) and the ratio of
the best parallel read to the best one-backend read.  (The GPU fit's
workers write into a ring of shared memory that the backend drains to the
GPU during the query: README, kmeans_fit, "Reading with parallel workers".)

  test/gpu/read_benchmark.py
Runs on the GPU machine after `source .devbundle/up`.
"""
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pgload import load, psql  # noqa: E402

DB = "kmeans_gpu_read"
N, D, WORKERS = 1000000, 128, 8


def main():
    psql(f"DROP DATABASE IF EXISTS {DB}")
    psql(f"CREATE DATABASE {DB}")
    psql("CREATE EXTENSION kmeans_gpu", DB)
    X = np.random.default_rng(11).uniform(0, 1, size=(N, D)).astype(np.float32)
    load("bench", X, DB)
    psql("VACUUM ANALYZE bench", DB)
    fit = ("SELECT (kmeans_fit('bench', 'v', 2, max_iter => 1, init => 'random', "
           "engine => '%s')).n_rows;\n")
    script = ("SET kmeans_gpu.\"verbose\" = on;\nSET max_parallel_workers_per_gather = 0;\n"
              "SELECT sum(cardinality(v)) FROM bench;\n")
    runs = []
    for engine in ("cpu", "gpu"):
        for workers in (0, WORKERS, 0, WORKERS):
            script += f"SET kmeans_gpu.read_workers = {workers};\n" + fit % engine
            runs.append((engine, workers))
    r = subprocess.run(["psql", "-X", "-q", "-d", DB, "-f", "-"], input=script.encode(),
                       capture_output=True)
    out = r.stdout.decode() + r.stderr.decode()
    if r.returncode != 0 or "ERROR" in out:
        raise RuntimeError(out)
    lines = out.splitlines()
    reads = [i for i, line in enumerate(lines) if "kmeans_fit: read" in line]
    if len(reads) != len(runs):
        raise RuntimeError("expected one read line a fit:\n" + out)
    best = {}
    print(f"kmeans_fit's read of {N} rows of real[{D}] (kmeans_gpu.verbose), seconds")
    for (engine, workers), i in zip(runs, reads):
        seconds = float(re.search(r" in ([0-9.]+) s", lines[i]).group(1))
        best[(engine, workers)] = min(seconds, best.get((engine, workers), seconds))
        detail = lines[i + 1].strip() if i + 1 < len(lines) and "DETAIL" in lines[i + 1] else ""
        print(f"  engine {engine}, read_workers {workers}: {seconds:.3f}  {detail}")
    for engine in ("cpu", "gpu"):
        print(f"engine {engine}: best with {WORKERS} workers / best in one backend = "
              f"{best[(engine, WORKERS)]:.3f} / {best[(engine, 0)]:.3f} = "
              f"{best[(engine, WORKERS)] / best[(engine, 0)]:.2f}")
    psql(f"DROP DATABASE {DB}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
