#!/usr/bin/python3
"""Memory bounds: a call that would need more than kmeans_gpu.max_memory
fails with SQLSTATE 54000 before taking the memory.

Each case runs on a fresh backend, after a small fit has loaded the module;
a thread samples the backend's private resident memory (RssAnon in
/proc/<pid>/status, which leaves out the shared buffers it reads) every half
millisecond while the statement runs.  Its peak may grow only by what the
case is allowed to hold before its check fails, plus 4 MB of slack:

  kmeans_fit, estimate   an ANALYZEd table of 51 MB of vectors, max_memory
                         16 MB: fails from the table's statistics after the
                         first row, so the peak stays where it was
  kmeans_fit, no stats   the same rows, never analyzed: fails as rows come
                         in, holding at most max_memory
  aggregate              51 MB of vectors from generate_series: at most
                         max_memory
  window function        the same through kmeans_cluster: at most max_memory
  engine share           5 MB of vectors whose fit (k = 20000) needs 20 MB
                         of engine memory: fails before the engine allocates,
                         holding the rows only
  kmeans_labels          a model of a million values per centroid, whose
                         batches would need 16 MB, max_memory 8 MB: fails
                         before the batch buffers, holding the model only

and afterwards the backend's memory contexts are back to their size before.
A last case without the limit shows that the measure sees the 51 MB.
Prints TAP.  Connects with the PG* environment variables; creates and drops
the database kmeans_membounds.  The backends must run on this machine.
"""
import os
import re
import sys
import threading
import time

import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from pgtest import connect, create_database, proc_status  # noqa: E402
from tap import Tap  # noqa: E402

DB = "kmeans_membounds"
MB = 1 << 20
SLACK = 4 * MB
CONTEXT_SLACK = 1 * MB

tap = Tap(diag_lines=20)


def session():
    conn = connect(DB)
    cur = conn.cursor()
    # work_mem small: the tuplestores of generate_series and the window
    # function hold little
    cur.execute("SET kmeans_gpu.engine = cpu; SET kmeans_gpu.cpu_threads = 2; SET work_mem = '1MB'")
    cur.execute("SELECT (kmeans_fit('mb_small', 'v', 2, seed => 1)).k")
    cur.execute("SELECT pg_backend_pid()")
    return conn, cur, cur.fetchone()[0]


class PeakWatch:
    """Samples a backend's private resident memory (RssAnon) every half
    millisecond while a statement runs; the shared buffers it maps are not
    private, so reading a table does not count."""

    def __init__(self, pid):
        self.pid = pid
        self.base = proc_status(pid)["RssAnon"]
        self.peak = self.base
        self.done = False
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        while not self.done:
            self.peak = max(self.peak, proc_status(self.pid)["RssAnon"])
            time.sleep(0.0005)

    def stop(self):
        self.done = True
        self.thread.join()
        self.peak = max(self.peak, proc_status(self.pid)["RssAnon"])
        return self.peak - self.base


def contexts(cur):
    cur.execute("SELECT sum(total_bytes)::bigint FROM pg_backend_memory_contexts")
    return cur.fetchone()[0]


def case(name, sql, max_memory, allowed, message, pretouch=None):
    """Run sql on a fresh backend with kmeans_gpu.max_memory; it must fail
    with 54000 and a message matching `message`, its peak grow by at most
    `allowed` + SLACK, and its memory contexts come back."""
    conn, cur, pid = session()
    if pretouch:
        cur.execute(pretouch)
    cur.execute("SET kmeans_gpu.max_memory = %s", (max_memory,))
    ctx_before = contexts(cur)
    error = None
    watch = PeakWatch(pid)
    try:
        cur.execute(sql)
    except psycopg2.Error as e:
        error = e
    grew = watch.stop()
    ctx_after = contexts(cur)
    conn.close()
    text = (error.pgerror or "").strip() if error else "no error"
    tap.check(error is not None and error.pgcode == "54000" and re.search(message, text) is not None,
              f"{name}: fails with 54000: {text.splitlines()[0] if text else ''}",
              f"{error.pgcode if error else None}: {text}")
    tap.check(grew <= allowed + SLACK,
              f"{name}: peak private memory grew by {grew / MB:.1f} MB (allowed {(allowed + SLACK) / MB:.0f} MB)")
    tap.check(abs(ctx_after - ctx_before) <= CONTEXT_SLACK,
              f"{name}: memory contexts back to their size ({ctx_before / MB:.1f} MB -> {ctx_after / MB:.1f} MB)")


