-- kmeans_fit reading a table with parallel workers (kmeans_gpu.read_workers):
-- the same model as the read in one backend, the same errors, and
-- kmeans_read_row refusing any caller but kmeans_fit's read.
SET extra_float_digits = 0;
LOAD 'kmeans_gpu';
SET kmeans_gpu.engine = 'cpu';	-- the CPU's read: rows for one GPU go through a ring (test/tap/64_parallel_read_gpu.sql)

SHOW kmeans_gpu.read_workers;
SET kmeans_gpu.read_workers = -2;

CREATE TABLE par_read (id bigint, v real[], v8 float8[], w float8, g int);
INSERT INTO par_read
SELECT i,
       ARRAY[(i % 3) * 10 + sin(i), (i % 3) * 5 + cos(i * 0.7), (i % 11) * 0.1, (i % 7) * 0.3]::real[],
       ARRAY[(i % 3) * 10 + sin(i), (i % 3) * 5 + cos(i * 0.7), (i % 11) * 0.1, (i % 7) * 0.3]::float8[],
       CASE WHEN i % 97 = 0 THEN NULL ELSE 1 + i % 4 END,
       i % 5
FROM generate_series(1, 30000) i;
UPDATE par_read SET v = NULL, v8 = NULL WHERE id % 89 = 0;
ANALYZE par_read;

-- Small enough for one process unless asked: make every plan parallel.
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;

CREATE FUNCTION pg_temp.fit_both(opts text)
RETURNS TABLE (same boolean, n_rows bigint, n_skipped bigint)
LANGUAGE plpgsql AS $$
BEGIN
  SET LOCAL kmeans_gpu.read_workers = 0;
  EXECUTE format('CREATE TEMP TABLE fit_serial AS SELECT kmeans_fit(''par_read'', %s) AS m', opts);
  SET LOCAL kmeans_gpu.read_workers = 2;
  EXECUTE format('CREATE TEMP TABLE fit_parallel AS SELECT kmeans_fit(''par_read'', %s) AS m', opts);
  RETURN QUERY SELECT s.m = p.m, (p.m).n_rows, (p.m).n_skipped FROM fit_serial s, fit_parallel p;
  DROP TABLE fit_serial;
  DROP TABLE fit_parallel;
END $$;

-- The same model bit for bit, NULL vectors skipped and counted.
SELECT * FROM pg_temp.fit_both($$'v', 3, seed => 5$$);
SELECT * FROM pg_temp.fit_both($$'v8', 3, seed => 5$$);
-- weighted: rows with a NULL weight are skipped too
SELECT * FROM pg_temp.fit_both($$'v', 3, seed => 5, weight_column => 'w'$$);
SELECT * FROM pg_temp.fit_both($$'v', 4, seed => 5, metric => 'cosine', init => 'random'$$);
SELECT * FROM pg_temp.fit_both($$'v', 3, seed => 5, storage => 'float16'$$);
SELECT * FROM pg_temp.fit_both($$'v', 3, seed => 5, init => 'k-means||'$$);
-- workers as PostgreSQL plans them (-1)
SET kmeans_gpu.read_workers = -1;
SELECT kmeans_fit('par_read', 'v', 3, seed => 5) =
       kmeans_fit('par_read', 'v', 3, seed => 5, engine => 'cpu') AS same;

-- Statistics far behind the table: the shared memory is too small, the
-- read is done again in one backend, and the model is the same.
SET kmeans_gpu.read_workers = 2;
CREATE TABLE par_grown (v real[]) WITH (autovacuum_enabled = off);
INSERT INTO par_grown
SELECT (SELECT array_agg(((i * j) % 17)::real) FROM generate_series(1, 512) j)
FROM generate_series(1, 10000) i;
UPDATE pg_class SET reltuples = 1, relpages = 1000 WHERE oid = 'par_grown'::regclass;
SELECT (m).n_rows, m = (SELECT kmeans(v, 3, '{"seed": 2, "max_iter": 5}') FROM par_grown) AS same
FROM (SELECT kmeans_fit('par_grown', 'v', 3, seed => 2, max_iter => 5) AS m) q;

-- Bad rows: the errors of the read in one backend (terse: a worker's
-- error reaches the client with the worker as its context).
\set VERBOSITY terse
CREATE TABLE par_bad (id int, v real[], w float8);
INSERT INTO par_bad SELECT i, ARRAY[i % 10, i % 7]::real[], 1 FROM generate_series(1, 20000) i;
ANALYZE par_bad;
UPDATE par_bad SET v = '{NaN,1}' WHERE id = 15000;
SELECT kmeans_fit('par_bad', 'v', 2);
UPDATE par_bad SET v = '{1,NULL}' WHERE id = 15000;
SELECT kmeans_fit('par_bad', 'v', 2);
UPDATE par_bad SET v = '{1,2,3}' WHERE id = 15000;
SELECT kmeans_fit('par_bad', 'v', 2);
UPDATE par_bad SET v = '{0,0}' WHERE id = 15000;
SELECT kmeans_fit('par_bad', 'v', 2, metric => 'cosine');
UPDATE par_bad SET v = '{1e30,1}' WHERE id = 15000;
SELECT kmeans_fit('par_bad', 'v', 2, storage => 'float16');
UPDATE par_bad SET v = '{1,1}', w = -1 WHERE id = 15000;
SELECT kmeans_fit('par_bad', 'v', 2, weight_column => 'w');
UPDATE par_bad SET w = 0;
SELECT kmeans_fit('par_bad', 'v', 2, weight_column => 'w');
SET kmeans_gpu.read_workers = 0;
SELECT kmeans_fit('par_bad', 'v', 2, weight_column => 'w');
SET kmeans_gpu.read_workers = 2;

-- Only kmeans_fit's own read may write rows.
SELECT kmeans_read_row(1, 2, '{1,2}'::real[], NULL);
SELECT kmeans_read_row(NULL, 2, '{1,2}'::real[], NULL);
SELECT count(*) FROM par_read WHERE NOT kmeans_read_row(1, 2, v, NULL);
\set VERBOSITY default

-- Privileges and row-level security are those of a plain SELECT.
CREATE ROLE par_reader;
CREATE TABLE par_secret (owner text, v real[]);
INSERT INTO par_secret SELECT CASE WHEN i % 2 = 0 THEN 'par_reader' ELSE 'other' END,
                              ARRAY[i % 2 * 100 + i % 3, i % 5]::real[]
FROM generate_series(1, 20000) i;
ANALYZE par_secret;
SET ROLE par_reader;
SELECT kmeans_fit('par_secret', 'v', 2);
RESET ROLE;
GRANT SELECT ON par_secret TO par_reader;
ALTER TABLE par_secret ENABLE ROW LEVEL SECURITY;
CREATE POLICY par_own ON par_secret FOR SELECT USING (owner = current_user);
SET ROLE par_reader;
SELECT (m).n_rows, (SELECT max(c[1]) FROM kmeans_centroids(m) k, LATERAL (SELECT k.centroid) x(c)) < 50 AS own_rows_only
FROM (SELECT kmeans_fit('par_secret', 'v', 2, seed => 1) AS m) q;
RESET ROLE;
DROP TABLE par_secret;
DROP ROLE par_reader;
