-- The kmeans_gpu.* settings.  They exist once the module is loaded (by the
-- first kmeans call of a session, or LOAD, or session_preload_libraries).
SET extra_float_digits = 0;
LOAD 'kmeans_gpu';
-- memory figures below depend on the thread count
SET kmeans_gpu.cpu_threads = 2;

-- built-in defaults (boot_val: whatever this session was started with)
SELECT name, boot_val, unit, context FROM pg_settings WHERE name LIKE 'kmeans_gpu.%' ORDER BY name;
SHOW kmeans_gpu.max_memory;
-- VERBOSE is an SQL keyword: quote it in SET and SHOW
SHOW kmeans_gpu."verbose";

CREATE TABLE guc_pts AS
SELECT ARRAY[i % 7, i % 11]::real[] AS v FROM generate_series(1, 500) i;

-- The CPU engine on request, with any number of threads: the same model.
SET kmeans_gpu.engine = cpu;
SELECT (m).engine FROM (SELECT kmeans(v, 3, '{"seed": 2}') AS m FROM guc_pts) q;
CREATE TABLE guc_many AS
SELECT (SELECT array_agg(((i * 7 + j * 13) % 101)::real) FROM generate_series(1, 16) j) AS v
FROM generate_series(1, 60000) i;
SET kmeans_gpu.cpu_threads = 1;
CREATE TEMP TABLE guc_one AS SELECT kmeans(v, 8, '{"seed": 2}') AS m FROM guc_many;
SET kmeans_gpu.cpu_threads = 3;
SELECT (SELECT m FROM guc_one) = (SELECT kmeans(v, 8, '{"seed": 2}') FROM guc_many) AS same;
DROP TABLE guc_many;
SET kmeans_gpu.cpu_threads = 2;
RESET kmeans_gpu.engine;

-- Memory is checked before it is taken.
SET kmeans_gpu.max_memory = '1MB';
SELECT kmeans(ARRAY[i, i]::real[], 3) FROM generate_series(1, 200000) i;
-- kmeans_fit checks the table's statistics before reading it
CREATE TABLE guc_big AS SELECT ARRAY[i, i, i, i]::real[] AS v FROM generate_series(1, 100000) i;
ANALYZE guc_big;
SELECT kmeans_fit('guc_big', 'v', 3);
-- the engine's share counts too
SET kmeans_gpu.max_memory = '2MB';
SELECT (kmeans(ARRAY[i, i]::real[], 3, '{"seed": 1}')).n_rows FROM generate_series(1, 20000) i;
SELECT kmeans(ARRAY[i, i]::real[], 20000) FROM generate_series(1, 20000) i;
RESET kmeans_gpu.max_memory;
DROP TABLE guc_big;

-- Bad values.
SET kmeans_gpu.engine = 'tpu';
SET kmeans_gpu.max_memory = '10kB';
SET kmeans_gpu.cpu_threads = -1;
SET kmeans_gpu.no_such_setting = 1;

-- Verbose progress goes to the client as INFO, which client_min_messages does
-- not hold back; timings vary, so test/compare/sklearn_compare.py checks it.
SET kmeans_gpu."verbose" = on;
RESET kmeans_gpu."verbose";

DROP TABLE guc_pts;
