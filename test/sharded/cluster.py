"""Throwaway PostgreSQL servers on this machine for the many-server tests and
the benchmark: a coordinator, shard primaries and, for each, a streaming
standby made with pg_basebackup -R, all on unix sockets in one temporary
directory, on fixed ports.

    c = Cluster(base_port=56311, shards=3, standbys=True)
    c.start()                 # initdb, start, basebackup, start standbys
    c.coordinator.sql("...")  # psycopg2 helpers
    c.stop()

When run as root the servers run as the unprivileged user postgres, as
test/scripts/pg_server.sh does.  The PostgreSQL binaries are pg_config's
(source the private copy's environment first).
"""
import os
import shutil
import subprocess
import tempfile
import time

import psycopg2

BINDIR = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True,
                        check=True).stdout.strip()


def as_server_user(cmd):
    """cmd run as the user the servers run as."""
    if os.getuid() == 0:
        return ["runuser", "-u", "postgres", "--"] + cmd
    return cmd


def run(cmd, **kw):
    return subprocess.run(as_server_user(cmd), check=True, capture_output=True, text=True, **kw)


class Server:
    """One server: its directory holds the data directory, the socket and the log."""

    def __init__(self, base, name, port, settings):
        self.name = name
        self.port = port
        self.dir = os.path.join(base, name)
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "server.log")
        self.settings = settings

    def conninfo(self, dbname="postgres", user="postgres"):
        return f"host={self.dir} port={self.port} dbname={dbname} user={user}"

    def initdb(self):
        os.makedirs(self.dir)
        if os.getuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        run([os.path.join(BINDIR, "initdb"), "-D", self.data, "-A", "trust", "-U", "postgres"])
        self.write_conf(os.path.join(self.data, "postgresql.conf"))

    def write_conf(self, path):
        lines = [f"port = {self.port}", f"unix_socket_directories = '{self.dir}'",
                 "listen_addresses = ''"]
        lines += [f"{k} = {v}" for k, v in self.settings.items()]
        with open(path, "a") as f:
            f.write("\n".join(lines) + "\n")

    def start(self):
        run([os.path.join(BINDIR, "pg_ctl"), "-D", self.data, "-l", self.log, "-w", "start"])

    def stop(self, mode="fast"):
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            subprocess.run(as_server_user([os.path.join(BINDIR, "pg_ctl"), "-D", self.data,
                                           "-m", mode, "-w", "stop"]),
                           capture_output=True, text=True)

    def running(self):
        return os.path.exists(os.path.join(self.data, "postmaster.pid"))

    def connect(self, dbname="postgres", user="postgres", async_=False):
        conn = psycopg2.connect(host=self.dir, port=self.port, dbname=dbname, user=user,
                                async_=1 if async_ else 0)
        if not async_:
            conn.autocommit = True
        return conn

    def sql(self, query, params=None, dbname="postgres", user="postgres"):
        """Run query in a fresh connection; its rows (or None)."""
        conn = self.connect(dbname, user)
        try:
            cur = conn.cursor()
            cur.execute(query, params)
            return cur.fetchall() if cur.description else None
        finally:
            conn.close()


class Cluster:
    """A coordinator and shards (with standbys) on ports base_port, base_port
    + 1 ..; standbys on base_port + 11 ..."""

    def __init__(self, base_port, shards=3, standbys=True, settings=None, keep=False):
        self.base = tempfile.mkdtemp(prefix="kmeans_sharded.")
        os.chmod(self.base, 0o755)
        self.keep = keep
        conf = {"shared_buffers": "16MB", "max_connections": "40", "fsync": "off",
                "synchronous_commit": "off", "jit": "off", "max_worker_processes": "8",
                "max_parallel_workers": "2", "log_min_messages": "warning",
                "log_line_prefix": "'%m [%p] '", "wal_level": "replica",
                "max_wal_senders": "10", "wal_keep_size": "256MB"}
        conf.update(settings or {})
        self.coordinator = Server(self.base, "coordinator", base_port, conf)
        self.primaries = [Server(self.base, f"shard{i}", base_port + 1 + i, conf)
                          for i in range(shards)]
        self.standbys = [Server(self.base, f"standby{i}", base_port + 11 + i, conf)
                         for i in range(shards)] if standbys else []

    def servers(self):
        return [self.coordinator] + self.primaries + self.standbys

    def start(self):
        for s in [self.coordinator] + self.primaries:
            s.initdb()
            s.start()
        for p in self.primaries:
            for stmt in ("CREATE EXTENSION kmeans_gpu",):
                p.sql(stmt)
        for p, s in zip(self.primaries, self.standbys):
            self.make_standby(p, s)

    def make_standby(self, primary, standby):
        """standby: a streaming copy of primary (pg_basebackup -R), started."""
        os.makedirs(standby.dir)
        if os.getuid() == 0:
            shutil.chown(standby.dir, "postgres", "postgres")
        run([os.path.join(BINDIR, "pg_basebackup"), "-D", standby.data, "-R", "-X", "stream",
             "-c", "fast", "-h", primary.dir, "-p", str(primary.port), "-U", "postgres"])
        # the copy has the primary's settings: the standby's own port and socket win
        standby.write_conf(os.path.join(standby.data, "postgresql.auto.conf"))
        standby.start()

    def multihost(self, i, dbname="postgres"):
        """Shard i's conninfo: its primary, then its standby."""
        p = self.primaries[i]
        if not self.standbys:
            return p.conninfo(dbname).replace(" user=postgres", "")
        s = self.standbys[i]
        return f"host={p.dir},{s.dir} port={p.port},{s.port} dbname={dbname}"

    def wait_replay(self, i, timeout=30):
        """Wait until standby i has replayed what its primary wrote."""
        lsn = self.primaries[i].sql("SELECT pg_current_wal_lsn()")[0][0]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = self.standbys[i].sql(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,))[0][0]
            if done:
                return True
            time.sleep(0.05)
        return False

    def stop(self):
        for s in self.servers():
            s.stop("immediate")
        if not self.keep:
            shutil.rmtree(self.base, ignore_errors=True)
