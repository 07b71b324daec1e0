#!/usr/bin/env python3
"""Cancel a long GPU fit: statement_timeout during loading (in one backend,
and by parallel workers through the ring drained to the GPU), during k-means++
and during the iterations, and pg_cancel_backend from another session.  Each
must end within 1 second of the cancel, leave the session usable, and give
the GPU memory back (the device's free memory returns to where it was).
Prints TAP.  Runs on the GPU machine after `source .devbundle/up`.
"""
import os
import re
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from pgload import load, psql  # noqa: E402
from tap import Tap  # noqa: E402

DB = "kmeans_gpu_cancel"
tap = Tap()


WARM = """
SELECT (kmeans_fit('small', 'v', 2, seed => 1, engine => 'gpu')).engine AS warm_engine \\gset
SELECT free_memory AS before FROM kmeans_gpu_devices() WHERE device = 0 \\gset
"""


def timed_cancel(name, statement, timeout_ms):
    """One session: warm the GPU, note free memory, run statement under
    statement_timeout, then check the session and the memory."""
    script = WARM + f"""
SET statement_timeout = '{timeout_ms}ms';
SELECT clock_timestamp() AS t0 \\gset
{statement};
SELECT extract(epoch FROM clock_timestamp() - :'t0'::timestamptz) AS took \\gset
RESET statement_timeout;
SELECT 41 + 1 AS usable \\gset
SELECT free_memory AS after FROM kmeans_gpu_devices() WHERE device = 0 \\gset
\\echo RESULT :warm_engine :took :usable :before :after
"""
    r = subprocess.run(["psql", "-X", "-q", "-d", DB, "-f", "-"], input=script.encode(),
                       capture_output=True)
    out = r.stdout.decode() + r.stderr.decode()
    m = re.search(r"RESULT (\S+) (\S+) (\S+) (\S+) (\S+)", out)
    if not m:
        tap.check(False, f"{name}: the script ran", out)
        return
    engine, took, usable, before, after = m.groups()
    late = float(took) - timeout_ms / 1000.0
    canceled = "canceling statement due to statement timeout" in out
    tap.check(engine == "gpu" and canceled, f"{name}: statement_timeout canceled the GPU fit", out)
    tap.check(late < 1.0, f"{name}: it ended {late:.3f} s after the timeout", out)
    tap.check(usable == "42", f"{name}: the session is usable afterwards", out)
    diff = int(before) - int(after)
    tap.check(abs(diff) < 16 << 20, f"{name}: GPU free memory back where it was ({diff} bytes apart)", out)


def backend_cancel():
    """pg_cancel_backend from a second session, once the fit reports its
    second iteration (kmeans_gpu.verbose), so that the cancel lands in the
    iterations whatever their speed."""
    long_fit = ("SET application_name = 'kmeans_cancel_me'; SET kmeans_gpu.\"verbose\" = on; "
                "SELECT kmeans_fit('huge', 'v', 4096, init => 'random', seed => 1, "
                "max_iter => 1000000, tol => 0, engine => 'gpu');")
    p = subprocess.Popen(["psql", "-X", "-q", "-d", DB, "-c", long_fit],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen = []
    for line in p.stdout:
        seen.append(line.decode())
        if "iteration 2:" in seen[-1]:
            break
    t_cancel = time.time()
    n = psql("SELECT count(*) FROM (SELECT pg_cancel_backend(pid) FROM pg_stat_activity "
             "WHERE application_name = 'kmeans_cancel_me') x", DB)
    out = "".join(seen) + p.communicate(timeout=60)[0].decode()
    late = time.time() - t_cancel
    tap.check(n == "1" and "canceling statement due to user request" in out,
              "pg_cancel_backend canceled a GPU fit in its iterations", out[-2000:])
    tap.check(late < 1.0, f"pg_cancel_backend: it ended {late:.3f} s after the cancel", out[-2000:])


def main():
    psql(f"DROP DATABASE IF EXISTS {DB}")
    psql(f"CREATE DATABASE {DB}")
    psql("CREATE EXTENSION kmeans_gpu", DB)
    rng = np.random.default_rng(3)
    load("small", rng.normal(size=(1000, 8)).astype(np.float32), DB)
    load("big", rng.normal(size=(1000000, 64)).astype(np.float32), DB)
    load("huge", rng.normal(size=(4000000, 128)).astype(np.float32), DB)

    timed_cancel("while loading", "SELECT kmeans_fit('huge', 'v', 16, engine => 'gpu')", 1000)
    # the read by 4 workers into the ring that a thread of the backend drains to
    # the GPU (parallel_read.c): 2 GB take about half a second
    timed_cancel("while the workers fill the ring",
                 "SET kmeans_gpu.read_workers = 4; SELECT kmeans_fit('huge', 'v', 16, engine => 'gpu')", 150)
    timed_cancel("during k-means++",
                 "SELECT kmeans_fit('big', 'v', 60000, seed => 1, engine => 'gpu')", 1500)
    # 4M rows, k = 4096 from random rows: about 4 TFLOP an iteration and
    # hundreds of iterations to settle, so at 6 s the fit is past its load
    # and still iterating (1M x 64 with k = 2048 settled in 2.1 s once the
    # tensor-core screen made iterations twice as fast)
    timed_cancel("during the iterations",
                 "SELECT kmeans_fit('huge', 'v', 4096, init => 'random', seed => 1, "
                 "max_iter => 1000000, tol => 0, engine => 'gpu')", 6000)
    backend_cancel()

    psql(f"DROP DATABASE {DB}")
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
