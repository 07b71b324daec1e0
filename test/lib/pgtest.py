"""PostgreSQL helpers for the Python test scripts that use psycopg2:
connections from the PG* environment variables, a scratch database, and a
backend's figures from /proc (the backends must run on this machine)."""
import os

import psycopg2


def connect(dbname):
    """A connection in autocommit mode."""
    conn = psycopg2.connect(dbname=dbname)
    conn.autocommit = True
    return conn


def create_database(name):
    """Create the database `name` afresh (dropping one left by an earlier
    run); return the connection to PGDATABASE (or postgres) that made it, for
    dropping it at the end."""
    admin = connect(os.environ.get("PGDATABASE", "postgres"))
    admin.cursor().execute(f"DROP DATABASE IF EXISTS {name}")
    admin.cursor().execute(f"CREATE DATABASE {name}")
    return admin


def proc_status(pid):
    """/proc/<pid>/status: every size (the fields in kB) in bytes, and
    Threads.  RssAnon is the private resident memory: VmRSS also counts the
    shared buffers the backend touched, which grow with every table it reads."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if value.strip().endswith("kB"):
                out[key] = int(value.split()[0]) * 1024
            elif key == "Threads":
                out[key] = int(value)
    return out
