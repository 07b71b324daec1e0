#!/usr/bin/env python3
"""k-means|| on the GPU engine, which does not implement it: the SQL layer
seeds each run on the host with the CPU engine's seed and fits it on the GPU
from those explicit centroids (src/engine_call.c, KmFitHostSeeded).

For each shape, kmeans_fit with init 'k-means||', a seed and n_init 2 runs
with engine 'cpu' and engine 'gpu': the GPU must have run, and sizes,
iterations and centroids must be identical (the GPU fits from the same
start centroids as the CPU, and CPU = GPU from explicit centroids), inertia
within 1e-5 relative; the same through the aggregate, whose rows are
streamed to the GPU as they come (they stay on the host too, for the seed),
and the window function.  Prints TAP.  Runs on the GPU machine after
`source .devbundle/up` (PG* variables set); KM_SECOND_ENGINE=cpu makes a dry
run on a machine without a GPU.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from pgload import load, psql  # noqa: E402
from tap import Tap  # noqa: E402

DB = "kmeans_gpu_kmpar"
SECOND = os.environ.get("KM_SECOND_ENGINE", "gpu")
tap = Tap()


def blobs(rng, n, d, k):
    centers = rng.uniform(-10, 10, size=(k, d))
    return (centers[rng.integers(0, k, size=n)] + rng.normal(0, 1.0, size=(n, d))).astype(np.float32)


def compare(name, X, k, metric="l2"):
    n, d = X.shape
    load("kp", X, DB)
    args = f"'kp', 'v', {k}, init => 'k-means||', seed => 17, n_init => 2, metric => '{metric}'"
    opts = f'{{"init": "k-means||", "seed": 17, "n_init": 2, "metric": "{metric}"}}'
    psql("DROP TABLE IF EXISTS fits; CREATE TABLE fits AS SELECT "
         f"kmeans_fit({args}, engine => 'cpu') AS c, kmeans_fit({args}, engine => '{SECOND}') AS g", DB)
    row = psql("SELECT (g).engine, (c).sizes = (g).sizes AND (c).iterations = (g).iterations, "
               "(c).centroids = (g).centroids, abs((c).inertia - (g).inertia) / greatest((c).inertia, 1e-300), "
               "(g).init = 'k-means||' FROM fits", DB)
    engine, same_shape, same_centroids, rel, init = row.split("|")
    shape = f"{name} (n={n}, d={d}, k={k}, {metric})"
    tap.check(engine == SECOND and init == "t", f"{shape}: kmeans_fit ran on the {SECOND} engine", row)
    tap.check(same_shape == "t" and same_centroids == "t" and float(rel) <= 1e-5,
              f"{shape}: the CPU engine's model: sizes, iterations, centroids, inertia within 1e-5", row)
    agg = psql(f"SET kmeans_gpu.engine = '{SECOND}'; "
               f"SELECT (m).engine, (m).centroids = (SELECT (c).centroids FROM fits) "
               f"FROM (SELECT kmeans(v, {k}, '{opts}') AS m FROM kp) s", DB)
    tap.check(agg.split("|") == [SECOND, "t"], f"{shape}: the aggregate on the {SECOND} engine, same centroids", agg)
    win = psql(f"SET kmeans_gpu.engine = '{SECOND}'; "
               f"SELECT count(DISTINCT c) FROM (SELECT kmeans_cluster(v, {k}, '{opts}') OVER () AS c FROM kp) s",
               DB)
    tap.check(win == str(k), f"{shape}: the window function on the {SECOND} engine labels {k} clusters", win)


def main():
    psql(f"DROP DATABASE IF EXISTS {DB}")
    psql(f"CREATE DATABASE {DB}")
    psql("CREATE EXTENSION kmeans_gpu", DB)
    rng = np.random.default_rng(5)
    compare("blobs", blobs(rng, 200000, 32, 64), 64)
    compare("blobs", blobs(rng, 50000, 128, 200), 200, metric="cosine")
    compare("blobs", blobs(rng, 20000, 8, 10), 10)
    psql(f"DROP DATABASE {DB}")
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
