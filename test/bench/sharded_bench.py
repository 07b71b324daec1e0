#!/usr/bin/python3
"""Many servers, benchmarked: the time per Lloyd iteration of one server, of
three local shards (kmeans_fit_sharded over PL/Proxy) and of Apache Spark
MLlib's KMeans, on the same data from the same start centroids, and the time
a failover adds to a sharded fit.  Not a timed test: it prints the figures
and their ratios, measured in one run.

    sharded_bench.py [--rows 1000000] [--dim 64] [--k 256] [--iters 20]
                     [--port 56331] [--shard-threads 1] [--spark-deps DIR]
                     [--no-spark]

Data: --rows rows of --dim values, blobs around --k centres (numpy, seed 1),
float32; the start centroids are --k rows drawn with seed 2, the same for
all three.  PostgreSQL: a coordinator (the one server, which holds every row)
and three shards, each with a streaming standby, on this machine, ports
--port to --port + 13 (test/sharded/cluster.py); the shards hold the rows
with id % 3 = 0, 1, 2 and run --shard-threads CPU threads each, the one
server kmeans_gpu.cpu_threads = 0 (one per processor).  Per iteration: the
median of the gaps between kmeans_gpu.verbose's iteration lines, iterations
2 .. --iters, of each run; one-server and sharded runs alternate --repeats
(3) times, and the table gives the medians of those medians.  Failover: the same sharded fit with shard 1's primary stopped
(pg_ctl stop -m immediate) when iteration 5 is reported; the time it adds is
its total minus the total of the fit without the failover, set against shard
1's own reload (its load at the start of the fit, and the retried
iteration's time on it minus its time in an iteration without reload,
that is loading the standby's rows and labelling them for the previous
centroids).  Spark: pyspark from PyPI
(installed into --spark-deps, outside the repository, when missing),
local[2], org.apache.spark.mllib.clustering.KMeans (driven through py4j, so
that no row passes through Python) with initialModel = the start centroids,
epsilon 0, maxIterations --iters, on the cached RDD of the rows read from a
text file; per iteration: the time of run() / --iters.  Java 17 must be on
the PATH.
"""
import argparse
import os
import re
import select
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import psycopg2
import psycopg2.extensions

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "sharded"))
from cluster import Cluster  # noqa: E402

SPARK_VERSION = "4.0.1"


def make_data(rows, dim, k):
    rng = np.random.default_rng(1)
    centres = rng.normal(0.0, 6.0, size=(k, dim))
    which = rng.integers(0, k, size=rows)
    x = (centres[which] + rng.normal(0.0, 1.0, size=(rows, dim))).astype(np.float32)
    start = x[np.random.default_rng(2).choice(rows, size=k, replace=False)].copy()
    return x, start


