-- kmeans_fit's parallel read for a fit on one GPU: the workers write the
-- rows into a ring of shared memory that a thread of the backend drains to
-- the GPU while the query runs (parallel_read.c, dataset.cu).  The table is
-- larger than the ring, so every block is filled and drained several times.
-- The model must be the one read in one backend, and the CPU engine's.
-- Who read the rows shows as in 62_parallel_read.sql: in the leader's own
-- statistics, with the leader taking no part in the scan.
--
-- On a machine without a GPU every test is skipped.

SELECT plan(12);
SELECT setseed(0.3);

SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET parallel_leader_participation = off;

-- One fit, and the rows this backend itself read meanwhile.
CREATE FUNCTION pg_temp.fit_counting(workers int, source regclass, engine text,
                                     weight text DEFAULT NULL, metric text DEFAULT 'l2',
                                     init text DEFAULT 'k-means++')
RETURNS TABLE (model kmeans_model, leader_rows bigint) LANGUAGE plpgsql AS $$
DECLARE
  before bigint := coalesce((SELECT seq_tup_read FROM pg_stat_xact_user_tables WHERE relid = source), 0);
BEGIN
  PERFORM set_config('kmeans_gpu.read_workers', workers::text, true);
  PERFORM set_config('max_parallel_workers_per_gather', CASE WHEN workers = 0 THEN '0' ELSE '2' END, true);
  model := kmeans_fit(source, 'v', 12, seed => 7, max_iter => 15, engine => engine,
                      weight_column => weight, metric => metric, init => init);
  leader_rows := (SELECT seq_tup_read FROM pg_stat_xact_user_tables WHERE relid = source) - before;
  RETURN NEXT;
END $$;

