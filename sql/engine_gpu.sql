-- kmeans_gpu.engine = gpu: on a machine without a usable GPU, a clear error;
-- on a GPU machine the GPU runs (expected/engine_gpu_1.out).
CREATE TABLE eg_pts AS
SELECT ARRAY[i % 7, i % 11]::real[] AS v FROM generate_series(1, 500) i;
SET kmeans_gpu.engine = gpu;
SELECT (m).engine, (m).k FROM (SELECT kmeans(v, 3, '{"seed": 2}') AS m FROM eg_pts) q;
SELECT (m).engine, (m).k FROM (SELECT kmeans_fit('eg_pts', 'v', 3, seed => 2) AS m) q;
-- auto never fails for want of a GPU
SET kmeans_gpu.engine = auto;
SELECT (m).k, (m).engine IN ('cpu', 'gpu') AS ran
FROM (SELECT kmeans(v, 3, '{"seed": 2}') AS m FROM eg_pts) q;
RESET kmeans_gpu.engine;
DROP TABLE eg_pts;
