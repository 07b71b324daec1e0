-- A parallel aggregate gives the serial result, also when partial states
-- travel through temporary files, and leaves no file behind.
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

SELECT plan(8);
SELECT setseed(0.6);

CREATE TABLE par_pts AS
SELECT i AS id, i % 4 AS g,
       (SELECT array_agg((random() * 10 + (i % 5) * 3 + j * 0)::real) FROM generate_series(1, 8) j) AS v
FROM generate_series(1, 40000) i;
ANALYZE par_pts;

CREATE TEMP TABLE serial AS SELECT kmeans(v, 7, '{"seed": 21}') AS m FROM par_pts;
CREATE TEMP TABLE serial_g AS SELECT g, kmeans(v, 3, '{"seed": 21}') AS m FROM par_pts GROUP BY g;

SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;

SELECT ok(plan ~ 'Partial Aggregate' AND plan ~ 'Workers Planned: 2', 'the plan is parallel')
FROM pg_temp.plan_of('SELECT kmeans(v, 7, ''{"seed": 21}'') FROM par_pts') plan;
SELECT ok((SELECT m FROM serial) = (SELECT kmeans(v, 7, '{"seed": 21}') FROM par_pts),
          'parallel aggregate equals the serial one');
SELECT is((SELECT count(*) FROM serial_g s
           JOIN (SELECT g, kmeans(v, 3, '{"seed": 21}') AS m FROM par_pts GROUP BY g) p USING (g)
           WHERE s.m = p.m), 4::bigint, 'also with GROUP BY');

-- partial states through files
SET kmeans_gpu.spill_threshold = 0;
SELECT ok((SELECT m FROM serial) = (SELECT kmeans(v, 7, '{"seed": 21}') FROM par_pts),
          'states passed through files give the same model');
SET parallel_leader_participation = off;
SELECT ok((SELECT m FROM serial) = (SELECT kmeans(v, 7, '{"seed": 21}') FROM par_pts),
          'also with workers only');
SELECT is((SELECT count(*) FROM pg_ls_dir('base/pgsql_tmp', true, false) d WHERE d LIKE 'pgsql_tmp_kmeans%'), 0::bigint,
          'no spill file is left after the statement');

-- a failing statement leaves no file either
SELECT throws_ok($$SELECT kmeans(v, 50000) FROM par_pts$$, '22023', NULL,
                 'an error after the partial states were written');
SELECT is((SELECT count(*) FROM pg_ls_dir('base/pgsql_tmp', true, false) d WHERE d LIKE 'pgsql_tmp_kmeans%'), 0::bigint,
          'no spill file is left after a failed statement');

RESET parallel_leader_participation;
RESET kmeans_gpu.spill_threshold;
DROP TABLE par_pts;
SELECT * FROM finish();