def main():
    admin = create_database(DB)
    setup = connect(DB)
    setup.cursor().execute("""
        CREATE EXTENSION kmeans_gpu;
        CREATE TABLE mb_small AS SELECT ARRAY[i % 7, i % 5]::real[] AS v FROM generate_series(1, 100) i;
        -- 200,000 rows of 64 values: 51 MB of vectors
        CREATE TABLE mb_big AS SELECT array_fill((i % 1000)::real, ARRAY[64]) AS v
        FROM generate_series(1, 200000) i;
        CREATE TABLE mb_nostats (v real[]) WITH (autovacuum_enabled = off);
        INSERT INTO mb_nostats SELECT v FROM mb_big;
        ANALYZE mb_small;
        ANALYZE mb_big;
    """)
    setup.close()

    big_rows = "SELECT array_fill((i % 1000)::real, ARRAY[64]) AS v FROM generate_series(1, 200000) i"
    case("kmeans_fit, estimated from statistics",
         "SELECT kmeans_fit('mb_big', 'v', 8)", "16MB", 0,
         r"kmeans_fit \(estimated from the table's statistics\) needs .* more than kmeans_gpu.max_memory \(16 MB\)")
    case("kmeans_fit without statistics, as rows come in",
         "SELECT kmeans_fit('mb_nostats', 'v', 8)", "16MB", 16 * MB,
         r"needs .* more than kmeans_gpu.max_memory \(16 MB\)")
    case("the aggregate, as rows come in",
         f"SELECT kmeans(v, 8) FROM ({big_rows}) q", "16MB", 16 * MB,
         r"kmeans input needs .* more than kmeans_gpu.max_memory \(16 MB\)")
    case("the window function, as rows come in",
         f"SELECT kmeans_cluster(v, 8) OVER () FROM ({big_rows}) q", "16MB", 16 * MB,
         r"needs .* more than kmeans_gpu.max_memory \(16 MB\)")
    case("the engine's share (k = 20000)",
         "SELECT kmeans(array_fill(i::real, ARRAY[64]), 20000) FROM generate_series(1, 20000) i",
         "16MB", 20000 * 64 * 4,
         r"kmeans needs .* more than kmeans_gpu.max_memory \(16 MB\)")
    case("kmeans_labels with a model of a million values per centroid",
         "SELECT count(*) FROM kmeans_labels(ROW(1, 1000000, 'l2', array_fill(0::real, ARRAY[1, 1000000]), "
         "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model, "
         "'mb_labels', 'v', 'id')",
         "8MB", 2 * 4 * MB,
         r"kmeans_labels needs .* more than kmeans_gpu.max_memory \(8192 kB\)",
         pretouch="CREATE TEMP TABLE mb_labels AS SELECT 1 AS id, array_fill(1::real, ARRAY[1000000]) AS v")

    # the control: without the limit the same rows do show up in the peak
    conn, cur, pid = session()
    watch = PeakWatch(pid)
    cur.execute(f"SELECT (kmeans(v, 2, '{{\"max_iter\": 1, \"seed\": 1}}')).n_rows FROM ({big_rows}) q")
    grew = watch.stop()
    conn.close()
    tap.check(grew >= 40 * MB, f"without the limit the aggregate's peak grows by {grew / MB:.1f} MB "
                               f"(the measure sees the 51 MB of rows)")

    admin.cursor().execute(f"DROP DATABASE {DB}")
    admin.close()
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
