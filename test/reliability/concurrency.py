#!/usr/bin/python3
"""Concurrency: 16 pgbench sessions fit, label and assign on shared tables
while 4 more insert, update and delete rows of one of them.

Tables (database kmeans_conc):
  conc_static  4000 rows of 8 values, never modified during the run
  conc_live    3000 rows to start with, changed by the writers all along
  conc_serial, conc_serial_labels, conc_serial_window
               models, labels and window labels of conc_static computed
               serially before the run

The reader scripts (test/reliability/pgbench/*_static.sql, *_live.sql) each
record a verdict in conc_results: on conc_static every model, label and
window label must equal the serial one bit for bit (kmeans_fit l2 and cosine
with weights, the aggregate in a parallel plan, kmeans_labels, kmeans_assign,
the window function); on conc_live every result must be valid in its
REPEATABLE READ snapshot (n_rows and n_skipped count the rows, sizes count
kmeans_labels' labels, inertia is the sum of their squared distances, no NaN,
the aggregate equals kmeans_fit, kmeans_labels equals kmeans_assign).  No
client may abort.  Prints TAP.

  concurrency.py [--seconds 30] [--clients 16] [--writers 4] [--write-rate 200]

Connects with the PG* environment variables; creates and drops kmeans_conc.
"""
import argparse
import os
import re
import subprocess
import sys
import threading
import time


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from pgtest import connect, create_database  # noqa: E402
from tap import Tap  # noqa: E402

DB = "kmeans_conc"
SCRIPTS = os.path.join(HERE, "pgbench")

# reader scripts and their weights
READERS = [
    ("fit_static", 3), ("cosine_static", 1), ("agg_static", 2), ("labels_static", 2),
    ("assign_static", 2), ("window_static", 1),
    ("fit_live", 3), ("labels_live", 2), ("agg_live", 2),
]

SETUP = """
CREATE EXTENSION kmeans_gpu;
SELECT setseed(0.42);
CREATE TABLE conc_static (id int PRIMARY KEY, v real[], w float8);
INSERT INTO conc_static
SELECT i, (SELECT array_agg((random() * 6 + (i % 5) * 10 + j * 0)::real) FROM generate_series(1, 8) j),
       1 + (i % 4)
FROM generate_series(1, 4000) i;
UPDATE conc_static SET v = NULL WHERE id % 97 = 0;
CREATE TABLE conc_live (id serial PRIMARY KEY, v real[]);
INSERT INTO conc_live (v)
SELECT (SELECT array_agg((random() * 10 + (i % 3) * 20 + j * 0)::real) FROM generate_series(1, 8) j)
FROM generate_series(1, 3000) i;
ANALYZE conc_static;
ANALYZE conc_live;

CREATE TABLE conc_serial (name text PRIMARY KEY, m kmeans_model);
INSERT INTO conc_serial VALUES
  ('fit', kmeans_fit('conc_static', 'v', 6, seed => 5)),
  ('cosine', kmeans_fit('conc_static', 'v', 4, metric => 'cosine', seed => 9, n_init => 2,
                        weight_column => 'w'));
CREATE TABLE conc_serial_labels AS
SELECT * FROM kmeans_labels((SELECT m FROM conc_serial WHERE name = 'fit'), 'conc_static', 'v', 'id');
CREATE TABLE conc_serial_window AS
SELECT id, kmeans_cluster(v, 3, '{"seed": 2}') OVER (PARTITION BY id % 4) AS c FROM conc_static;
CREATE TABLE conc_results (n bigserial, kind text, ok bool, detail text,
                           at timestamptz DEFAULT clock_timestamp());
"""

tap = Tap(diag_lines=20)


def pgbench(args, out):
    bindir = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip()
    cmd = [os.path.join(bindir, "pgbench"), "-n"] + args + [DB]
    p = subprocess.run(cmd, capture_output=True, text=True)
    out["rc"] = p.returncode
    out["output"] = p.stdout + p.stderr


def processed(text):
    m = re.search(r"number of transactions actually processed: (\d+)", text)
    return int(m.group(1)) if m else 0