def copy_binary(conn, table, ids, x):
    """COPY table (id, v) FROM STDIN in binary: int4 ids, real[] rows."""
    n, dim = x.shape
    rec = np.dtype([("nf", ">i2"), ("l1", ">i4"), ("id", ">i4"), ("l2", ">i4"),
                    ("ndim", ">i4"), ("hasnull", ">i4"), ("elem", ">u4"), ("dim", ">i4"),
                    ("lb", ">i4"), ("vals", [("len", ">i4"), ("v", ">f4")], (dim,))])
    buf = np.zeros(n, dtype=rec)
    buf["nf"] = 2
    buf["l1"] = 4
    buf["id"] = ids
    buf["l2"] = 20 + 8 * dim
    buf["ndim"] = 1
    buf["elem"] = 700  # float4
    buf["dim"] = dim
    buf["lb"] = 1
    buf["vals"]["len"] = 4
    buf["vals"]["v"] = x
    path = tempfile.mktemp(prefix="kmeans_bench.", suffix=".copy")
    with open(path, "wb") as f:
        f.write(b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big"))
        f.write(buf.tobytes())
        f.write((-1).to_bytes(2, "big", signed=True))
    cur = conn.cursor()
    cur.execute(f"CREATE TABLE {table} (id int, v real[])")
    with open(path, "rb") as f:
        cur.copy_expert(f"COPY {table} FROM STDIN (FORMAT binary)", f)
    cur.execute(f"ANALYZE {table}")
    os.unlink(path)


def wait(conn, timeout=None):
    while True:
        state = conn.poll()
        if state == psycopg2.extensions.POLL_OK:
            return
        if state == psycopg2.extensions.POLL_WRITE:
            select.select([], [conn.fileno()], [], timeout)
        else:
            select.select([conn.fileno()], [], [], timeout)


class Notices:
    def __init__(self):
        self.items = []

    def append(self, n):
        self.items.append((time.monotonic(), n))


def timed_fit(server, sql, kill=None):
    """Run sql with kmeans_gpu.verbose on; returns (total seconds, the
    verbose lines with their arrival times, the result).  kill: (pattern,
    callable) run once a notice matches pattern."""
    conn = server.connect(async_=True)
    conn.notices = Notices()
    wait(conn)
    cur = conn.cursor()
    cur.execute('SET kmeans_gpu."verbose" = on')
    wait(conn)
    start = time.monotonic()
    cur.execute(sql)
    killed = False
    while True:
        state = conn.poll()
        if kill is not None and not killed and any(re.search(kill[0], n) for _, n in conn.notices.items):
            kill[1]()
            killed = True
        if state == psycopg2.extensions.POLL_OK:
            break
        select.select([conn.fileno()], [], [], 0.01)
    total = time.monotonic() - start
    rows = cur.fetchall()
    conn.close()
    return total, conn.notices.items, rows[0][0]


def iteration_times(notices, prefix):
    """Seconds of each iteration from the verbose lines' elapsed times."""
    elapsed = {}
    for _, n in notices:
        m = re.search(prefix + r": run 1/1, iteration (\d+): .*?([0-9.]+) s", n)
        if m:
            elapsed[int(m.group(1))] = float(m.group(2))
    its = sorted(elapsed)
    return [elapsed[i] - elapsed[i - 1] for i in its if i - 1 in elapsed]


def spark_run(args, x, start, workdir):
    """Spark MLlib KMeans in a child process, all in the JVM (the rows read
    by MLUtils.loadVectors, cached, counted before the clock starts);
    returns (seconds for the iterations, the model's cost)."""
    deps = args.spark_deps
    env = dict(os.environ, PYTHONPATH=deps + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if subprocess.run([sys.executable, "-c", "import pyspark"], env=env,
                      capture_output=True).returncode != 0:
        print(f"# installing pyspark {SPARK_VERSION} into {deps}", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--target", deps, f"pyspark=={SPARK_VERSION}"], check=True)
    path = os.path.join(workdir, "rows.txt")
    with open(path, "wb") as f:
        # one "[v1,v2,...]" line per row: what mllib's Vectors.parse reads
        f.write(b"[")
        np.savetxt(f, x, fmt="%.9g", delimiter=",", newline="]\n[")
        f.truncate(f.tell() - 1)
    np.save(os.path.join(workdir, "start.npy"), start)
    child = f"""
import time, numpy as np
from pyspark import SparkConf, SparkContext
conf = (SparkConf().setMaster("local[2]").setAppName("kmeans_bench")
        .set("spark.driver.memory", "6g").set("spark.ui.enabled", "false"))
sc = SparkContext(conf=conf)
sc.setLogLevel("ERROR")
jvm, gw = sc._jvm, sc._gateway
vecs = jvm.org.apache.spark.mllib.util.MLUtils.loadVectors(sc._jsc.sc(), "{path}", 8)
vecs.cache()
n = vecs.count()
start = np.load("{workdir}/start.npy").astype(np.float64)
centres = gw.new_array(jvm.org.apache.spark.mllib.linalg.Vector, start.shape[0])
for j, c in enumerate(start):
    arr = gw.new_array(gw.jvm.double, start.shape[1])
    for i, v in enumerate(c):
        arr[i] = float(v)
    centres[j] = jvm.org.apache.spark.mllib.linalg.Vectors.dense(arr)
km = (jvm.org.apache.spark.mllib.clustering.KMeans().setK({args.k}).setMaxIterations({args.iters})
      .setEpsilon(0.0).setInitialModel(jvm.org.apache.spark.mllib.clustering.KMeansModel(centres)))
t0 = time.monotonic()
model = km.run(vecs)
took = time.monotonic() - t0
print("SPARK", n, took, model.computeCost(vecs), flush=True)
sc.stop()
"""
    out = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True)
    m = re.search(r"SPARK (\d+) ([0-9.e+-]+) ([0-9.e+-]+)", out.stdout)
    if m is None or int(m.group(1)) != x.shape[0]:
        print(out.stdout[-2000:], out.stderr[-4000:], file=sys.stderr)
        raise RuntimeError("Spark did not report")
    return float(m.group(2)), float(m.group(3))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1000000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--k", type=int, default=256)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--port", type=int, default=56331)
    ap.add_argument("--shard-threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--spark-deps", default=os.path.expanduser("~/.cache/kmeans_gpu/pyspark"))
    ap.add_argument("--no-spark", action="store_true")
    args = ap.parse_args()

    t0 = time.monotonic()
    x, start = make_data(args.rows, args.dim, args.k)
    ids = np.arange(1, args.rows + 1, dtype=np.int32)
    init = "{" + ",".join("{" + ",".join(repr(float(v)) for v in row) + "}" for row in start) + "}"
    c = Cluster(args.port, shards=3, standbys=True,
                settings={"shared_buffers": "64MB", "wal_retrieve_retry_interval": "200ms"},
                keep=os.environ.get("KM_BENCH_KEEP") == "1")
    results = {}
    try:
        c.start()
        co = c.coordinator
        for s in [co] + c.primaries:
            conn = s.connect()
            cur = conn.cursor()
            cur.execute("LOAD 'kmeans_gpu'")  # the setting exists once the library is loaded
            cur.execute(f"ALTER SYSTEM SET kmeans_gpu.cpu_threads = {0 if s is co else args.shard_threads}")
            cur.execute("SELECT pg_reload_conf()")
            conn.close()
        co.sql("CREATE EXTENSION plproxy")
        co.sql("CREATE EXTENSION kmeans_gpu")
        co.sql("CREATE EXTENSION kmeans_gpu_sharded")
        conn = co.connect()
        copy_binary(conn, "bench", ids, x)
        conn.close()
        for i, p in enumerate(c.primaries):
            conn = p.connect()
            part = ids % 3 == i
            copy_binary(conn, "bench", ids[part], x[part])
            conn.close()
        multi = ", ".join(f"p{i} '{c.multihost(i)}'" for i in range(3))
        co.sql(f"CREATE SERVER bench FOREIGN DATA WRAPPER plproxy OPTIONS (modular_mapping '1', {multi})")
        co.sql("CREATE USER MAPPING FOR postgres SERVER bench OPTIONS (user 'postgres')")
        for i in range(3):
            c.wait_replay(i, timeout=300)
        print(f"# data and servers ready in {time.monotonic() - t0:.1f} s", flush=True)

        args_sql = (f"{args.k}, init_centroids => '{init}', max_iter => {args.iters}, tol => 0, "
                    f"seed => 1")
        one_sql = f"SELECT kmeans_fit('bench', 'v', {args_sql})::text"
        sharded_sql = f"SELECT kmeans_fit_sharded('bench', 'bench', 'v', {args_sql})::text"
        timed_fit(co, one_sql)  # warm the caches
        timed_fit(co, sharded_sql)
        # one server and shards in turn, so that both see the same load on the machine
        one_meds, sh_meds, sh_totals = [], [], []
        for _ in range(args.repeats):
            one_total, one_notices, one_model = timed_fit(co, one_sql)
            one_meds.append(statistics.median(iteration_times(one_notices, "kmeans")))
            sh_total, sh_notices, sh_model = timed_fit(co, sharded_sql)
            sh_meds.append(statistics.median(iteration_times(sh_notices, "kmeans_fit_sharded")))
            sh_totals.append(sh_total)
        one_it = iteration_times(one_notices, "kmeans")
        same = co.sql("SELECT %s::kmeans_model = %s::kmeans_model", (one_model, sh_model))[0][0]
        inertia = co.sql("SELECT (%s::kmeans_model).inertia", (one_model,))[0][0]
        load = [float(v) for v in re.findall(r"shard \d ([0-9.]+) ms",
                                             next(n for _, n in sh_notices if "shards loaded" in n))]

        fo_total, fo_notices, fo_model = timed_fit(
            co, sharded_sql, kill=(r"iteration 5:", lambda: c.primaries[1].stop("immediate")))
        fo_same = co.sql("SELECT %s::kmeans_model = %s::kmeans_model", (one_model, fo_model))[0][0]
        retried = [n for _, n in fo_notices if re.search(r"iteration \d+: .*; [1-9]\d* retr", n)]
        retried_ms = float(re.search(r"shard 1 ([0-9.]+) ms", retried[0]).group(1)) if retried else float("nan")
        shard1_ms = statistics.median(
            float(m.group(1)) for _, n in sh_notices
            if re.search(r"iteration (\d+):", n) and not re.search(r"iteration 1:", n)
            for m in [re.search(r"shard 1 ([0-9.]+) ms", n)] if m)
        relocated = sum(1 for _, n in one_notices if "re-seeded empty clusters" in n)

        results = {"one": statistics.median(one_meds), "sharded": statistics.median(sh_meds),
                   "ratios": [b / a for a, b in zip(one_meds, sh_meds)],
                   "one_total": one_total, "sharded_total": statistics.median(sh_totals),
                   "fo_total": fo_total,
                   "load_ms": load[1], "retried_ms": retried_ms, "shard1_ms": shard1_ms}
        print(f"# one server: {args.rows} x {args.dim}, k {args.k}, {len(one_it) + 1} iterations "
              f"({relocated} of them re-seeded empty clusters), total {one_total:.3f} s, "
              f"inertia {inertia:.6g}")
        print(f"# sharded model = one-server model bit for bit: {same}; after the failover too: {fo_same}")
    finally:
        if os.environ.get("KM_BENCH_KEEP") == "1":
            print(f"# servers kept in {c.base}")
            for s in c.servers():
                s.stop()
        else:
            c.stop()

    if not args.no_spark:
        with tempfile.TemporaryDirectory(prefix="kmeans_bench_spark.") as workdir:
            took, cost = spark_run(args, x, start, workdir)
        results["spark"] = took / args.iters
        print(f"# Spark MLlib: {took:.3f} s for {args.iters} iterations, cost {cost:.6g}")

    r = results
    print()
    print("| | ms per iteration | ratio to one server |")
    print("|---|---|---|")
    print(f"| one server (kmeans_fit, {os.cpu_count()} threads) | {1e3 * r['one']:.1f} | 1.00 |")
    print(f"| three local shards (kmeans_fit_sharded, {args.shard_threads} thread each) | "
          f"{1e3 * r['sharded']:.1f} | {r['sharded'] / r['one']:.3f} |")
    if "spark" in r:
        print(f"| Apache Spark MLlib KMeans, local[2] | {1e3 * r['spark']:.1f} | {r['spark'] / r['one']:.2f} |")
    print()
    print(f"sharded overhead per iteration: {1e3 * (r['sharded'] - r['one']):.1f} ms "
          f"({r['sharded'] / r['one']:.3f} x one server; target <= 1.15); the {len(r['ratios'])} "
          f"runs in turn: " + ", ".join(f"{x:.3f}" for x in r["ratios"]))
    if "spark" in r:
        print(f"lead over Spark: {r['spark'] / r['one']:.1f} x (one server), "
              f"{r['spark'] / r['sharded']:.1f} x (sharded)")
    added = r["fo_total"] - r["sharded_total"]
    reload = (r["retried_ms"] - r["shard1_ms"]) / 1e3
    print(f"failover: the fit took {r['fo_total']:.3f} s against {r['sharded_total']:.3f} s: "
          f"{added:.3f} s more")
    print(f"shard 1's reload: its retried iteration on the standby took {r['retried_ms'] / 1e3:.3f} s "
          f"against {r['shard1_ms'] / 1e3:.3f} s for an iteration without reload: {reload:.3f} s "
          f"to load the standby's rows and label them for the previous centroids (the load alone, "
          f"at the start of the fit: {r['load_ms'] / 1e3:.3f} s)")
    print(f"failover added / one shard's reload = {added / reload:.2f} (target <= 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
