-- kmeans_fit's parallel read (kmeans_gpu.read_workers): the workers read
-- the rows, and the model is the one read in one backend.
--
-- Who read the rows shows in this backend's own table statistics for the
-- transaction (pg_stat_xact_user_tables.seq_tup_read): a parallel worker
-- counts its reads in its own statistics, not in the leader's.  With the
-- leader taking no part in the scan (parallel_leader_participation off),
-- a read done by workers leaves the leader's count at the one row of the
-- first-vector check, while a read in one backend counts every row.

SELECT plan(12);
SELECT setseed(0.2);

CREATE TABLE pr_pts AS
SELECT i AS id,
       (SELECT array_agg((random() * 4 + (i % 6) * 5 + j * 0)::real) FROM generate_series(1, 8) j) AS v
FROM generate_series(1, 40000) i;
ANALYZE pr_pts;

SET kmeans_gpu.engine = 'cpu';
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET parallel_leader_participation = off;

-- One fit: its model, and the rows this backend itself read from the
-- table meanwhile (the view's counts are this backend's, not yet sent to
-- the statistics: take the difference).  workers: kmeans_gpu.read_workers;
-- 0 also keeps the read's own query to this backend.
CREATE FUNCTION pg_temp.fit_counting(workers int, source regclass DEFAULT 'pr_pts')
RETURNS TABLE (model kmeans_model, leader_rows bigint) LANGUAGE plpgsql AS $$
DECLARE
  before bigint := coalesce((SELECT seq_tup_read FROM pg_stat_xact_user_tables WHERE relid = source), 0);
BEGIN
  PERFORM set_config('kmeans_gpu.read_workers', workers::text, true);
  IF workers = 0 THEN
    PERFORM set_config('max_parallel_workers_per_gather', '0', true);
  END IF;
  model := kmeans_fit(source, 'v', 6, seed => 4, max_iter => 20);
  leader_rows := (SELECT seq_tup_read FROM pg_stat_xact_user_tables WHERE relid = source) - before;
  RETURN NEXT;
END $$;

CREATE TEMP TABLE runs AS SELECT 'serial' AS name, * FROM pg_temp.fit_counting(0);
INSERT INTO runs SELECT 'workers', * FROM pg_temp.fit_counting(2);
SET max_parallel_workers = 0;
INSERT INTO runs SELECT 'no worker free', * FROM pg_temp.fit_counting(2);
RESET max_parallel_workers;

SELECT cmp_ok((SELECT leader_rows FROM runs WHERE name = 'serial'), '>=', 40000::bigint,
              'read in one backend: the backend read every row');
SELECT cmp_ok((SELECT leader_rows FROM runs WHERE name = 'workers'), '<', 100::bigint,
              'read_workers 2: the workers read the rows, the leader none');
SELECT is((SELECT (model).n_rows FROM runs WHERE name = 'workers'), 40000::bigint,
          'every row reached the fit');
SELECT ok((SELECT model FROM runs WHERE name = 'serial') = (SELECT model FROM runs WHERE name = 'workers'),
          'the model read by workers is the model read in one backend');
SELECT cmp_ok((SELECT leader_rows FROM runs WHERE name = 'no worker free'), '>=', 40000::bigint,
              'no worker free: the leader runs the parallel plan alone');
SELECT ok((SELECT model FROM runs WHERE name = 'serial') = (SELECT model FROM runs WHERE name = 'no worker free'),
          'and gets the same model');

-- A bad row read by a worker: its error reaches the caller.
CREATE TABLE pr_bad AS SELECT * FROM pr_pts;
UPDATE pr_bad SET v[3] = 'NaN' WHERE id = 30000;
ANALYZE pr_bad;
SET kmeans_gpu.read_workers = 2;
SELECT throws_ok($$SELECT kmeans_fit('pr_bad', 'v', 6)$$, '22000',
                 'vector must not contain NaN or infinite values',
                 'a worker''s error is the error of the fit');
SELECT lives_ok($$SELECT kmeans_fit('pr_pts', 'v', 6)$$, 'the next fit runs after it');

-- Statistics that promise far fewer rows than the table has: the shared
-- memory is too small, and the rows are read again in one backend.
CREATE TABLE pr_grown (id int, v real[]) WITH (autovacuum_enabled = off);
INSERT INTO pr_grown
SELECT i, (SELECT array_agg(((i * j) % 23)::real) FROM generate_series(1, 512) j)
FROM generate_series(1, 10000) i;
UPDATE pr_grown SET v = NULL WHERE id % 1000 = 0;	-- skipped rows are counted once
UPDATE pg_class SET reltuples = 1, relpages = 1000 WHERE oid = 'pr_grown'::regclass;
INSERT INTO runs SELECT 'grown, serial', * FROM pg_temp.fit_counting(0, 'pr_grown');
INSERT INTO runs SELECT 'grown', * FROM pg_temp.fit_counting(2, 'pr_grown');
SELECT cmp_ok((SELECT leader_rows FROM runs WHERE name = 'grown'), '>=', 9990::bigint,
              'shared memory too small: the leader read the rows again');
SELECT is((SELECT ((model).n_rows, (model).n_skipped) FROM runs WHERE name = 'grown'), (9990::bigint, 10::bigint),
          'every row reached the fit, the skipped ones counted once');
SELECT ok((SELECT model FROM runs WHERE name = 'grown, serial') = (SELECT model FROM runs WHERE name = 'grown'),
          'and the model is the model read in one backend');

-- The statistics were not used by a read in one backend, so the same
-- table with true statistics is read by the workers.
ANALYZE pr_grown;
INSERT INTO runs SELECT 'grown, analysed', * FROM pg_temp.fit_counting(2, 'pr_grown');
SELECT cmp_ok((SELECT leader_rows FROM runs WHERE name = 'grown, analysed'), '<', 100::bigint,
              'analysed: the workers read the rows');

RESET kmeans_gpu.read_workers;
RESET parallel_leader_participation;
DROP FUNCTION pg_temp.fit_counting(int, regclass);
DROP TABLE pr_pts, pr_bad, pr_grown;
SELECT * FROM finish();
