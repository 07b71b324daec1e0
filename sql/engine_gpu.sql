-- kmeans_gpu.engine = gpu: on a machine without a usable GPU, a clear error;
-- on a GPU machine the GPU runs (expected/engine_gpu_1.out).
CREATE TABLE eg_pts AS
SELECT i AS id, ARRAY[i % 7, i % 11]::real[] AS v FROM generate_series(1, 500) i;
-- Devices this backend sees: none here (engine_gpu.out), some on a GPU
-- machine (engine_gpu_1.out), where every row must describe a real device.
-- Each expected file pairs its answer with what engine 'gpu' does below, so
-- a machine that lists a GPU but cannot use it (or the reverse) matches
-- neither file.
SELECT count(*) > 0 AS has_gpu,
       bool_and(device >= 0 AND name <> '' AND total_memory > 0
                AND free_memory BETWEEN 0 AND total_memory
                AND compute_capability ~ '^[0-9]+\.[0-9]+$' AND multiprocessors > 0) AS described
FROM kmeans_gpu_devices();
-- (the reason, in the error's DETAIL, depends on the machine: hidden here)
\set VERBOSITY terse
SET kmeans_gpu.engine = gpu;
SELECT (m).engine, (m).k FROM (SELECT kmeans(v, 3, '{"seed": 2}') AS m FROM eg_pts) q;
SELECT (m).engine, (m).k FROM (SELECT kmeans_fit('eg_pts', 'v', 3, seed => 2) AS m) q;
SELECT * FROM kmeans_labels((SELECT kmeans(v, 3, '{"seed": 2, "engine": "cpu"}') FROM eg_pts),
                            'eg_pts', 'v', 'id') LIMIT 1;
RESET kmeans_gpu.engine;
-- the option overrides the setting
SELECT (m).engine FROM (SELECT kmeans(v, 3, '{"seed": 2, "engine": "gpu"}') AS m FROM eg_pts) q;
SELECT (m).engine FROM (SELECT kmeans_fit('eg_pts', 'v', 3, seed => 2, engine => 'gpu') AS m) q;
SELECT count(DISTINCT c) FROM (SELECT kmeans_cluster(v, 3, '{"engine": "gpu"}') OVER () AS c FROM eg_pts) q;
SET kmeans_gpu.engine = gpu;
SELECT (m).engine FROM (SELECT kmeans(v, 3, '{"seed": 2, "engine": "cpu"}') AS m FROM eg_pts) q;
\set VERBOSITY default
SELECT kmeans(v, 3, '{"engine": "tpu"}') FROM eg_pts;
-- auto never fails for want of a GPU
SET kmeans_gpu.engine = auto;
SELECT (m).k, (m).engine IN ('cpu', 'gpu') AS ran
FROM (SELECT kmeans(v, 3, '{"seed": 2}') AS m FROM eg_pts) q;
RESET kmeans_gpu.engine;
DROP TABLE eg_pts;
