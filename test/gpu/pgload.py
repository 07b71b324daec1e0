"""Load float32 rows into a PostgreSQL table fast, with no client library.

The GPU machine has numpy but no psycopg2: rows go to psql as COPY BINARY
(id bigint, v real[]), built with numpy in big-endian, so a million rows of
128 values load in seconds.
"""
import subprocess

import numpy as np

FLOAT4OID = 700


def psql(sql, db=None, check=True, stdin=None):
    """Run SQL through psql; return stdout (unaligned, tuples only).  The SQL
    goes on standard input (it may be long), except with stdin data for a
    COPY, when it must be a single command line."""
    cmd = ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"]
    if stdin is None:
        cmd += ["-f", "-"]
        stdin = sql.encode()
    else:
        cmd += ["-c", sql]
    if db:
        cmd += ["-d", db]
    r = subprocess.run(cmd, input=stdin, capture_output=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"psql failed: {sql[:200]}\n{r.stderr.decode()}")
    return r.stdout.decode().strip()


def load(table, X, db=None, weights=None):
    """CREATE TABLE table (id bigint, v real[] [, w float8]) with the rows of X."""
    n, d = X.shape
    cols = "id bigint, v real[]" + (", w float8" if weights is not None else "")
    psql(f"DROP TABLE IF EXISTS {table}; CREATE TABLE {table} ({cols})", db)
    fields = [("nf", ">i2"), ("idlen", ">i4"), ("id", ">i8"), ("vlen", ">i4"),
              ("ndim", ">i4"), ("hasnull", ">i4"), ("elem", ">i4"), ("dim", ">i4"), ("lb", ">i4"),
              ("vals", [("len", ">i4"), ("x", ">f4")], (d,))]
    if weights is not None:
        fields += [("wlen", ">i4"), ("w", ">f8")]
    rows = np.zeros(n, dtype=np.dtype(fields))
    rows["nf"] = 3 if weights is not None else 2
    rows["idlen"] = 8
    rows["id"] = np.arange(n)
    rows["vlen"] = 20 + 8 * d
    rows["ndim"] = 1
    rows["elem"] = FLOAT4OID
    rows["dim"] = d
    rows["lb"] = 1
    rows["vals"]["len"] = 4
    rows["vals"]["x"] = X
    if weights is not None:
        rows["wlen"] = 8
        rows["w"] = weights
    data = (b"PGCOPY\n\xff\r\n\x00" + np.array([0, 0], dtype=">i4").tobytes()
            + rows.tobytes() + np.array([-1], dtype=">i2").tobytes())
    cols = "id, v" + (", w" if weights is not None else "")
    psql(f"COPY {table} ({cols}) FROM STDIN (FORMAT binary)", db, stdin=data)
