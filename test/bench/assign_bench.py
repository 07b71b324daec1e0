#!/usr/bin/python3
"""kmeans_assign, row by row, against kmeans_labels on the same rows and model.

For each shape (n rows of d values, a model of k clusters): a table of
random rows and a model stored in a table (as users keep them), then

  labels   SELECT count(*) FROM kmeans_labels((SELECT m FROM bench_model), 'bench', 'v', 'id')
  assign   SELECT sum(kmeans_assign((SELECT m FROM bench_model), v)) FROM bench
  update   UPDATE bench SET cluster = kmeans_assign((SELECT m FROM bench_model), v)

(the last is the README's pattern; it also pays for writing every row).
Each is run --repeat times, alternating, and the best time is kept; the
table gives the time per row and the ratio to kmeans_labels.  Both decide
with the same exact rule, and the run checks that they agree on every row.

Connects with the usual PG* variables (make bench-assign starts a throwaway
server); creates and drops the database kmeans_assign_bench.
"""
import argparse
import io
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from pgtest import connect, create_database  # noqa: E402

DEFAULT_SHAPES = "200000x8x8,200000x64x256,20000x128x1024"


def load(cur, n, d, k, rng):
    cur.execute("DROP TABLE IF EXISTS bench, bench_model")
    cur.execute("CREATE TABLE bench (id bigint PRIMARY KEY, v real[], cluster int)")
    x = rng.normal(0, 1, size=(n, d)).astype(np.float32) + rng.integers(0, 8, size=(n, 1))
    buf = io.StringIO()
    for i, row in enumerate(x):
        buf.write(f"{i}\t{{{','.join(repr(float(v)) for v in row)}}}\t\\N\n")
    buf.seek(0)
    cur.copy_expert("COPY bench (id, v, cluster) FROM STDIN", buf)
    cur.execute("VACUUM ANALYZE bench")
    cur.execute("""CREATE TABLE bench_model AS
                   SELECT kmeans_fit('bench', 'v', %s, max_iter => 3, seed => 1, init => 'random') AS m""",
                (k,))
    cur.execute("SELECT pg_column_size(m) FROM bench_model")
    return cur.fetchone()[0]


def timed(cur, sql):
    t0 = time.perf_counter()
    cur.execute(sql)
    if cur.description is not None:
        cur.fetchall()
    return time.perf_counter() - t0


QUERIES = {
    "labels": "SELECT count(*) FROM kmeans_labels((SELECT m FROM bench_model), 'bench', 'v', 'id')",
    "assign": "SELECT sum(kmeans_assign((SELECT m FROM bench_model), v)) FROM bench",
    "update": "UPDATE bench SET cluster = kmeans_assign((SELECT m FROM bench_model), v)",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="NxDxK,...")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    admin = create_database("kmeans_assign_bench")
    conn = connect("kmeans_assign_bench")
    cur = conn.cursor()
    cur.execute("CREATE EXTENSION kmeans_gpu")
    cur.execute("SET kmeans_gpu.engine = cpu")
    cur.execute("SHOW kmeans_gpu.cpu_threads")
    threads = cur.fetchone()[0]
    rng = np.random.default_rng(7)

    print(f"CPU engine, kmeans_gpu.cpu_threads = {threads} (0: one per processor, {os.cpu_count()} here); "
          f"best of {args.repeat}")
    print(f"{'rows x d, k':>22} {'model':>9} | {'labels/row':>10} {'assign/row':>10} {'ratio':>6} | "
          f"{'update/row':>10} {'ratio':>6} | agree")
    for shape in args.shapes.split(","):
        n, d, k = (int(v) for v in shape.split("x"))
        size = load(cur, n, d, k, rng)
        best = {name: float("inf") for name in QUERIES}
        for _ in range(args.repeat):
            for name, sql in QUERIES.items():
                best[name] = min(best[name], timed(cur, sql))
        cur.execute("""SELECT count(*) FROM bench b
                       JOIN kmeans_labels((SELECT m FROM bench_model), 'bench', 'v', 'id') l ON l.id = b.id
                       WHERE l.cluster_id IS DISTINCT FROM b.cluster""")
        disagree = cur.fetchone()[0]
        per = {name: best[name] / n * 1e6 for name in best}
        print(f"{f'{n} x {d}, {k}':>22} {size / 1024:>7.0f}KB | {per['labels']:>8.2f}us {per['assign']:>8.2f}us "
              f"{per['assign'] / per['labels']:>6.2f} | {per['update']:>8.2f}us {per['update'] / per['labels']:>6.2f} | "
              f"{'yes' if disagree == 0 else f'{disagree} rows differ'}")
        sys.stdout.flush()
    conn.close()
    admin.cursor().execute("DROP DATABASE kmeans_assign_bench")
    return 0


if __name__ == "__main__":
    sys.exit(main())
