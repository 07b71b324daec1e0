#!/usr/bin/python3
"""Many servers: one model over a table sharded across PostgreSQL servers.

Starts a coordinator, three shard primaries and a streaming standby for each
(pg_basebackup -R), on this machine, on unix sockets, ports KM_SHARDED_PORT
(56311) to KM_SHARDED_PORT + 13, with small shared_buffers; loads blobs split
by id over the shards (the coordinator holds the union), and checks:

 1. kmeans_fit_sharded equals kmeans_fit over the union, bit for bit: from
    the same explicit start, with k-means|| and a seed (n_init 2), with
    random init, cosine and weights, on a table and column whose names hold
    quotes, semicolons and spaces;
 2. a primary stopped (pg_ctl stop -m immediate) while the fit iterates (on
    its verbose progress line): the fit goes on through the standby and
    equals (1);
 3. a shard with no standby stopped mid-fit: a clean ERROR naming it, within
    retries x back-off;
 4. a standby whose replay is paused before the change the fit loads: the
    fingerprint check refuses it, naming the shard;
 5. cancel and statement_timeout on the coordinator: no shard query
    survives (pg_stat_activity on every shard), the shards hold no rows;
    rows a coordinator left loaded are freed after
    kmeans_gpu.shard_idle_timeout;
 6. kmeans_partial / kmeans_merge / kmeans_step through postgres_fdw: a
    partitioned table of foreign tables, partitionwise aggregate, async
    foreign scans, the aggregate inside each remote query in EXPLAIN
    VERBOSE, and the step equals the one over the union;
 7. bad input: unknown cluster, a shard without the table or the column,
    shards with different vector lengths, a shard over kmeans_gpu.max_memory,
    a hand-built kmeans_partial with inconsistent fields: clean ERRORs;
 8. an ordinary role: no SELECT on one shard's table is permission denied
    naming that shard; a row-level security policy on a shard hides its
    rows from the fit; the user mapping's password shows nowhere.
and that no server crashed.  Prints TAP.
"""
import os
import re
import select
import sys
import time

import psycopg2
import psycopg2.extensions

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from cluster import Cluster  # noqa: E402
from tap import Tap  # noqa: E402

PORT = int(os.environ.get("KM_SHARDED_PORT", "56311"))
NSHARDS = 3
ROWS = 60000
DIM = 8
PASSWORD = "secret-Kx7q-never-printed"
WEIRD_TABLE = 'we"ird; tab le'
WEIRD_COLUMN = 'v e;c"tor'

tap = Tap(diag_lines=40)
seen_text = []  # every message the suite saw, to look for the password

GENERATOR = """
CREATE FUNCTION blob_vec(id bigint, d int, nc int) RETURNS real[]
LANGUAGE sql IMMUTABLE AS $$
  SELECT array_agg(((abs(hashint8((id % nc) * 1000 + j)) % 2000) / 100.0
                    + (abs(hashint8(id * 1000 + j)) % 20001 - 10000) / 2500.0)::real ORDER BY j)
  FROM generate_series(1, d) j $$
"""


def q(ident):
    return '"' + ident.replace('"', '""') + '"'


def wait(conn, timeout=None):
    while True:
        state = conn.poll()
        if state == psycopg2.extensions.POLL_OK:
            return
        if state == psycopg2.extensions.POLL_READ:
            select.select([conn.fileno()], [], [], timeout)
        elif state == psycopg2.extensions.POLL_WRITE:
            select.select([], [conn.fileno()], [], timeout)


class Notices:
    """Every notice: psycopg2 trims a list (a subclass too) to its last 50."""

    def __init__(self):
        self.items = []

    def append(self, n):
        self.items.append(n)

    def clear(self):
        self.items = []

    def __iter__(self):
        return iter(self.items)


