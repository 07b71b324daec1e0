-- A parallel aggregate gives the serial result, also when partial states
-- travel through temporary files, and leaves no file behind.
--
-- The parallel models are made by EXPLAIN ANALYZE CREATE TABLE ... AS,
-- which runs the statement and reports how it ran, with the leader taking
-- no rows (parallel_leader_participation off): the check that the model
-- equals the serial one is made on a run in which workers were launched
-- and read every row, so their partial states left them through
-- kmeans_serialize and reached the leader through kmeans_deserialize (the
-- aggregate's state is internal).  (With the leader taking part, it may
-- read the whole table before a worker starts: nothing would have been
-- serialised.  That case is checked for equality only.)

-- Runs query as EXPLAIN (ANALYZE, VERBOSE) CREATE TABLE target AS query;
-- returns the plan's text.
CREATE FUNCTION pg_temp.run_parallel(target text, query text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  line text;
  plan text := '';
BEGIN
  EXECUTE format('DROP TABLE IF EXISTS %I', target);
  FOR line IN EXECUTE format('EXPLAIN (ANALYZE, VERBOSE, COSTS OFF, TIMING OFF, SUMMARY OFF) '
                             'CREATE TABLE %I AS %s', target, query) LOOP
    plan := plan || line || E'\n';
  END LOOP;
  RETURN plan;
END $$;

-- Workers launched and the leader read nothing, so every row reached the
-- Partial Aggregate of a worker: some "Worker N:" line under it has rows >= 1.
CREATE FUNCTION pg_temp.workers_made_states(plan text) RETURNS boolean LANGUAGE sql AS $$
  SELECT plan ~ 'Workers Launched: [1-9]'
     AND (SELECT count(*) FROM regexp_matches(
            substring(plan FROM 'Partial (?:Hash|Group)?Aggregate.*$'),
            'Worker [0-9]+: +actual rows=[1-9][0-9]* loops=1', 'g')) >= 1
$$;

SELECT plan(10);
SELECT setseed(0.6);

CREATE TABLE par_pts AS
SELECT i AS id, i % 4 AS g,
       (SELECT array_agg((random() * 10 + (i % 5) * 3 + j * 0)::real) FROM generate_series(1, 8) j) AS v
FROM generate_series(1, 40000) i;
ANALYZE par_pts;

SET max_parallel_workers_per_gather = 0;
CREATE TEMP TABLE serial AS SELECT kmeans(v, 7, '{"seed": 21}') AS m FROM par_pts;
CREATE TEMP TABLE serial_g AS SELECT g, kmeans(v, 3, '{"seed": 21}') AS m FROM par_pts GROUP BY g;

SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
SET parallel_leader_participation = off;

CREATE TEMP TABLE plans (name text, plan text);
INSERT INTO plans
SELECT 'plain', pg_temp.run_parallel('par_model', $$SELECT kmeans(v, 7, '{"seed": 21}') AS m FROM par_pts$$);
SELECT ok(pg_temp.workers_made_states(plan), 'workers launched and made the partial states')
FROM plans WHERE name = 'plain';
SELECT ok((SELECT m FROM serial) = (SELECT m FROM par_model),
          'parallel aggregate equals the serial one');

INSERT INTO plans
SELECT 'grouped', pg_temp.run_parallel('par_model_g',
  $$SELECT g, kmeans(v, 3, '{"seed": 21}') AS m FROM par_pts GROUP BY g$$);
SELECT ok(pg_temp.workers_made_states(plan), 'GROUP BY: workers launched and made the partial states')
FROM plans WHERE name = 'grouped';
SELECT is((SELECT count(*) FROM serial_g s JOIN par_model_g p USING (g) WHERE s.m = p.m), 4::bigint,
          'also with GROUP BY');

-- partial states through files
SET kmeans_gpu.spill_threshold = 0;
INSERT INTO plans
SELECT 'spilled', pg_temp.run_parallel('par_model_s', $$SELECT kmeans(v, 7, '{"seed": 21}') AS m FROM par_pts$$);
SELECT ok(pg_temp.workers_made_states(plan) AND (SELECT m FROM serial) = (SELECT m FROM par_model_s),
          'states passed through files give the same model')
FROM plans WHERE name = 'spilled';
RESET kmeans_gpu.spill_threshold;
-- the leader taking part too
SET parallel_leader_participation = on;
SELECT ok((SELECT m FROM serial) = (SELECT kmeans(v, 7, '{"seed": 21}') FROM par_pts),
          'also with the leader taking part');
SELECT is((SELECT count(*) FROM serial_g s
           JOIN (SELECT g, kmeans(v, 3, '{"seed": 21}') AS m FROM par_pts GROUP BY g) p USING (g)
           WHERE s.m = p.m), 4::bigint, 'also with the leader taking part, GROUP BY');
SET kmeans_gpu.spill_threshold = 0;
SELECT is((SELECT count(*) FROM pg_ls_dir('base/pgsql_tmp', true, false) d WHERE d LIKE 'pgsql_tmp_kmeans%'), 0::bigint,
          'no spill file is left after the statement');

-- a failing statement leaves no file either
SELECT throws_ok($$SELECT kmeans(v, 50000) FROM par_pts$$, '22023', NULL,
                 'an error after the partial states were written');
SELECT is((SELECT count(*) FROM pg_ls_dir('base/pgsql_tmp', true, false) d WHERE d LIKE 'pgsql_tmp_kmeans%'), 0::bigint,
          'no spill file is left after a failed statement');
-- the plans of the runs whose worker check failed, for whoever reads the failure
SELECT diag(name || E':\n' || plan) FROM plans WHERE NOT pg_temp.workers_made_states(plan);

RESET parallel_leader_participation;
RESET kmeans_gpu.spill_threshold;
DROP TABLE par_pts, par_model, par_model_g, par_model_s;
SELECT * FROM finish();
