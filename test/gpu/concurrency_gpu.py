#!/usr/bin/env python3
"""Many backends, one GPU: 16 sessions fit, label and aggregate at once on
shared tables with the engine forced to the GPU.  None may fail (a fit that
fits the device waits for memory rather than failing), and every fit equals
the one made alone beforehand.  Prints TAP.  Runs on the GPU machine after
`source .devbundle/up`.
"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from pgload import load, psql  # noqa: E402
from tap import Tap  # noqa: E402

DB = "kmeans_gpu_concurrency"
SESSIONS = 16
tap = Tap(diag_lines=20)


QUERIES = [
    "SELECT md5(kmeans_fit('shared', 'v', 256, seed => 5)::text)",
    "SELECT md5((SELECT kmeans(v, 256, '{\"seed\": 5}') FROM shared)::text)",
    "SELECT md5(string_agg(cluster_id::text, ',' ORDER BY id)) FROM kmeans_labels("
    "(SELECT m FROM model), 'shared', 'v', 'id')",
]


def main():
    psql(f"DROP DATABASE IF EXISTS {DB}")
    psql(f"CREATE DATABASE {DB}")
    psql("CREATE EXTENSION kmeans_gpu", DB)
    rng = np.random.default_rng(5)
    centers = rng.uniform(-10, 10, size=(300, 64))
    X = (centers[rng.integers(0, 300, size=400000)] + rng.normal(0, 2, size=(400000, 64))).astype(np.float32)
    load("shared", X, DB)
    env = dict(os.environ, PGOPTIONS="-c kmeans_gpu.engine=gpu")
    subprocess.run(["psql", "-X", "-q", "-d", DB, "-c",
                    "CREATE TABLE model AS SELECT kmeans_fit('shared', 'v', 256, seed => 5) AS m"],
                   env=env, check=True)
    alone = []
    for q in QUERIES:
        r = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-d", DB, "-c", q], env=env,
                           capture_output=True)
        alone.append(r.stdout.decode().strip())
    tap.check(alone[0] == alone[1] and all(alone), "fitted alone: kmeans_fit equals the aggregate", alone)

    procs = []
    for s in range(SESSIONS):
        q = QUERIES[s % len(QUERIES)]
        procs.append((s % len(QUERIES), subprocess.Popen(
            ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", DB, "-c", q],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
    outs = [(i, p.communicate(timeout=600)[0].decode().strip(), p.returncode) for i, p in procs]
    failed = [o for i, o, rc in outs if rc != 0]
    tap.check(not failed, f"{SESSIONS} concurrent sessions on one GPU: none failed", "\n".join(failed))
    wrong = [o for i, o, rc in outs if rc == 0 and o != alone[i]]
    tap.check(not wrong, "every concurrent result equals the one computed alone", "\n".join(wrong))
    engines = psql("SELECT (m).engine FROM model", DB)
    tap.check(engines == "gpu", "the fits ran on the GPU", engines)

    psql(f"DROP DATABASE {DB}")
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
