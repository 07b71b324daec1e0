-- Privileges, row-level security and names: kmeans_fit and kmeans_labels read
-- tables as the calling role, like a plain SELECT; names are names, never SQL;
-- nothing needs a superuser at run time.
--
-- Roles are cluster-wide and pg_regress databases are shared, so the roles
-- here are prefixed regress_kmeans_ and dropped at the end.
SET extra_float_digits = 0;
-- (leftovers of an interrupted run first)
SET client_min_messages = warning;
DO $$
DECLARE
  r text;
BEGIN
  FOREACH r IN ARRAY ARRAY['regress_kmeans_nobody', 'regress_kmeans_user'] LOOP
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN
      EXECUTE format('DROP OWNED BY %I CASCADE', r);
      EXECUTE format('DROP ROLE %I', r);
    END IF;
  END LOOP;
END $$;
RESET client_min_messages;
CREATE ROLE regress_kmeans_nobody;
CREATE ROLE regress_kmeans_user;

-- Errors as "SQLSTATE message", so that the errcode is in the output.
CREATE FUNCTION priv_try(statement text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  state text;
  msg text;
BEGIN
  EXECUTE statement;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
  RETURN state || ' ' || msg;
END $$;

-- Centroids rounded and sorted, so that output does not depend on cluster ids.
CREATE FUNCTION priv_show(m kmeans_model)
RETURNS TABLE (centroid numeric[], size bigint)
LANGUAGE sql AS $$
  SELECT (SELECT array_agg(round(x::numeric, 3)) FROM unnest(c.centroid) x), c.size
  FROM kmeans_centroids(m) c ORDER BY 1
$$;

-- side 0: two groups around (1, 1) and (3, 3); side 1: one group around (11, 11).
CREATE TABLE priv_pts AS
SELECT i AS id,
       CASE WHEN i % 2 = 1 THEN ARRAY[11 + (i % 5) * 0.1, 11 + (i % 3) * 0.1]
            WHEN i % 4 = 0 THEN ARRAY[1 + (i % 5) * 0.1, 1 + (i % 3) * 0.1]
            ELSE ARRAY[3 + (i % 5) * 0.1, 3 + (i % 3) * 0.1] END::real[] AS v,
       1 + i % 3 AS w,
       i % 2 AS side
FROM generate_series(1, 60) i;
CREATE TABLE priv_model AS
SELECT kmeans_fit('priv_pts', 'v', 2, init_centroids => '{{1,1},{11,11}}') AS m;
GRANT SELECT ON priv_model TO regress_kmeans_nobody, regress_kmeans_user;

----------------------------------------------------------------------------
-- A role without SELECT on the table: permission denied from every function
-- that reads it, and from the aggregate and the window function through SQL.
SET ROLE regress_kmeans_nobody;
SELECT priv_try($$SELECT kmeans_fit('priv_pts', 'v', 2)$$);
SELECT priv_try($$SELECT kmeans_fit('priv_pts', 'v', 2, weight_column => 'w')$$);
SELECT priv_try($$SELECT * FROM kmeans_labels((SELECT m FROM priv_model), 'priv_pts', 'v', 'id')$$);
SELECT priv_try($$SELECT kmeans(v, 2) FROM priv_pts$$);
SELECT priv_try($$SELECT kmeans_cluster(v, 2) OVER () FROM priv_pts$$);
SELECT priv_try($$SELECT kmeans_assign((SELECT m FROM priv_model), v) FROM priv_pts$$);
-- the same, at the top level
SELECT kmeans_fit('priv_pts', 'v', 2);
SELECT * FROM kmeans_labels((SELECT m FROM priv_model), 'priv_pts', 'v', 'id');
-- a model alone reads no table
SELECT * FROM priv_show((SELECT m FROM priv_model));
SELECT kmeans_assign(m, '{10,10}'::real[]) FROM priv_model;
RESET ROLE;

-- Column privileges: the vector column, the weight column and the id column
-- each need SELECT.
GRANT SELECT (id, side) ON priv_pts TO regress_kmeans_nobody;
SET ROLE regress_kmeans_nobody;
SELECT priv_try($$SELECT kmeans_fit('priv_pts', 'v', 2)$$);
SELECT priv_try($$SELECT * FROM kmeans_labels((SELECT m FROM priv_model), 'priv_pts', 'v', 'id')$$);
RESET ROLE;
GRANT SELECT (v) ON priv_pts TO regress_kmeans_nobody;
SET ROLE regress_kmeans_nobody;
SELECT (kmeans_fit('priv_pts', 'v', 2, seed => 1)).n_rows;
SELECT priv_try($$SELECT kmeans_fit('priv_pts', 'v', 2, weight_column => 'w')$$);
SELECT count(*) FROM kmeans_labels((SELECT m FROM priv_model), 'priv_pts', 'v', 'id');
RESET ROLE;
REVOKE SELECT (id) ON priv_pts FROM regress_kmeans_nobody;
SET ROLE regress_kmeans_nobody;
SELECT priv_try($$SELECT * FROM kmeans_labels((SELECT m FROM priv_model), 'priv_pts', 'v', 'id')$$);
RESET ROLE;

-- Views: a view reads its tables with its owner's privileges, unless it is
-- security_invoker; kmeans_fit follows the same rules.
CREATE VIEW priv_view AS SELECT id, v FROM priv_pts WHERE side = 0;
CREATE VIEW priv_invoker_view WITH (security_invoker) AS SELECT id, v FROM priv_pts WHERE side = 0;
GRANT SELECT ON priv_view, priv_invoker_view TO regress_kmeans_user;
SET ROLE regress_kmeans_user;
SELECT (kmeans_fit('priv_view', 'v', 2, seed => 1)).n_rows;
SELECT priv_try($$SELECT kmeans_fit('priv_invoker_view', 'v', 2)$$);
RESET ROLE;

----------------------------------------------------------------------------
-- Row-level security: a policy shows regress_kmeans_user the rows of side 0
-- only.  The table's owner (here a superuser) sees all 60 rows.
CREATE TABLE priv_rls AS SELECT * FROM priv_pts;
ALTER TABLE priv_rls ENABLE ROW LEVEL SECURITY;
CREATE POLICY priv_rls_side0 ON priv_rls FOR SELECT TO regress_kmeans_user USING (side = 0);
GRANT SELECT ON priv_rls TO regress_kmeans_user;
-- what the owner fits, and what the owner fits from the rows of side 0
CREATE TABLE priv_rls_all AS SELECT kmeans_fit('priv_rls', 'v', 2, seed => 3) AS m;
CREATE TABLE priv_rls_side0 AS SELECT kmeans(v, 2, '{"seed": 3}') AS m FROM priv_rls WHERE side = 0;
GRANT SELECT ON priv_rls_all, priv_rls_side0 TO regress_kmeans_user;
SELECT (m).n_rows FROM priv_rls_all;
SELECT * FROM priv_show((SELECT m FROM priv_rls_all));

SET ROLE regress_kmeans_user;
CREATE TEMP TABLE priv_rls_user AS SELECT kmeans_fit('priv_rls', 'v', 2, seed => 3) AS m;
-- half the rows, other centroids: exactly the model of the rows of side 0
SELECT (m).n_rows FROM priv_rls_user;
SELECT * FROM priv_show((SELECT m FROM priv_rls_user));
SELECT (SELECT m FROM priv_rls_user) = (SELECT m FROM priv_rls_side0) AS fits_visible_rows_only,
       (SELECT m FROM priv_rls_user) = (SELECT m FROM priv_rls_all) AS fits_all_rows;
-- the aggregate, kmeans_labels and the window function see the same rows
SELECT (SELECT kmeans(v, 2, '{"seed": 3}') FROM priv_rls) = (SELECT m FROM priv_rls_user) AS aggregate_same;
SELECT count(*), count(*) FILTER (WHERE id % 2 = 1) AS side1_rows
FROM kmeans_labels((SELECT m FROM priv_rls_user), 'priv_rls', 'v', 'id');
SELECT count(*) FROM (SELECT kmeans_cluster(v, 2) OVER () FROM priv_rls) q;
-- with row_security off, a query that a policy would filter is an error
SET row_security = off;
SELECT priv_try($$SELECT kmeans_fit('priv_rls', 'v', 2)$$);
SELECT priv_try($$SELECT * FROM kmeans_labels((SELECT m FROM priv_rls_user), 'priv_rls', 'v', 'id')$$);
RESET row_security;
DROP TABLE priv_rls_user;
RESET ROLE;

----------------------------------------------------------------------------
-- Names with quotes, semicolons and spaces are names, never SQL; run as an
-- ordinary role in a schema of its own.
CREATE SCHEMA "priv sch""ema; --" AUTHORIZATION regress_kmeans_user;
SET ROLE regress_kmeans_user;
SELECT rolsuper FROM pg_roles WHERE rolname = current_user;
CREATE TABLE "priv sch""ema; --"."ta'ble; DROP TABLE priv_pts; --" (
	"i d'); DROP TABLE priv_pts; --" int,
	"ve""c; col" real[],
	"w)" float8);
INSERT INTO "priv sch""ema; --"."ta'ble; DROP TABLE priv_pts; --"
SELECT id, v, 1 FROM priv_view;
SELECT (m).n_rows, (m).k
FROM (SELECT kmeans_fit('"priv sch""ema; --"."ta''ble; DROP TABLE priv_pts; --"', 've"c; col', 2,
                        weight_column => 'w)', seed => 1) AS m) q;
SELECT count(*)
FROM kmeans_labels((SELECT m FROM priv_model), '"priv sch""ema; --"."ta''ble; DROP TABLE priv_pts; --"',
                   've"c; col', 'i d''); DROP TABLE priv_pts; --');
-- text that would be SQL if pasted is a missing column
SELECT priv_try($$SELECT kmeans_fit('priv_rls', 'v FROM priv_pts; DROP TABLE priv_pts; --', 2)$$);
SELECT priv_try($$SELECT kmeans_fit('priv_rls', 'v) FROM priv_pts; --', 2)$$);
SELECT priv_try($$SELECT kmeans_fit('priv_rls', '*', 2)$$);
SELECT priv_try($$SELECT kmeans_fit('priv_rls', '"v"', 2)$$);
SELECT priv_try($$SELECT kmeans_fit('priv_rls', 'v', 2, weight_column => 'w + pg_sleep(10)')$$);
SELECT priv_try($$SELECT * FROM kmeans_labels((SELECT m FROM priv_model), 'priv_rls', 'v', 'id::text || pg_sleep(10)')$$);
RESET ROLE;
-- everything is still there
SELECT count(*) FROM priv_pts;

----------------------------------------------------------------------------
-- Nothing needs a superuser: every function and setting as an ordinary role,
-- on its own table, including a parallel aggregate whose partial states pass
-- through temporary files.
SET ROLE regress_kmeans_user;
SET search_path = "priv sch""ema; --", public;
CREATE TABLE own_pts AS
SELECT i AS id, ARRAY[(i % 3) * 10 + (i % 7) * 0.1, (i % 3) * 5 + (i % 11) * 0.1]::real[] AS v
FROM generate_series(1, 3000) i;
ANALYZE own_pts;
SET kmeans_gpu.engine = cpu;
SET kmeans_gpu.cpu_threads = 2;
SET kmeans_gpu.max_memory = '1GB';
SET kmeans_gpu."verbose" = off;
SET kmeans_gpu.spill_threshold = 0;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
EXPLAIN (COSTS OFF) SELECT kmeans(v, 3, '{"seed": 5}') FROM own_pts;
CREATE TABLE own_model AS SELECT kmeans(v, 3, '{"seed": 5}') AS m FROM own_pts;
SELECT (m).n_rows, (m).k FROM own_model;
SELECT kmeans_fit('own_pts', 'v', 3, seed => 5) = m AS fit_same FROM own_model;
SELECT count(*) FROM kmeans_centroids((SELECT m FROM own_model));
SELECT count(*) FROM kmeans_labels((SELECT m FROM own_model), 'own_pts', 'v', 'id') l
JOIN own_pts p USING (id), own_model
WHERE l.cluster_id = kmeans_assign(m, p.v);
SELECT count(DISTINCT c) FROM (SELECT kmeans_cluster(v, 3, '{"seed": 5}') OVER () AS c FROM own_pts) q;
RESET kmeans_gpu.engine;
RESET kmeans_gpu.cpu_threads;
RESET kmeans_gpu.max_memory;
RESET kmeans_gpu."verbose";
RESET kmeans_gpu.spill_threshold;
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
RESET search_path;
RESET ROLE;
-- no spill file is left behind
SELECT count(*) FROM pg_ls_dir('base/pgsql_tmp', true, false) d WHERE d LIKE 'pgsql_tmp_kmeans%';

SET client_min_messages = warning;
DROP SCHEMA "priv sch""ema; --" CASCADE;
RESET client_min_messages;
DROP VIEW priv_view, priv_invoker_view;
DROP TABLE priv_pts, priv_model, priv_rls, priv_rls_all, priv_rls_side0;
DROP FUNCTION priv_try(text);
DROP FUNCTION priv_show(kmeans_model);
DROP ROLE regress_kmeans_nobody;
DROP ROLE regress_kmeans_user;
