-- Several gigabytes through the aggregate, serial and parallel: each
-- worker's partial state is larger than the 1 GB a bytea can hold.
-- (make test skips this file when KM_TEST_SKIP_BIG=1.)
CREATE FUNCTION pg_temp.plan_of(query text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  line text;
  plan text := '';
BEGIN
  FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || query LOOP
    plan := plan || line || E'\n';
  END LOOP;
  RETURN plan;
END $$;

SELECT plan(5);

-- 1.3 million rows of 640 values: 3.3 GB of float32 in memory.  Values
-- repeat, so TOAST compression keeps the table itself small and quick.
CREATE UNLOGGED TABLE big_pts AS
SELECT i AS id, array_fill(((i % 97) + (i % 3) * 1000)::real, ARRAY[640]) AS v
FROM generate_series(1, 1300000) i;
ANALYZE big_pts;

SET kmeans_gpu.max_memory = '12GB';
SET max_parallel_workers_per_gather = 0;
CREATE TEMP TABLE big_serial AS SELECT kmeans(v, 3, '{"seed": 1, "max_iter": 5}') AS m FROM big_pts;
SELECT is((SELECT (m).n_rows FROM big_serial), 1300000::bigint, 'serial: every row clustered');

SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
SET parallel_leader_participation = off;
SELECT ok(plan ~ 'Partial Aggregate' AND plan ~ 'Workers Planned: 2', 'the plan is parallel')
FROM pg_temp.plan_of('SELECT kmeans(v, 3, ''{"seed": 1, "max_iter": 5}'') FROM big_pts') plan;
CREATE TEMP TABLE big_parallel AS SELECT kmeans(v, 3, '{"seed": 1, "max_iter": 5}') AS m FROM big_pts;
SELECT is((SELECT (m).n_rows FROM big_parallel), 1300000::bigint, 'parallel: every row clustered');
SELECT ok((SELECT m FROM big_serial) = (SELECT m FROM big_parallel), 'parallel equals serial');
SELECT is((SELECT count(*) FROM pg_ls_dir('base/pgsql_tmp', true, false) d WHERE d LIKE 'pgsql_tmp_kmeans%'),
          0::bigint, 'no spill file is left');

DROP TABLE big_pts;
SELECT * FROM finish();
