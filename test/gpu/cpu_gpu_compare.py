#!/usr/bin/env python3
"""CPU = GPU: the same rows and start centroids give the same model on both
engines, through SQL.

For each shape, kmeans_fit runs with engine => 'cpu' and engine => 'gpu'
from the same explicit start centroids (tol 0): sizes, iterations and
centroids must be identical, inertia within 1e-5 relative, and every row's
label from the fit (the window function kmeans_cluster, which returns the
fit's own labels) identical.  Also seeded k-means++ fits on the GPU are
reproducible, and kmeans_labels on the GPU equals kmeans_assign.  Prints TAP.
Runs on the GPU machine after `source .devbundle/up` (PG* variables set).
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from pgload import load, psql  # noqa: E402
from tap import Tap  # noqa: E402

DB = "kmeans_gpu_compare"
# a dry run on a machine without a GPU: KM_SECOND_ENGINE=cpu
SECOND = os.environ.get("KM_SECOND_ENGINE", "gpu")
tap = Tap()


def blobs(rng, n, d, k, spread=1.0, offset=0.0):
    centers = rng.uniform(-10, 10, size=(k, d)) + offset
    return (centers[rng.integers(0, k, size=n)] + rng.normal(0, spread, size=(n, d))).astype(np.float32)


def literal(rows):
    return "{" + ",".join("{" + ",".join(repr(float(x)) for x in r) + "}" for r in rows) + "}"


def compare(name, X, k, max_iter, rng, metric="l2", weights=None):
    n, d = X.shape
    load("cmp", X, DB, weights)
    init = X[rng.choice(n, size=k, replace=False)]
    args = (f"'cmp', 'v', {k}, max_iter => {max_iter}, tol => 0, metric => '{metric}', "
            f"init_centroids => '{literal(init)}'"
            + (", weight_column => 'w'" if weights is not None else ""))
    psql(f"DROP TABLE IF EXISTS fits; CREATE TABLE fits AS "
         f"SELECT kmeans_fit({args}, engine => 'cpu') AS c, kmeans_fit({args}, engine => '{SECOND}') AS g", DB)
    row = psql("SELECT (g).engine, (c).sizes = (g).sizes, (c).iterations, (g).iterations, "
               "(c).centroids = (g).centroids, abs((c).inertia - (g).inertia) / greatest((c).inertia, 1e-300), "
               "(SELECT max(abs(x - y)) FROM unnest((c).centroids, (g).centroids) u(x, y)) FROM fits", DB)
    engine, same_sizes, it_c, it_g, same_centroids, rel, maxdiff = row.split("|")
    shape = f"{name} (n={n}, d={d}, k={k}, {metric}{', weighted' if weights is not None else ''})"
    tap.check(engine == SECOND, f"{shape}: the {SECOND} engine ran", row)
    tap.check(same_sizes == "t" and it_c == it_g, f"{shape}: same sizes and iterations ({it_c})", row)
    tap.check(same_centroids == "t", f"{shape}: identical centroids", f"largest difference {maxdiff}")
    tap.check(float(rel) <= 1e-5, f"{shape}: inertia within 1e-5 (relative difference {float(rel):.1e})", row)

    # the fit's own labels, row by row: the window function returns them
    differ = "0"
    if weights is None:
        opts = {"max_iter": max_iter, "tol": 0, "metric": metric, "init_centroids": init.tolist()}
        c = json.dumps({**opts, "engine": "cpu"})
        g = json.dumps({**opts, "engine": SECOND})
        differ = psql(f"SELECT count(*) FROM (SELECT kmeans_cluster(v, {k}, '{c}') OVER () AS a, "
                      f"kmeans_cluster(v, {k}, '{g}') OVER () AS b FROM cmp) x WHERE a <> b", DB)
    tap.check(differ == "0", f"{shape}: every row has the same label on both engines", f"{differ} differ")


def main():
    psql(f"DROP DATABASE IF EXISTS {DB}")
    psql(f"CREATE DATABASE {DB}")
    psql("CREATE EXTENSION kmeans_gpu", DB)
    rng = np.random.default_rng(7)

    compare("blobs", blobs(rng, 100, 2, 2), 2, 50, rng)
    compare("blobs", blobs(rng, 5000, 3, 7), 7, 50, rng)
    compare("blobs", blobs(rng, 40000, 10, 50, 2.0), 50, 30, rng)
    compare("blobs", blobs(rng, 60000, 35, 100, 3.0), 100, 20, rng)
    compare("offset blobs", blobs(rng, 30000, 35, 20, 1.0, offset=500.0), 20, 20, rng)
    compare("blobs", blobs(rng, 60000, 256, 1024, 4.0), 1024, 5, rng)
    compare("blobs", blobs(rng, 20000, 256, 5000, 4.0), 5000, 3, rng)
    compare("pixels", rng.integers(0, 256, size=(20000, 784)).astype(np.float32), 10, 10, rng)
    # bytes in clusters, with close calls: the GPU's byte pass (kernels/assign/bytes.cu)
    compare("pixel blobs", np.clip(np.rint(blobs(rng, 30000, 200, 15, 6.0) * 8.0 + 128.0), 0, 255).astype(np.float32),
            15, 20, rng)
    compare("blobs", blobs(rng, 1000000, 8, 16, 2.0), 16, 10, rng)
    compare("blobs", blobs(rng, 50000, 35, 40, 2.0), 40, 20, rng, metric="cosine")
    compare("blobs", blobs(rng, 20000, 256, 300, 4.0), 300, 5, rng, metric="cosine")
    compare("blobs", blobs(rng, 30000, 16, 25, 2.0), 25, 20, rng,
            weights=rng.integers(0, 4, size=30000).astype(np.float64))

    # seeded k-means++ on the GPU: the same model twice; labels agree with assign
    load("pp", blobs(rng, 200000, 64, 40, 3.0), DB)
    same = psql(f"SELECT kmeans_fit('pp', 'v', 200, seed => 3, engine => '{SECOND}') = "
                f"kmeans_fit('pp', 'v', 200, seed => 3, engine => '{SECOND}')", DB)
    tap.check(same == "t", "k-means++ on the GPU: the same seed gives the same model")
    differ = psql(f"SET kmeans_gpu.engine = {SECOND}; "
                  "CREATE TEMP TABLE m AS SELECT kmeans_fit('pp', 'v', 200, seed => 3) AS m; "
                  "SELECT count(*) FROM m, kmeans_labels(m, 'pp', 'v', 'id') l JOIN pp USING (id) "
                  "WHERE l.cluster_id <> kmeans_assign(m, pp.v)", DB)
    tap.check(differ == "0", "kmeans_labels on the GPU agrees with kmeans_assign on every row",
              f"{differ} differ")

    psql(f"DROP DATABASE {DB}")
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