class Async:
    """An async coordinator session whose statements run in the background;
    its notices are read as they arrive."""

    def __init__(self, server, user="postgres"):
        self.conn = server.connect(user=user, async_=True)
        self.conn.notices = Notices()
        wait(self.conn)
        self.pid = self.run("SELECT pg_backend_pid()")[0][0]

    def run(self, sql, params=None):
        cur = self.conn.cursor()
        cur.execute(sql, params)
        wait(self.conn)
        return cur.fetchall() if cur.description else None

    def start(self, sql, params=None):
        self.conn.notices.clear()
        self.cur = self.conn.cursor()
        self.cur.execute(sql, params)
        self.seen = 0

    def poll(self):
        """(done, error) after one poll; notices land in self.conn.notices."""
        try:
            state = self.conn.poll()
        except psycopg2.Error as e:
            seen_text.append(str(e))
            return True, e
        if state == psycopg2.extensions.POLL_OK:
            return True, None
        select.select([self.conn.fileno()], [], [], 0.02)
        return False, None

    def until(self, pattern, timeout=60):
        """Poll until a notice matches pattern (True) or the statement ends (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done, err = self.poll()
            if any(re.search(pattern, n) for n in self.conn.notices):
                return True
            if done:
                self.result = (err, None if err else self.cur.fetchall())
                return False
        return False

    def finish(self, timeout=120):
        """(error, rows) of the statement started."""
        if getattr(self, "result", None) is not None:
            r, self.result = self.result, None
            return r
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done, err = self.poll()
            if done:
                seen_text.extend(self.conn.notices)
                return err, None if err else self.cur.fetchall()
        return RuntimeError("timed out"), None


def model_sql(server, sql, params=None, user="postgres"):
    rows = server.sql(sql, params, user=user)
    return rows[0][0]


def error_of(server, sql, params=None, user="postgres"):
    """(sqlstate, message) of a statement that must fail."""
    try:
        server.sql(sql, params, user=user)
    except psycopg2.Error as e:
        seen_text.append(str(e))
        return e.pgcode, str(e)
    return None, "no error"


def restart_primary(c, i):
    p = c.primaries[i]
    if not p.running():
        p.start()
    # the standby streams from it again before the next case
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if c.standbys[i].sql("SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'")[0][0]:
                return c.wait_replay(i)
        except psycopg2.Error:
            pass
        time.sleep(0.1)
    return False


def setup(c):
    co = c.coordinator
    for s in [co] + c.primaries:
        s.sql(GENERATOR)
        s.sql("CREATE ROLE alice LOGIN")
    co.sql("CREATE EXTENSION plproxy")
    co.sql("CREATE EXTENSION kmeans_gpu")
    co.sql("CREATE EXTENSION kmeans_gpu_sharded")
    co.sql("CREATE EXTENSION postgres_fdw")
    # the union on the coordinator; each shard its ids mod 3
    co.sql(f"CREATE TABLE pts AS SELECT id, blob_vec(id, {DIM}, 11) AS v, "
           f"(1 + id % 4) * 0.5 AS w FROM generate_series(1, {ROWS}) id")
    co.sql(f"CREATE TABLE {q(WEIRD_TABLE)} AS SELECT id, v AS {q(WEIRD_COLUMN)} FROM pts WHERE id % 5 <> 0")
    for i, p in enumerate(c.primaries):
        p.sql(f"CREATE TABLE pts AS SELECT id, blob_vec(id, {DIM}, 11) AS v, "
              f"(1 + id % 4) * 0.5 AS w FROM generate_series(1, {ROWS}) id WHERE id % {NSHARDS} = {i}")
        p.sql(f"CREATE TABLE {q(WEIRD_TABLE)} AS SELECT id, v AS {q(WEIRD_COLUMN)} FROM pts WHERE id % 5 <> 0")
        p.sql(f"CREATE VIEW pts_shard AS SELECT id, v, {i} AS shard FROM pts")
        p.sql("GRANT SELECT ON pts, pts_shard TO alice")
        if i < 2:
            p.sql("CREATE TABLE only_two AS SELECT id, v FROM pts")
        p.sql(f"CREATE TABLE dims AS SELECT id, {'v' if i < 2 else 'v || 1::real'} AS v FROM pts")
    # PL/Proxy clusters: with standbys, and without
    multi = ", ".join(f"p{i} '{c.multihost(i)}'" for i in range(NSHARDS))
    single = ", ".join(f"p{i} 'host={p.dir} port={p.port} dbname=postgres'"
                       for i, p in enumerate(c.primaries))
    co.sql(f"CREATE SERVER kmc FOREIGN DATA WRAPPER plproxy OPTIONS (modular_mapping '1', {multi})")
    co.sql(f"CREATE SERVER kmc_nostandby FOREIGN DATA WRAPPER plproxy "
           f"OPTIONS (modular_mapping '1', {single})")
    for srv in ("kmc", "kmc_nostandby"):
        co.sql(f"CREATE USER MAPPING FOR postgres SERVER {srv} OPTIONS (user 'postgres')")
        co.sql(f"CREATE USER MAPPING FOR alice SERVER {srv} OPTIONS (user 'alice', password '{PASSWORD}')")
        co.sql(f"GRANT USAGE ON FOREIGN SERVER {srv} TO alice")
    co.sql("GRANT SELECT ON pts TO alice")
    for i in range(NSHARDS):
        c.wait_replay(i)


def models_equal(co, a, b):
    return co.sql("SELECT %s::kmeans_model = %s::kmeans_model", (a, b))[0][0]


def case_equal(c):
    co = c.coordinator
    init = "{{0,0,0,0,0,0,0,0},{5,5,5,5,5,5,5,5},{10,10,10,10,10,10,10,10},{15,15,15,15,15,15,15,15},{20,0,20,0,20,0,20,0},{0,20,0,20,0,20,0,20}}"
    cases = [
        ("explicit start (l2)",
         "kmeans_fit_sharded('kmc', 'pts', 'v', 6, init_centroids => %(init)s, seed => 1, max_iter => 50)",
         "kmeans_fit('pts', 'v', 6, init_centroids => %(init)s, seed => 1, max_iter => 50)"),
        ("k-means|| with a seed, n_init 2",
         "kmeans_fit_sharded('kmc', 'pts', 'v', 11, seed => 7, n_init => 2)",
         "kmeans_fit('pts', 'v', 11, init => 'k-means||', seed => 7, n_init => 2)"),
        ("random init, cosine, weights",
         "kmeans_fit_sharded('kmc', 'pts', 'v', 9, init => 'random', seed => 3, metric => 'cosine', weight_column => 'w')",
         "kmeans_fit('pts', 'v', 9, init => 'random', seed => 3, metric => 'cosine', weight_column => 'w')"),
        ("names with quotes, semicolons and spaces",
         "kmeans_fit_sharded('kmc', %(st)s, %(sc)s, 5, seed => 2)",
         "kmeans_fit(%(st)s, %(sc)s, 5, init => 'k-means||', seed => 2)"),
        # the shards round the rows as they load them, as kmeans_fit does
        ("storage float16, k-means||",
         "kmeans_fit_sharded('kmc', 'pts', 'v', 11, seed => 7, storage => 'float16')",
         "kmeans_fit('pts', 'v', 11, init => 'k-means||', seed => 7, storage => 'float16')"),
        ("storage bfloat16, random init, weights",
         "kmeans_fit_sharded('kmc', 'pts', 'v', 9, init => 'random', seed => 3, weight_column => 'w', storage => 'bfloat16')",
         "kmeans_fit('pts', 'v', 9, init => 'random', seed => 3, weight_column => 'w', storage => 'bfloat16')"),
    ]
    params = {"init": init, "st": q(WEIRD_TABLE), "sc": WEIRD_COLUMN}
    refs = {}
    for name, sharded, single in cases:
        a = model_sql(co, f"SELECT {sharded}::text", params)
        b = model_sql(co, f"SELECT {single}::text", params)
        refs[name] = (a, b)
        tap.check(models_equal(co, a, b), f"1: sharded = kmeans_fit over the union, bit for bit: {name}",
                  f"sharded {a[:300]}\nsingle  {b[:300]}")
    # ... and the rounding did happen: the float16 model is not the float32 one
    half = refs["storage float16, k-means||"][0]
    full = refs["k-means|| with a seed, n_init 2"][0]
    tap.check(co.sql("SELECT (%s::kmeans_model).storage = 'float16' AND "
                     "(%s::kmeans_model).centroids <> (kmeans_fit_sharded('kmc', 'pts', 'v', 11, seed => 7)).centroids",
                     (half, half))[0][0],
              "1: the sharded float16 model says so, and differs from the float32 one", f"{half[:300]}\n{full[:300]}")
    return refs


SLOW_FIT = ("SELECT kmeans_fit_sharded(%s, 'pts', 'v', 40, init => 'random', seed => 5, "
            "tol => 0, max_iter => 150)::text")
SLOW_REF = ("SELECT kmeans_fit('pts', 'v', 40, init => 'random', seed => 5, tol => 0, "
            "max_iter => 150)::text")


def case_failover(c, ref):
    co = c.coordinator
    s = Async(co)
    s.run('SET kmeans_gpu."verbose" = on')
    t0 = time.monotonic()
    s.start(SLOW_FIT, ("kmc",))
    reached = s.until(r"iteration 3:")
    stopped_at = time.monotonic()
    c.primaries[1].stop("immediate")
    err, rows = s.finish()
    took = time.monotonic() - t0
    notices = "".join(s.conn.notices)
    tap.check(reached and err is None and rows is not None and models_equal(co, rows[0][0], ref),
              f"2: primary of shard 1 stopped at iteration 3: the fit went on through the standby "
              f"and equals kmeans_fit bit for bit ({took:.2f} s)",
              f"reached {reached}, error {err}\n{notices[-3000:]}")
    retry = re.search(r"failed \(try 1 of \d+\)", notices) is not None
    reload = re.search(r"iteration \d+: [^\n]*shard 1 [0-9.]+ ms[^\n]*; [1-9]\d* retr", notices) is not None
    tap.check(retry and reload, "2: verbose reports the retry and the shards' times of that iteration",
              "\n".join(n for n in s.conn.notices if "0 retries" not in n))
    s.conn.close()
    tap.check(restart_primary(c, 1), "2: primary 1 back, its standby streaming again")
    return stopped_at


def case_no_standby(c):
    co = c.coordinator
    s = Async(co)
    s.run('SET kmeans_gpu."verbose" = on')
    s.start(SLOW_FIT, ("kmc_nostandby",))
    reached = s.until(r"iteration 2:")
    stop = time.monotonic()
    c.primaries[2].stop("immediate")
    err, rows = s.finish()
    took = time.monotonic() - stop
    msg = str(err)
    retries = 3  # kmeans_gpu.shard_retries' default
    # back-off 0 + 0.25 + 0.5 s, then the shard is asked alone
    tap.check(reached and err is not None and err.pgcode == "08006" and
              re.search(r'shard 2 of cluster "kmc_nostandby"', msg) is not None and
              "also after 3 retries" in msg and "The last error:" in msg and took < 5.0,
              f"3: shard 2 without standby stopped mid-fit: ERROR naming it with the last libpq "
              f"message, {took:.2f} s after the stop (retries {retries}, back-off 0.75 s in all)",
              f"reached {reached}, {err and err.pgcode}: {msg}")
    s.conn.close()
    tap.check(restart_primary(c, 2), "3: primary 2 back, its standby streaming again")


def case_lagging(c):
    co = c.coordinator
    p0, s0 = c.primaries[0], c.standbys[0]
    s0.sql("SELECT pg_wal_replay_pause()")
    p0.sql("UPDATE pts SET v = blob_vec(id + 1, %s, 11) WHERE id = 3", (DIM,))
    s = Async(co)
    s.run('SET kmeans_gpu."verbose" = on')
    s.start(SLOW_FIT, ("kmc",))
    reached = s.until(r"iteration 2:")
    p0.stop("immediate")
    err, rows = s.finish()
    msg = str(err)
    tap.check(reached and err is not None and
              'shard 0 of cluster "kmc"' in msg and "rows differ from those the fit started with" in msg,
              "4: a standby that has not replayed the change the fit loaded is refused by the "
              "fingerprint check, naming the shard",
              f"reached {reached}, {err and err.pgcode}: {msg}")
    s.conn.close()
    s0.sql("SELECT pg_wal_replay_resume()")
    p0.start()
    p0.sql("UPDATE pts SET v = blob_vec(id, %s, 11) WHERE id = 3", (DIM,))
    tap.check(restart_primary(c, 0), "4: primary 0 back with its rows, its standby caught up")


def shards_idle(c, timeout=5.0):
    """No kmeans shard query left running on any shard (pg_stat_activity)."""
    deadline = time.monotonic() + timeout
    left = None
    while time.monotonic() < deadline:
        left = []
        for i, p in enumerate(c.primaries):
            left += [(i,) + r for r in p.sql(
                "SELECT pid, state, left(query, 60) FROM pg_stat_activity "
                "WHERE query LIKE '%kmeans_shard_%' AND state = 'active' AND pid <> pg_backend_pid()")]
        if not left:
            return True, []
        time.sleep(0.05)
    return False, left


LONG_FIT = ("SELECT kmeans_fit_sharded('kmc', 'pts', 'v', 300, init => 'random', seed => 5, "
            "tol => 0, max_iter => 100000)::text")


def case_cancel(c):
    co = c.coordinator
    s = Async(co)
    s.run('SET kmeans_gpu."verbose" = on')
    for how in ("pg_cancel_backend", "statement_timeout"):
        if how == "statement_timeout":
            s.run("SET statement_timeout = '1500ms'")
        started = time.monotonic()
        s.start(LONG_FIT)
        reached = s.until(r"iteration 2:")
        t0 = time.monotonic() if how == "pg_cancel_backend" else started + 1.5
        if how == "pg_cancel_backend":
            co.sql("SELECT pg_cancel_backend(%s)", (s.pid,))
        err, rows = s.finish()
        latency = time.monotonic() - t0
        idle, left = shards_idle(c)
        held = s.run("SELECT part, fit_id, bytes FROM kmeans_sharded_status('kmc', '{0,1,2}') "
                     "WHERE fit_id IS NOT NULL")
        s.run("RESET statement_timeout")
        tap.check(reached and err is not None and err.pgcode == "57014" and latency < 1.0,
                  f"5: {how} stops the fit, {latency:.3f} s after the cancel or the timeout",
                  f"reached {reached}, {err and err.pgcode}: {err}")
        tap.check(idle and held == [],
                  f"5: after {how}: no shard query left running, no shard holds the fit's rows",
                  f"running {left}, held {held}")
    s.conn.close()


def case_idle(c):
    """A shard's rows whose coordinator stopped calling are freed after
    kmeans_gpu.shard_idle_timeout: the idle connection holding them closes."""
    p = c.primaries[0]
    conn = p.connect()
    cur = conn.cursor()
    cur.execute("SELECT pg_backend_pid()")
    pid = cur.fetchone()[0]
    cur.execute("SET kmeans_gpu.shard_idle_timeout = '500ms'")
    cur.execute("SELECT n_rows FROM kmeans_shard_load('{0}', 77, 'pts', 'v', NULL, 'l2', 'float32', NULL)")
    loaded = cur.fetchone()[0]
    time.sleep(1.5)
    try:
        cur.execute("SELECT 1")
        closed = False
    except psycopg2.Error as e:
        seen_text.append(str(e))
        closed = True
    gone = p.sql("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))[0][0] == 0
    conn.close()
    tap.check(loaded > 0 and closed and gone,
              "5: rows a coordinator left loaded are freed after kmeans_gpu.shard_idle_timeout "
              "(the idle connection holding them is closed)", f"loaded {loaded}, closed {closed}, gone {gone}")
    # a connection holding no rows keeps its own idle_session_timeout
    conn = p.connect()
    cur = conn.cursor()
    cur.execute("SET kmeans_gpu.shard_idle_timeout = '500ms'")
    cur.execute("SELECT n_rows FROM kmeans_shard_load('{0}', 78, 'pts', 'v', NULL, 'l2', 'float32', NULL)")
    cur.execute("SELECT freed > 0 FROM kmeans_shard_end('{0}', 78)")
    freed = cur.fetchone()[0]
    cur.execute("SHOW idle_session_timeout")
    restored = cur.fetchone()[0]
    time.sleep(1.0)
    cur.execute("SELECT 1")
    conn.close()
    tap.check(freed and restored == "0", "5: once the rows are freed the connection's own idle_session_timeout is back",
              f"freed {freed}, idle_session_timeout {restored}")


def case_fdw(c):
    co = c.coordinator
    for i, p in enumerate(c.primaries):
        co.sql(f"CREATE SERVER fdw{i} FOREIGN DATA WRAPPER postgres_fdw OPTIONS "
               f"(host '{p.dir}', port '{p.port}', dbname 'postgres', async_capable 'true', "
               f"extensions 'kmeans_gpu', fetch_size '10')")
        co.sql(f"CREATE USER MAPPING FOR postgres SERVER fdw{i} OPTIONS (user 'postgres')")
    co.sql("CREATE TABLE pts_fdw (id int, v real[], shard int) PARTITION BY LIST (shard)")
    for i in range(NSHARDS):
        co.sql(f"CREATE FOREIGN TABLE pts_fdw{i} PARTITION OF pts_fdw FOR VALUES IN ({i}) "
               f"SERVER fdw{i} OPTIONS (table_name 'pts_shard')")
    start = model_sql(co, "SELECT kmeans_fit('pts', 'v', 6, init => 'random', seed => 11, max_iter => 2)::text")
    conn = co.connect()
    cur = conn.cursor()
    cur.execute("SET enable_partitionwise_aggregate = on")
    query = ("SELECT kmeans_merge(p) FROM (SELECT shard, kmeans_partial(v, %(m)s::kmeans_model) AS p "
             "FROM pts_fdw GROUP BY shard) s")
    cur.execute("EXPLAIN (VERBOSE, COSTS OFF) " + query, {"m": start})
    plan = "\n".join(r[0] for r in cur.fetchall())
    remote = re.findall(r"Remote SQL: SELECT shard, public\.kmeans_partial\(v, .*GROUP BY", plan)
    tap.check(len(remote) == NSHARDS and plan.count("Async Foreign Scan") == NSHARDS,
              "6: postgres_fdw: the aggregate runs inside each shard's remote query (EXPLAIN VERBOSE), "
              "partitions scanned asynchronously", plan[:3000])
    cur.execute(f"SELECT kmeans_step(%(m)s::kmeans_model, ({query}))::text", {"m": start})
    stepped = cur.fetchone()[0]
    cur.execute("SELECT kmeans_step(%(m)s::kmeans_model, (SELECT kmeans_partial(v, %(m)s::kmeans_model) "
                "FROM pts))::text", {"m": start})
    local = cur.fetchone()[0]
    cur.execute("SELECT (%(s)s::kmeans_model).centroids = (kmeans_fit('pts', 'v', 6, init => 'random', "
                "seed => 11, max_iter => 3)).centroids", {"s": stepped})
    as_fit = cur.fetchone()[0]
    conn.close()
    tap.check(models_equal(co, stepped, local) and as_fit,
              "6: stepped from the shards' partials = stepped from the union's = kmeans_fit's next "
              "iteration, bit for bit")


def case_bad_input(c):
    co = c.coordinator
    code, msg = error_of(co, "SELECT kmeans_fit_sharded('nosuch', 'pts', 'v', 3)")
    tap.check(code == "42704" and 'cluster "nosuch" does not exist' in msg,
              "7: unknown cluster: ERROR", msg)
    code, msg = error_of(co, "SELECT kmeans_fit_sharded('kmc', 'only_two', 'v', 3)")
    tap.check(code == "42P01" and 'shard 2 of cluster "kmc"' in msg and "does not exist" in msg,
              "7: a shard without the table: ERROR naming shard 2", msg)
    code, msg = error_of(co, "SELECT kmeans_fit_sharded('kmc', 'pts', 'nosuch', 3)")
    tap.check(code == "42703" and re.search(r'shard \d of cluster "kmc"', msg) and
              'column "nosuch"' in msg, "7: a missing column: ERROR naming the shard", msg)
    code, msg = error_of(co, "SELECT kmeans_fit_sharded('kmc', 'dims', 'v', 3)")
    tap.check(code == "22000" and "vectors have different lengths on the shards" in msg and
              "Shard 2" in msg, "7: shards with different vector lengths: ERROR naming the shard", msg)
    c.primaries[1].sql("ALTER ROLE alice SET kmeans_gpu.max_memory = '1MB'")
    code, msg = error_of(co, "SELECT kmeans_fit_sharded('kmc', 'pts', 'v', 3)", user="alice")
    c.primaries[1].sql("ALTER ROLE alice RESET kmeans_gpu.max_memory")
    tap.check(code == "54000" and 'shard 1 of cluster "kmc"' in msg and "max_memory" in msg,
              "7: a shard whose kmeans_gpu.max_memory the rows exceed: ERROR naming it", msg)
    code, msg = error_of(co, "SELECT kmeans_step(kmeans_fit('pts', 'v', 2, seed => 1, max_iter => 1), "
                             "%s::kmeans_partial)", (
                                 '{"version": 1, "k": 2, "dim": 8, "metric": "l2", "model": "0123456789abcdef", '
                                 '"rows": 5, "skipped": 0, "counts": [2, 2], "weights": [[2], [2]], '
                                 '"inertia": [[1], [1]], "sums": [[[1],[1],[1],[1],[1],[1],[1],[1]], '
                                 '[[1],[1],[1],[1],[1],[1],[1],[1]]], "far": []}',))
    tap.check(code == "22023" and "row counts add up to 4, not to the 5 rows" in msg,
              "7: a kmeans_partial built by hand with inconsistent counts: ERROR", msg)
    code, msg = error_of(co, "SELECT kmeans_fit_sharded('kmc', 'pts', 'v', 3, init => 'k-means++')")
    tap.check(code == "0A000" and "cannot run sharded" in msg, "7: init k-means++: ERROR", msg)


def case_security(c):
    co = c.coordinator
    init = "{{0,0,0,0,0,0,0,0},{10,10,10,10,10,10,10,10},{20,0,20,0,20,0,20,0}}"
    c.primaries[1].sql("REVOKE SELECT ON pts FROM alice")
    code, msg = error_of(co, "SELECT kmeans_fit_sharded('kmc', 'pts', 'v', 3)", user="alice")
    tap.check(code == "42501" and 'shard 1 of cluster "kmc"' in msg and "permission denied" in msg,
              "8: no SELECT on shard 1's table: permission denied naming shard 1", msg)
    c.primaries[1].sql("GRANT SELECT ON pts TO alice")
    superuser = co.sql("SELECT rolsuper FROM pg_roles WHERE rolname = 'alice'")[0][0] or any(
        p.sql("SELECT rolsuper FROM pg_roles WHERE rolname = 'alice'")[0][0] for p in c.primaries)
    p2 = c.primaries[2]
    p2.sql("ALTER TABLE pts ENABLE ROW LEVEL SECURITY")
    p2.sql("CREATE POLICY even ON pts FOR SELECT TO alice USING (id % 2 = 0)")
    co.sql("CREATE VIEW pts_alice AS SELECT * FROM pts WHERE NOT (id % 3 = 2 AND id % 2 = 1)")
    co.sql("GRANT SELECT ON pts_alice TO alice")
    s = Async(co, user="alice")
    s.run('SET kmeans_gpu."verbose" = on')
    s.start("SELECT kmeans_fit_sharded('kmc', 'pts', 'v', 3, init_centroids => %s, seed => 1)::text",
            (init,))
    err, rows = s.finish()
    ref = model_sql(co, "SELECT kmeans_fit('pts_alice', 'v', 3, init_centroids => %s, seed => 1)::text",
                    (init,), user="alice")
    visible = co.sql("SELECT count(*) FROM pts_alice")[0][0]
    n = co.sql("SELECT (%s::kmeans_model).n_rows", (rows[0][0],))[0][0] if rows else None
    tap.check(err is None and not superuser and n == visible and models_equal(co, rows[0][0], ref),
              f"8: as an ordinary role, row-level security on shard 2 hides its rows: {n} rows, "
              f"the model of the rows alice sees", f"{err}; n {n} visible {visible}")
    s.conn.close()
    p2.sql("DROP POLICY even ON pts")
    p2.sql("ALTER TABLE pts DISABLE ROW LEVEL SECURITY")
    texts = "\n".join(seen_text)
    tap.check(PASSWORD not in texts and len(seen_text) > 0,
              f"8: the user mapping's password is in none of the {len(seen_text)} messages the suite saw")


def check_logs(c):
    bad = []
    for s in c.servers():
        try:
            with open(s.log) as f:
                for line in f:
                    if re.search(r"terminated by signal|PANIC|TRAP:", line):
                        bad.append(f"{s.name}: {line.strip()}")
        except FileNotFoundError:
            pass
    tap.check(not bad, "no server crashed", "\n".join(bad))


def main():
    t0 = time.monotonic()
    c = Cluster(PORT, shards=NSHARDS, standbys=True,
                settings={"kmeans_gpu.cpu_threads": "1", "wal_retrieve_retry_interval": "200ms"},
                keep=os.environ.get("KM_SHARDED_KEEP") == "1")
    try:
        c.start()
        setup(c)
        tap.check(True, f"set up a coordinator, {NSHARDS} shards and their standbys "
                        f"({time.monotonic() - t0:.1f} s)")
        refs = case_equal(c)
        ref = model_sql(c.coordinator, SLOW_REF)
        case_failover(c, ref)
        case_no_standby(c)
        case_lagging(c)
        case_cancel(c)
        case_idle(c)
        case_fdw(c)
        case_bad_input(c)
        case_security(c)
        check_logs(c)
    except Exception as e:  # a suite that dies still reports it
        import traceback
        tap.check(False, f"the suite ran to its end ({type(e).__name__})", traceback.format_exc())
    finally:
        if os.environ.get("KM_SHARDED_KEEP") == "1":
            print(f"# servers left running in {c.base}")
        else:
            c.stop()
    print(f"# {time.monotonic() - t0:.1f} s")
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
