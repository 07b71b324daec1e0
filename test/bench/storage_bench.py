#!/usr/bin/python3
"""What half-precision storage does to a model: the same fit (same rows, k,
seed) with storage float32, float16 and bfloat16, and each model's inertia
recomputed in float64 on the float32 rows (each row to its nearest
centroid), against the float32 model's.

The model's own inertia is that of the rows as stored (rounded); what a
user cares about is how well the centroids fit the original rows, which is
what this prints.  A different storage can also lead the iterations to
another local optimum (another iteration count): the last column separates
the rounding itself, the float32 model's inertia on the rows rounded to the
storage against on the float32 rows.  Data: Fashion-MNIST (70,000 images, pixels 0..255, k =
10) and blobs (200,000 rows of 32 values around 100 centres, spread 2,
k = 100).  The rounding is the same on every engine, so the CPU engine
measures it (kmeans_gpu.engine = cpu).

Connects with the usual PG* variables (e.g. through
test/scripts/with_server.sh); creates and drops kmeans_storage_bench.
"""
import gzip
import io
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from pgtest import connect, create_database  # noqa: E402

DB = "kmeans_storage_bench"
FASHION = "/usr/share/datasets/fashion-mnist"


def fashion():
    parts = []
    for name in ("train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz"):
        with gzip.open(os.path.join(FASHION, name)) as f:
            parts.append(np.frombuffer(f.read(), dtype=np.uint8, offset=16))
    return np.concatenate(parts).reshape(-1, 784).astype(np.float32)


def blobs():
    rng = np.random.default_rng(3)
    centres = rng.uniform(-10, 10, size=(100, 32))
    return (centres[rng.integers(0, 100, size=200000)]
            + rng.normal(0, 2, size=(200000, 32))).astype(np.float32)


def load(cur, x):
    cur.execute("DROP TABLE IF EXISTS rows")
    cur.execute("CREATE TABLE rows (id bigint, v real[])")
    buf = io.StringIO()
    for i, row in enumerate(x):
        buf.write(f"{i}\t{{{','.join(repr(float(v)) for v in row)}}}\n")
    buf.seek(0)
    cur.copy_expert("COPY rows (id, v) FROM STDIN", buf)


def inertia(x, centroids):
    """Sum of squared distances to the nearest centroid, in float64."""
    x = x.astype(np.float64)
    c = np.asarray(centroids, dtype=np.float64)
    total = 0.0
    for s in range(0, len(x), 20000):
        part = x[s:s + 20000]
        d2 = (part * part).sum(1)[:, None] - 2 * part @ c.T + (c * c).sum(1)[None, :]
        total += np.maximum(d2.min(1), 0).sum()
    return total


def rounded(x, storage):
    """x rounded to the storage, to nearest even (as km_half.h rounds)."""
    if storage == "float16":
        return x.astype(np.float16).astype(np.float32)
    if storage == "bfloat16":
        b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
        return b.astype(np.uint32).view(np.float32)
    return x


def main():
    admin = create_database(DB)
    conn = connect(DB)
    cur = conn.cursor()
    cur.execute("CREATE EXTENSION kmeans_gpu")
    cur.execute("SET kmeans_gpu.engine = cpu")
    print(f"{'data':<32} {'storage':<9} {'inertia (float32 rows)':>24} {'vs float32':>12} "
          f"{'model inertia':>16} {'iterations':>10} {'rounding alone':>15}")
    for name, x, k in (("Fashion-MNIST 70000 x 784", fashion(), 10), ("blobs 200000 x 32", blobs(), 100)):
        load(cur, x)
        ref = None
        ref_centroids = None
        for storage in ("float32", "float16", "bfloat16"):
            cur.execute("SELECT (m).centroids, (m).inertia, (m).iterations FROM "
                        "(SELECT kmeans_fit('rows', 'v', %s, seed => 7, storage => %s) AS m) s", (k, storage))
            centroids, model_inertia, iterations = cur.fetchone()
            value = inertia(x, centroids)
            if ref is None:
                ref, ref_centroids = value, centroids
            alone = inertia(rounded(x, storage), ref_centroids) / ref - 1
            print(f"{name:<32} {storage:<9} {value:>24.10g} {value / ref - 1:>+12.3e} "
                  f"{model_inertia:>16.10g} {iterations:>10} {alone:>+15.3e}")
            sys.stdout.flush()
    conn.close()
    admin.cursor().execute(f"DROP DATABASE {DB}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