-- Whether the runs named a and b (in ring_runs) gave the same model.
CREATE FUNCTION pg_temp.same_model(a text, b text, description text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  RETURN ok((SELECT model FROM pg_temp.ring_runs WHERE name = a) =
            (SELECT model FROM pg_temp.ring_runs WHERE name = b), description);
END $$;

CREATE FUNCTION pg_temp.ring_tests() RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM kmeans_gpu_devices()) THEN
    RETURN NEXT skip('no GPU: the ring feeds a GPU only', 12);
    RETURN;
  END IF;

  -- 150000 rows of 67 values (not a multiple of the device rows' padding):
  -- 40 MB, where two workers and the leader get a ring of 12 MB.  Not
  -- temporary tables: parallel workers cannot read those.
  CREATE TABLE ring_pts AS
  SELECT i AS id, 0.5 + (i % 5) AS w,
         (SELECT array_agg((random() * 3 + (i % 12) * 2 + (j % 3))::real) FROM generate_series(1, 67) j) AS v
  FROM generate_series(1, 150000) i;
  ANALYZE ring_pts;

  CREATE TABLE pg_temp.ring_runs AS
  SELECT 'serial' AS name, * FROM pg_temp.fit_counting(0, 'ring_pts', 'gpu');
  INSERT INTO pg_temp.ring_runs SELECT 'workers', * FROM pg_temp.fit_counting(2, 'ring_pts', 'gpu');
  INSERT INTO pg_temp.ring_runs SELECT 'cpu', * FROM pg_temp.fit_counting(0, 'ring_pts', 'cpu');
  INSERT INTO pg_temp.ring_runs SELECT 'weighted, serial', * FROM pg_temp.fit_counting(0, 'ring_pts', 'gpu', 'w');
  INSERT INTO pg_temp.ring_runs SELECT 'weighted', * FROM pg_temp.fit_counting(2, 'ring_pts', 'gpu', 'w');
  INSERT INTO pg_temp.ring_runs SELECT 'cosine, serial', * FROM pg_temp.fit_counting(0, 'ring_pts', 'gpu', NULL, 'cosine');
  INSERT INTO pg_temp.ring_runs SELECT 'cosine', * FROM pg_temp.fit_counting(2, 'ring_pts', 'gpu', NULL, 'cosine');
  INSERT INTO pg_temp.ring_runs SELECT 'k-means||, serial', * FROM pg_temp.fit_counting(0, 'ring_pts', 'gpu', NULL, 'l2', 'k-means||');
  INSERT INTO pg_temp.ring_runs SELECT 'k-means||', * FROM pg_temp.fit_counting(2, 'ring_pts', 'gpu', NULL, 'l2', 'k-means||');
  PERFORM set_config('parallel_leader_participation', 'on', true);
  INSERT INTO pg_temp.ring_runs SELECT 'leader writes too', * FROM pg_temp.fit_counting(2, 'ring_pts', 'gpu');
  PERFORM set_config('parallel_leader_participation', 'off', true);

  -- Statistics 15 times behind the table (10000 rows where it has 150000):
  -- the device rows, sized from them, grow while the drain copies the
  -- blocks.  (Statistics promising only a few rows would give a plan
  -- without workers, where the leader fills the ring alone.)
  CREATE TABLE ring_grown WITH (autovacuum_enabled = off) AS SELECT * FROM ring_pts;
  UPDATE pg_class SET reltuples = 10000, relpages = pg_relation_size('ring_grown') / 8192
  WHERE oid = 'ring_grown'::regclass;
  INSERT INTO pg_temp.ring_runs SELECT 'stale statistics', * FROM pg_temp.fit_counting(2, 'ring_grown', 'gpu');

  RETURN NEXT cmp_ok((SELECT leader_rows FROM pg_temp.ring_runs WHERE name = 'workers'), '<', 100::bigint,
                     'engine gpu, read_workers 2: the workers read the rows, the leader none');
  RETURN NEXT is((SELECT (model).n_rows FROM pg_temp.ring_runs WHERE name = 'workers'), 150000::bigint,
                 'every row reached the GPU through the ring');
  RETURN NEXT pg_temp.same_model('serial', 'workers', 'the model is the model read in one backend');
  RETURN NEXT ok((SELECT ((model).centroids, (model).sizes, (model).iterations) FROM pg_temp.ring_runs WHERE name = 'cpu') =
                 (SELECT ((model).centroids, (model).sizes, (model).iterations) FROM pg_temp.ring_runs WHERE name = 'workers'),
                 'and the CPU engine''s: the same centroids, sizes and iterations');
  RETURN NEXT pg_temp.same_model('weighted, serial', 'weighted', 'weighted: the weights come through the ring too');
  RETURN NEXT pg_temp.same_model('cosine, serial', 'cosine', 'cosine: the same model');
  RETURN NEXT pg_temp.same_model('k-means||, serial', 'k-means||',
                                 'k-means|| (seeded on the host, which keeps the rows, so no ring): the same model');
  RETURN NEXT pg_temp.same_model('serial', 'leader writes too',
                                 'the leader writing into the ring while its thread drains it: the same model');
  RETURN NEXT cmp_ok((SELECT leader_rows FROM pg_temp.ring_runs WHERE name = 'stale statistics'), '<', 100::bigint,
                     'statistics 15 times behind: the workers still read the rows (a ring never fills)');
  RETURN NEXT pg_temp.same_model('serial', 'stale statistics',
                                 'and the model is the same: the device rows grew during the drain');

  -- A worker's error while the ring is drained: the drain ends, the fit
  -- fails with the worker's error, and the next fit runs.
  CREATE TABLE ring_bad AS SELECT * FROM ring_pts;
  UPDATE ring_bad SET v[5] = 'Infinity' WHERE id = 140000;
  ANALYZE ring_bad;
  PERFORM set_config('kmeans_gpu.read_workers', '2', true);
  RETURN NEXT throws_ok($q$SELECT kmeans_fit('ring_bad', 'v', 12, engine => 'gpu')$q$, '22000',
                        'vector must not contain NaN or infinite values',
                        'a worker''s error during the drain is the error of the fit');
  RETURN NEXT lives_ok($q$SELECT kmeans_fit('ring_pts', 'v', 12, engine => 'gpu')$q$,
                       'the next fit runs after it');

END $$;

SELECT * FROM pg_temp.ring_tests();

RESET parallel_leader_participation;
SET client_min_messages = warning;	-- without a GPU the tables were never made
DROP TABLE IF EXISTS ring_pts, ring_bad, ring_grown;
RESET client_min_messages;
SELECT * FROM finish();