def failed(text):
    m = re.search(r"number of failed transactions: (\d+)", text)
    return int(m.group(1)) if m else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("KM_CONC_SECONDS", 30)))
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--write-rate", type=int, default=200, help="writer statements per second, in all")
    args = ap.parse_args()

    admin = create_database(DB)
    conn = connect(DB)
    cur = conn.cursor()
    cur.execute(SETUP)
    cur.execute("SELECT (SELECT kmeans(v, 6, '{\"seed\": 5}') FROM conc_static) = m FROM conc_serial "
                "WHERE name = 'fit'")
    tap.check(cur.fetchone()[0], "serially, the aggregate on conc_static equals kmeans_fit (agg_static compares with it)")
    cur.execute("SELECT count(*), count(v) FROM conc_live")
    live_before = cur.fetchone()

    reader_args = ["-c", str(args.clients), "-j", str(min(args.clients, 4)), "-T", str(args.seconds)]
    for name, weight in READERS:
        reader_args += ["-f", os.path.join(SCRIPTS, f"{name}.sql@{weight}")]
    writer_args = ["-c", str(args.writers), "-j", str(max(1, min(args.writers, 2))),
                   "-T", str(args.seconds), "-R", str(args.write_rate), "-f", os.path.join(SCRIPTS, "writer.sql")]
    readers, writers = {}, {}
    start = time.monotonic()
    tw = threading.Thread(target=pgbench, args=(writer_args, writers))
    tw.start()
    pgbench(reader_args, readers)
    tw.join()
    elapsed = time.monotonic() - start

    for label, out, n in (("readers", readers, args.clients), ("writers", writers, args.writers)):
        text = out.get("output", "")
        aborted = re.findall(r".*aborted.*|.*ERROR.*", text)
        ok = out.get("rc") == 0 and not aborted and failed(text) == 0 and processed(text) > 0
        tap.check(ok, f"pgbench {label}: {n} sessions ran {processed(text)} transactions in "
                      f"{args.seconds} s, {failed(text)} failed, none aborted",
                  text if not ok else None)

    cur.execute("SELECT count(*), count(v) FROM conc_live")
    live_after = cur.fetchone()
    cur.execute("SELECT count(*) FROM conc_live WHERE xmin::text::bigint > "
                "(SELECT min(xmin::text::bigint) FROM conc_results)")
    changed = cur.fetchone()[0]
    tap.check(changed > 0, f"the writers changed conc_live during the run ({changed} rows written; "
                           f"rows {live_before[0]} -> {live_after[0]}, with a vector {live_before[1]} -> {live_after[1]})")

    cur.execute("SELECT kind, count(*), count(*) FILTER (WHERE ok), "
                "(array_agg(detail ORDER BY n) FILTER (WHERE NOT ok OR ok IS NULL))[1:3] "
                "FROM conc_results GROUP BY kind")
    by_kind = {r[0]: r[1:] for r in cur.fetchall()}
    what = {
        "fit_static": "kmeans_fit on the unmodified table equals the serial model",
        "cosine_static": "kmeans_fit cosine, weights, n_init 2 on the unmodified table equals the serial model",
        "agg_static": "the parallel aggregate on the unmodified table equals the serial model",
        "labels_static": "kmeans_labels on the unmodified table equals the serial labels and distances",
        "assign_static": "kmeans_assign on the unmodified table equals the serial labels",
        "window_static": "the window function on the unmodified table equals the serial labels",
        "fit_live": "kmeans_fit on the changing table is valid in its snapshot "
                    "(counts, sizes = labels, inertia = sum of squared distances, no NaN)",
        "labels_live": "kmeans_labels on the changing table labels every row once, as kmeans_assign does",
        "agg_live": "on the changing table the aggregate equals kmeans_fit in the same snapshot",
    }
    for name, _ in READERS:
        total, good, bad = by_kind.get(name, (0, 0, None))
        tap.check(total > 0 and good == total, f"{name}: {good} of {total} valid: {what[name]}", bad)

    cur.execute("SELECT kmeans_fit('conc_static', 'v', 6, seed => 5) = m FROM conc_serial WHERE name = 'fit'")
    tap.check(cur.fetchone()[0], "after the run, a serial fit still equals the saved model")
    conn.close()
    admin.cursor().execute(f"DROP DATABASE {DB}")
    admin.close()
    status = tap.done()
    print(f"# concurrency: {args.clients} + {args.writers} sessions for {elapsed:.0f} s, "
          f"{sum(v[0] for v in by_kind.values())} verdicts")
    return status


if __name__ == "__main__":
    sys.exit(main())
