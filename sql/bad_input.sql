-- The bad-input catalogue: every SQL entry point (the kmeans aggregate,
-- kmeans_fit, kmeans_centroids, kmeans_assign, kmeans_labels, kmeans_cluster,
-- the kmeans_gpu.* settings and kmeans_gpu_devices) fed bad input, one input
-- per line.  (engine 'gpu' without a GPU is in engine_gpu.sql: its outcome
-- depends on the machine.)
--
-- bi(entry, statement) runs the statement in a subtransaction, catches the
-- error and prints its SQLSTATE and message (OIDs replaced by <oid>); an
-- input that does not fail prints "NO ERROR".  Every input is logged, and the
-- end prints how many were tried, per entry point.  After each group one
-- input also fails at the top level, where psql shows it as usual, and a
-- query shows that the session is still usable.
SET extra_float_digits = 0;

-- Before the module is loaded, kmeans_gpu.* values are placeholders: a bad
-- value is only a WARNING when the first call loads the module, and the
-- default is kept.  (PostgreSQL's rule for every extension's settings; load
-- the module first, or preload it, to get an ERROR.)
SET kmeans_gpu.engine = 'tpu';
SET kmeans_gpu.no_such_setting = 1;
LOAD 'kmeans_gpu';
SELECT current_setting('kmeans_gpu.engine') <> 'tpu' AS bad_value_not_taken;

-- Figures in the memory messages depend on the engine and the thread count.
SET kmeans_gpu.engine = cpu;
SET kmeans_gpu.cpu_threads = 2;

CREATE TABLE bi_log (n serial, entry text, statement text, sqlstate text, message text);

CREATE FUNCTION bi(entry text, statement text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  state text := 'none';
  msg text := 'NO ERROR';
BEGIN
  BEGIN
    EXECUTE statement;
  EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
  END;
  msg := regexp_replace(msg, 'OID \d+', 'OID <oid>', 'g');
  IF length(msg) > 160 THEN
    msg := left(msg, 150) || ' ...';
  END IF;
  INSERT INTO bi_log (entry, statement, sqlstate, message) VALUES (entry, statement, state, msg);
  RETURN state || ' ' || msg;
END $$;

-- Two groups of 30 points, none of them zero.
CREATE TABLE bi_pts AS
SELECT i AS id,
       ARRAY[(i % 2) * 10 + (i % 5) * 0.25 + 1, (i % 2) * 10 + (i % 3) * 0.5 + 1]::real[] AS v,
       ARRAY[(i % 2) * 10 + 1, 1]::float8[] AS v8,
       ARRAY[(i % 2) * 10 + 1, 1]::text[] AS vt,
       1.0::float8 AS w,
       'row ' || i AS t,
       '{"a": 1}'::jsonb AS j,
       i % 2 AS side
FROM generate_series(1, 60) i;
CREATE TABLE bi_model AS
SELECT kmeans_fit('bi_pts', 'v', 2, init_centroids => '{{1,1},{11,11}}') AS m;

\pset tuples_only on
\pset format unaligned

----------------------------------------------------------------------------
-- The kmeans aggregate: bad vectors.
SELECT bi('kmeans', $$SELECT kmeans(v, 2) FROM (VALUES ('{1,2}'::real[]), ('{1,2,3}')) t(v)$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2) FROM (VALUES ('{1,2,3}'::real[]), ('{1,2}')) t(v)$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 1) FROM (VALUES ('{{1,2},{3,4}}'::real[])) t(v)$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 1) FROM (VALUES ('{}'::real[])) t(v)$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 1) FROM (VALUES ('{1,NULL}'::real[])) t(v)$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 1) FROM (VALUES ('{NaN,1}'::real[])) t(v)$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 1) FROM (VALUES ('{1,Infinity}'::real[])) t(v)$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 1) FROM (VALUES ('{1,-Infinity}'::float8[])) t(v)$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 1) FROM (VALUES ('{1,NaN}'::float8[])) t(v)$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 1) FROM (VALUES ('{1e300,1}'::float8[])) t(v)$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 1) FROM (VALUES ('{1e-50,1}'::float8[])) t(v)$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 1) FROM (VALUES ('{1,-1e39}'::float8[])) t(v)$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 1, '{"metric": "cosine"}') FROM (VALUES ('{1,1}'::real[]), ('{0,0}')) t(v)$$);
-- one bad row after a thousand good ones
SELECT bi('kmeans', $$SELECT kmeans(CASE WHEN i = 1000 THEN '{1,NaN}'::real[] ELSE ARRAY[i, i]::real[] END, 2)
                      FROM generate_series(1, 2000) i$$);
-- top level, then the session is usable
SELECT kmeans(v, 1) FROM (VALUES ('{1,NaN}'::real[])) t(v);
SELECT count(*) AS usable FROM bi_pts;

-- The kmeans aggregate: k.
SELECT bi('kmeans', $$SELECT kmeans(v, 0) FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, -1) FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, NULL) FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 61) FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2147483647) FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, (id % 2) + 1) FROM bi_pts$$);
SELECT kmeans(v, 0) FROM bi_pts;
SELECT count(*) AS usable FROM bi_pts;

-- The kmeans aggregate: nothing to cluster.
SELECT bi('kmeans', $$SELECT kmeans(v, 2) FROM bi_pts WHERE false$$);
SELECT bi('kmeans', $$SELECT kmeans(NULL::real[], 2) FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT side, kmeans(CASE WHEN side = 1 THEN v END, 1) FROM bi_pts GROUP BY side$$);
SELECT kmeans(v, 2) FROM bi_pts WHERE false;
SELECT count(*) AS usable FROM bi_pts;

-- The kmeans aggregate: options that are not an object, unknown keys,
-- values of the wrong type or out of range.
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '[1, 2]') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '5') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '"seed"') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, 'null') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, 'true') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"max_iters": 5}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"Max_Iter": 5}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"weight_column": "w"}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"max_iter": 0}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"max_iter": -1}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"max_iter": 2.5}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"max_iter": "ten"}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"max_iter": true}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"max_iter": {"n": 1}}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"max_iter": [5]}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"max_iter": 1e20}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"tol": -0.1}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"tol": "small"}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"tol": "NaN"}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"tol": 1e400}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"seed": 1.5}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"seed": "abc"}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"seed": 1e30}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"n_init": 0}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"n_init": 3000000000}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"metric": 2}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"metric": "manhattan"}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"metric": "L1"}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"metric": ""}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init": true}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init": "kmeans##"}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"engine": "tpu"}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"engine": "cuda"}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"engine": 1}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"storage": "float64"}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"storage": 16}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"storage": ["float16"]}') FROM bi_pts$$);
-- values that round to infinity in half precision: the row is named
SELECT bi('kmeans', $$SELECT kmeans(ARRAY[i, CASE WHEN i = 3 THEN 65520 ELSE i END]::real[], 1, '{"storage": "float16"}') FROM generate_series(1, 5) i$$);
SELECT bi('kmeans', $$SELECT kmeans(ARRAY[i, CASE WHEN i = 2 THEN -1e5 ELSE i END]::float8[], 1, '{"storage": "float16"}') FROM generate_series(1, 5) i$$);
SELECT bi('kmeans', $$SELECT kmeans(ARRAY[i, CASE WHEN i = 4 THEN -3.4e38 ELSE i END]::real[], 1, '{"storage": "bfloat16"}') FROM generate_series(1, 5) i$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, o) FROM bi_pts, (VALUES ('{"seed": 1}'::jsonb), ('{"seed": 2}')) t(o)$$);
SELECT kmeans(v, 2, '[1, 2]') FROM bi_pts;
SELECT count(*) AS usable FROM bi_pts;

-- The kmeans aggregate: malformed explicit init.
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init": "explicit"}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init": "random", "init_centroids": [[0, 0], [1, 1]]}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init": "k-means++", "init_centroids": [[0, 0], [1, 1]]}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"n_init": 2, "init_centroids": [[0, 0], [1, 1]]}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init_centroids": [1, 2]}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init_centroids": "[[0, 0]]"}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init_centroids": {"0": [0, 0]}}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init_centroids": []}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init_centroids": [[], []]}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init_centroids": [[[0, 0]], [[1, 1]]]}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init_centroids": [[0, 0], [1]]}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init_centroids": [[0, 0], [1, "x"]]}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init_centroids": [[0, 0], [1, null]]}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init_centroids": [[0, 0]]}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init_centroids": [[0, 0], [1, 1], [2, 2]]}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init_centroids": [[0, 0, 0], [1, 1, 1]]}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init_centroids": [[0, 1e39], [1, 1]]}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init_centroids": [[0, 1e400], [1, 1]]}') FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"init_centroids": [[1, 1], [0, 0]], "metric": "cosine"}') FROM bi_pts$$);
SELECT kmeans(v, 2, '{"init_centroids": [[0, 0]]}') FROM bi_pts;
SELECT count(*) AS usable FROM bi_pts;

-- The kmeans aggregate: wrong types (rejected by PostgreSQL's function lookup).
SELECT bi('kmeans', $$SELECT kmeans(ARRAY[true, false], 1)$$);
SELECT bi('kmeans', $$SELECT kmeans('{1,2}', 1)$$);
SELECT bi('kmeans', $$SELECT kmeans(t, 1) FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2.5) FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2::bigint) FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{"seed": 1}'::text) FROM bi_pts$$);
SELECT bi('kmeans', $$SELECT kmeans(v, 2, '{seed: 1}'::jsonb) FROM bi_pts$$);
SELECT count(*) AS usable FROM bi_pts;

----------------------------------------------------------------------------
-- kmeans_fit: NULL arguments.
SELECT bi('kmeans_fit', $$SELECT kmeans_fit(NULL, 'v', 2)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', NULL, 2)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', NULL)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, max_iter => NULL)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, tol => NULL)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, init => NULL)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, metric => NULL)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, n_init => NULL)$$);
SELECT kmeans_fit('bi_pts', 'v', NULL);
SELECT count(*) AS usable FROM bi_pts;

-- kmeans_fit: relations that are missing, dropped or not tables.
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_no_such_table', 'v', 2)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts"; DROP TABLE bi_pts; --', 'v', 2)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('no_such_schema.bi_pts', 'v', 2)$$);
CREATE TABLE bi_gone AS SELECT * FROM bi_pts;
CREATE TABLE bi_gone_oid AS SELECT 'bi_gone'::regclass::oid AS oid;
CREATE TABLE bi_gone_model AS SELECT kmeans_fit('bi_gone', 'v', 2, seed => 1) AS m;
DROP TABLE bi_gone;
SELECT bi('kmeans_fit', $$SELECT kmeans_fit((SELECT oid FROM bi_gone_oid)::regclass, 'v', 2)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit(0::regclass, 'v', 2)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit(4294967295::oid::regclass, 'v', 2)$$);
CREATE INDEX bi_pts_v ON bi_pts (v);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts_v', 'v', 2)$$);
CREATE TYPE bi_comp AS (v real[]);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_comp', 'v', 2)$$);
CREATE SEQUENCE bi_seq;
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_seq', 'last_value', 1)$$);
SELECT kmeans_fit('bi_no_such_table', 'v', 2);
SELECT count(*) AS usable FROM bi_pts;

-- kmeans_fit: columns that are missing or of the wrong type.
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'no_such_column', 2)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'V', 2)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v, v', 2)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', '', 2)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'ctid', 2)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'id', 2)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 't', 2)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'j', 2)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, weight_column => 't')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, weight_column => 'v')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, weight_column => 'no_such_column')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, weight_column => 'xmin')$$);
SELECT kmeans_fit('bi_pts', 'no_such_column', 2);
SELECT count(*) AS usable FROM bi_pts;

-- kmeans_fit: bad rows in the table.
CREATE TABLE bi_rows (v real[], v8 float8[], vn numeric[], vt text[], w float8);
INSERT INTO bi_rows SELECT ARRAY[i, i], ARRAY[i, i], ARRAY[i, i], ARRAY[i, i], 1
FROM generate_series(1, 10) i;
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_rows', 'v', 11)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_rows', 'v', 0)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_rows', 'v', -5)$$);
INSERT INTO bi_rows VALUES ('{1,2,3}', '{1,NaN}', '{1,NULL}', '{1,x}', -1);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_rows', 'v', 2)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_rows', 'v8', 2)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_rows', 'vn', 2)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_rows', 'vt', 2)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_rows', 'v8', 2, weight_column => 'w')$$);
UPDATE bi_rows SET v = '{1,1}', v8 = '{1,1}', w = 'NaN' WHERE w = -1;
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_rows', 'v', 2, weight_column => 'w')$$);
UPDATE bi_rows SET w = 'Infinity' WHERE w = 'NaN';
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_rows', 'v', 2, weight_column => 'w')$$);
UPDATE bi_rows SET w = 1e300 WHERE w = 'Infinity';
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_rows', 'v', 2, weight_column => 'w')$$);
UPDATE bi_rows SET w = 0, v8 = '{0,0}';
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_rows', 'v', 2, weight_column => 'w')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_rows', 'v8', 2, metric => 'cosine')$$);
-- values that round to infinity in half precision; a row that rounds to zeros under cosine
TRUNCATE bi_rows;
INSERT INTO bi_rows (v, v8) VALUES ('{1,2}', '{1,2}'), (NULL, NULL), ('{3,65520}', '{3,65520}');
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_rows', 'v', 2, storage => 'float16')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_rows', 'v8', 1, storage => 'half')$$);
UPDATE bi_rows SET v8 = '{3,3.4e38}' WHERE v8[1] = 3;
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_rows', 'v8', 2, storage => 'bfloat16')$$);
UPDATE bi_rows SET v = '{1e-8,-1e-8}' WHERE v[1] = 3;
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_rows', 'v', 2, metric => 'cosine', storage => 'float16')$$);
CREATE TABLE bi_empty (v real[]);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_empty', 'v', 1)$$);
INSERT INTO bi_empty VALUES (NULL), (NULL);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_empty', 'v', 1)$$);
CREATE VIEW bi_failing_view AS SELECT ARRAY[1 / (id - 30), 1]::real[] AS v FROM bi_pts;
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_failing_view', 'v', 2)$$);
SELECT kmeans_fit('bi_empty', 'v', 1);
SELECT count(*) AS usable FROM bi_pts;

-- kmeans_fit: bad option values and malformed explicit init.
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, max_iter => 0)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, max_iter => -2147483648)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, tol => -1)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, tol => 'NaN')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, tol => 'Infinity')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, n_init => 0)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, init => 'farthest')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, init => '')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, metric => 'dot')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, engine => 'tpu')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, engine => '')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, init => 'explicit')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, init_centroids => '{1,2}')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, init_centroids => '{{{1,2}},{{3,4}}}')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, init_centroids => '{}')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, init_centroids => '{{1,2}}')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, init_centroids => '{{1,2,3},{4,5,6}}')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, init_centroids => '{{1,NULL},{4,5}}')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, init_centroids => '{{1,NaN},{4,5}}')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, init_centroids => '{{1,2},{-Infinity,5}}')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, init_centroids => '{{1,2},{0,0}}', metric => 'cosine')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, init_centroids => '{{1,2},{4,5}}', init => 'random')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, init_centroids => '{{1,2},{4,5}}', n_init => 3)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, storage => 'float8')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, storage => '')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, storage => NULL)$$);
SELECT kmeans_fit('bi_pts', 'v', 2, init_centroids => '{{1,NaN},{4,5}}');
SELECT count(*) AS usable FROM bi_pts;

-- kmeans_fit: wrong types.
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, metric => 3)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 'two')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, init_centroids => '{{1,x},{4,5}}')$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, no_such_argument => 1)$$);
SELECT bi('kmeans_fit', $$SELECT kmeans_fit('bi_pts', 'v', 2, seed => 1e30::numeric)$$);
SELECT count(*) AS usable FROM bi_pts;

----------------------------------------------------------------------------
-- kmeans_centroids: models built by hand with inconsistent fields.
--   fields: k, dim, metric, centroids, sizes, inertia, iterations, converged,
--   engine, n_rows, n_skipped, cluster_inertia, init, seed, n_init, max_iter, tol
CREATE FUNCTION bi_model(k int, dim int, metric text, centroids real[],
                         sizes bigint[] DEFAULT NULL, cluster_inertia float8[] DEFAULT NULL)
RETURNS kmeans_model LANGUAGE sql AS $$
  SELECT ROW(k, dim, metric, centroids, sizes, NULL, NULL, NULL, NULL, NULL, NULL,
             cluster_inertia, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model
$$;
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(2, 1, 'l2', NULL))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(NULL, 1, 'l2', '{{0},{10}}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(2, NULL, 'l2', '{{0},{10}}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(2, 1, NULL, '{{0},{10}}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(0, 1, 'l2', '{{0},{10}}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(-2, 1, 'l2', '{{0},{10}}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(2, 0, 'l2', '{{0},{10}}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(3, 1, 'l2', '{{0},{10}}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(2, 2, 'l2', '{{0},{10}}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(2, 1, 'l2', '{0,10}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(2, 1, 'l2', '{{{0}},{{10}}}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(2, 1, 'l2', '{{0},{NaN}}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(2, 1, 'l2', '{{0},{Infinity}}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(2, 1, 'l2', '{{0},{NULL}}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(2, 1, 'hamming', '{{0},{10}}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(2, 1, 'cosine', '{{0},{10}}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(2, 1, 'l2', '{{0},{10}}', '{1,2,3}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(2, 1, 'l2', '{{0},{10}}', '{1,NULL}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(2, 1, 'l2', '{{0},{10}}', '{{1},{2}}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(2, 1, 'l2', '{{0},{10}}', NULL, '{1}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(bi_model(2, 1, 'l2', '{{0},{10}}', NULL, '{1,NULL}'))$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids(ROW(1, 2)::kmeans_model)$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids('(2,1,l2,"{{0},{x}}",,,,,,,,,,,,,,)'::kmeans_model)$$);
SELECT bi('kmeans_centroids', $$SELECT * FROM kmeans_centroids('{"k": 2}'::jsonb)$$);
SELECT * FROM kmeans_centroids(bi_model(3, 1, 'l2', '{{0},{10}}'));
SELECT count(*) AS usable FROM bi_pts;

----------------------------------------------------------------------------
-- kmeans_assign: vectors that do not fit the model, and inconsistent models.
SELECT bi('kmeans_assign', $$SELECT kmeans_assign(m, '{1,2,3}'::real[]) FROM bi_model$$);
SELECT bi('kmeans_assign', $$SELECT kmeans_assign(m, '{1}'::float8[]) FROM bi_model$$);
SELECT bi('kmeans_assign', $$SELECT kmeans_assign(m, '{{1,2},{3,4}}'::real[]) FROM bi_model$$);
SELECT bi('kmeans_assign', $$SELECT kmeans_assign(m, '{}'::real[]) FROM bi_model$$);
SELECT bi('kmeans_assign', $$SELECT kmeans_assign(m, '{1,NULL}'::real[]) FROM bi_model$$);
SELECT bi('kmeans_assign', $$SELECT kmeans_assign(m, '{1,NaN}'::real[]) FROM bi_model$$);
SELECT bi('kmeans_assign', $$SELECT kmeans_assign(m, '{Infinity,1}'::float8[]) FROM bi_model$$);
SELECT bi('kmeans_assign', $$SELECT kmeans_assign(m, '{1,1e300}'::float8[]) FROM bi_model$$);
SELECT bi('kmeans_assign', $$SELECT kmeans_assign(m, array_fill(1::real, ARRAY[1000000])) FROM bi_model$$);
SELECT bi('kmeans_assign', $$SELECT kmeans_assign(bi_model(2, 2, 'cosine', '{{1,0},{0,1}}'), '{0,0}'::real[])$$);
SELECT bi('kmeans_assign', $$SELECT kmeans_assign(bi_model(3, 1, 'l2', '{{0},{10}}'), '{6}'::real[])$$);
SELECT bi('kmeans_assign', $$SELECT kmeans_assign(bi_model(2, 1, 'l2', '{{0},{NaN}}'), '{6}'::real[])$$);
SELECT bi('kmeans_assign', $$SELECT kmeans_assign(bi_model(2, 1, 'l1', '{{0},{10}}'), '{6}'::real[])$$);
SELECT bi('kmeans_assign', $$SELECT kmeans_assign(v, v) FROM bi_pts$$);
-- a model whose rows were float16 rounds the vector too; a storage no fit names
SELECT bi('kmeans_assign', $$SELECT kmeans_assign(json_populate_record(m, '{"storage": "float16"}'), '{1,1e5}'::real[]) FROM bi_model$$);
SELECT bi('kmeans_assign', $$SELECT kmeans_assign(json_populate_record(m, '{"storage": "fp8"}'), '{1,2}'::real[]) FROM bi_model$$);
SELECT bi('kmeans_assign', $$SELECT kmeans_assign(m, '{1,2}') FROM bi_model$$);
SELECT bi('kmeans_assign', $$SELECT kmeans_assign(m, t) FROM bi_model, bi_pts$$);
-- the first rows are fine, the bad one fails the statement
SELECT bi('kmeans_assign', $$SELECT kmeans_assign(m, CASE WHEN id = 40 THEN '{1,2,3}' ELSE v END) FROM bi_model, bi_pts$$);
SELECT kmeans_assign(m, '{1,2,3}'::real[]) FROM bi_model;
SELECT count(*) AS usable FROM bi_pts;

----------------------------------------------------------------------------
-- kmeans_labels: NULL arguments, missing and dropped relations and columns.
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels(NULL, 'bi_pts', 'v', 'id')$$);
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels((SELECT m FROM bi_model), NULL, 'v', 'id')$$);
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels((SELECT m FROM bi_model), 'bi_pts', NULL, 'id')$$);
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels((SELECT m FROM bi_model), 'bi_pts', 'v', NULL)$$);
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels((SELECT m FROM bi_model), 'bi_no_such_table', 'v', 'id')$$);
-- the table was dropped between fitting and labelling: by name, by its OID
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels((SELECT m FROM bi_gone_model), 'bi_gone', 'v', 'id')$$);
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels((SELECT m FROM bi_gone_model), (SELECT oid FROM bi_gone_oid)::regclass, 'v', 'id')$$);
-- columns dropped or renamed between fitting and labelling
CREATE TABLE bi_alter AS SELECT id, v, v AS v2 FROM bi_pts;
CREATE TABLE bi_alter_model AS SELECT kmeans_fit('bi_alter', 'v', 2, seed => 1) AS m;
ALTER TABLE bi_alter DROP COLUMN v;
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels((SELECT m FROM bi_alter_model), 'bi_alter', 'v', 'id')$$);
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels((SELECT m FROM bi_alter_model), 'bi_alter', '........pg.dropped.2........', 'id')$$);
ALTER TABLE bi_alter RENAME COLUMN id TO ident;
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels((SELECT m FROM bi_alter_model), 'bi_alter', 'v2', 'id')$$);
ALTER TABLE bi_alter DROP COLUMN ident;
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels((SELECT m FROM bi_alter_model), 'bi_alter', 'v2', 'ident')$$);
-- columns of the wrong type, system columns
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels((SELECT m FROM bi_model), 'bi_pts', 'v', 't')$$);
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels((SELECT m FROM bi_model), 'bi_pts', 'v', 'v')$$);
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels((SELECT m FROM bi_model), 'bi_pts', 't', 'id')$$);
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels((SELECT m FROM bi_model), 'bi_pts', 'v', 'ctid')$$);
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels((SELECT m FROM bi_model), 'bi_pts', 'tableoid', 'id')$$);
-- rows that do not fit the model
CREATE TABLE bi_lab (id int, v real[]);
INSERT INTO bi_lab VALUES (1, '{1,1}'), (2, '{1,1,1}');
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels((SELECT m FROM bi_model), 'bi_lab', 'v', 'id')$$);
UPDATE bi_lab SET v = '{NaN,1}' WHERE id = 2;
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels((SELECT m FROM bi_model), 'bi_lab', 'v', 'id')$$);
UPDATE bi_lab SET v = '{0,0}' WHERE id = 2;
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels(bi_model(2, 2, 'cosine', '{{1,0},{0,1}}'), 'bi_lab', 'v', 'id')$$);
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels(bi_model(2, 2, 'l2', '{{1,0}}'), 'bi_lab', 'v', 'id')$$);
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels((SELECT m FROM bi_model), 'bi_lab', 'v', 5)$$);
-- a float16 model: the row that its rounding cannot hold is named by its id
UPDATE bi_lab SET v = '{1,-70000}' WHERE id = 2;
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels(json_populate_record((SELECT m FROM bi_model), '{"storage": "float16"}'), 'bi_lab', 'v', 'id')$$);
SELECT bi('kmeans_labels', $$SELECT * FROM kmeans_labels(json_populate_record((SELECT m FROM bi_model), '{"storage": "Float16 "}'), 'bi_lab', 'v', 'id')$$);
SELECT * FROM kmeans_labels((SELECT m FROM bi_alter_model), 'bi_alter', 'v', 'ident');
SELECT count(*) AS usable FROM bi_pts;

----------------------------------------------------------------------------
-- kmeans_cluster (window function).
SELECT bi('kmeans_cluster', $$SELECT kmeans_cluster(v, (id % 2) + 1) OVER () FROM bi_pts$$);
SELECT bi('kmeans_cluster', $$SELECT kmeans_cluster(v, NULL) OVER () FROM bi_pts$$);
SELECT bi('kmeans_cluster', $$SELECT kmeans_cluster(v, 0) OVER () FROM bi_pts$$);
SELECT bi('kmeans_cluster', $$SELECT kmeans_cluster(v, 31) OVER (PARTITION BY side) FROM bi_pts$$);
SELECT bi('kmeans_cluster', $$SELECT kmeans_cluster(v, 2, CASE WHEN id = 3 THEN '{"seed": 1}'::jsonb END) OVER () FROM bi_pts$$);
SELECT bi('kmeans_cluster', $$SELECT kmeans_cluster(v, 2, '[1]') OVER () FROM bi_pts$$);
SELECT bi('kmeans_cluster', $$SELECT kmeans_cluster(v, 2, '{"metric": "nope"}') OVER () FROM bi_pts$$);
SELECT bi('kmeans_cluster', $$SELECT kmeans_cluster(v, 2, '{"engine": "fpga"}') OVER () FROM bi_pts$$);
SELECT bi('kmeans_cluster', $$SELECT kmeans_cluster(v, 2, '{"storage": "int8"}') OVER () FROM bi_pts$$);
SELECT bi('kmeans_cluster', $$SELECT kmeans_cluster(ARRAY[i, i * 1e4]::real[], 1, '{"storage": "half"}') OVER () FROM generate_series(1, 8) i$$);
SELECT bi('kmeans_cluster', $$SELECT kmeans_cluster(v, 2, '{"init_centroids": [[0, 0]]}') OVER () FROM bi_pts$$);
SELECT bi('kmeans_cluster', $$SELECT kmeans_cluster(v, 2) OVER () FROM (VALUES ('{1,2}'::real[]), ('{1}')) t(v)$$);
SELECT bi('kmeans_cluster', $$SELECT kmeans_cluster(v, 1) OVER () FROM (VALUES ('{1,NaN}'::float8[])) t(v)$$);
SELECT bi('kmeans_cluster', $$SELECT kmeans_cluster(NULL::real[], 2) OVER () FROM bi_pts$$);
SELECT bi('kmeans_cluster', $$SELECT kmeans_cluster(CASE WHEN side = 0 THEN v END, 1) OVER (PARTITION BY side) FROM bi_pts$$);
SELECT bi('kmeans_cluster', $$SELECT kmeans_cluster(v, 2) FROM bi_pts$$);
SELECT kmeans_cluster(v, 2, '[1]') OVER () FROM bi_pts;
SELECT count(*) AS usable FROM bi_pts;

----------------------------------------------------------------------------
-- The settings: bad values.
SELECT bi('GUC', $$SET kmeans_gpu.engine = 'tpu'$$);
SELECT bi('GUC', $$SET kmeans_gpu.engine = ''$$);
SELECT bi('GUC', $$SET kmeans_gpu.max_memory = '10kB'$$);
SELECT bi('GUC', $$SET kmeans_gpu.max_memory = -1$$);
SELECT bi('GUC', $$SET kmeans_gpu.max_memory = '12 parsecs'$$);
SELECT bi('GUC', $$SET kmeans_gpu.max_memory = '1000000TB'$$);
SELECT bi('GUC', $$SET kmeans_gpu.cpu_threads = -1$$);
SELECT bi('GUC', $$SET kmeans_gpu.cpu_threads = 5000$$);
SELECT bi('GUC', $$SET kmeans_gpu.cpu_threads = 'many'$$);
SELECT bi('GUC', $$SET kmeans_gpu.spill_threshold = '2GB'$$);
SELECT bi('GUC', $$SET kmeans_gpu.spill_threshold = -1$$);
SELECT bi('GUC', $$SET kmeans_gpu."verbose" = 'maybe'$$);
SELECT bi('GUC', $$SET kmeans_gpu.device = -2$$);
SELECT bi('GUC', $$SET kmeans_gpu.device = 256$$);
SELECT bi('GUC', $$SET kmeans_gpu.device = 'first'$$);
SELECT bi('GUC', $$SET kmeans_gpu.gpu_wait = -1$$);
SELECT bi('GUC', $$SET kmeans_gpu.gpu_wait = 'forever'$$);
SELECT bi('GUC', $$SET kmeans_gpu.devices = ''$$);
SELECT bi('GUC', $$SET kmeans_gpu.devices = '0,'$$);
SELECT bi('GUC', $$SET kmeans_gpu.devices = '0;1'$$);
SELECT bi('GUC', $$SET kmeans_gpu.devices = '-1'$$);
SELECT bi('GUC', $$SET kmeans_gpu.devices = 'first'$$);
SELECT bi('GUC', $$SET kmeans_gpu.devices = 'all,0'$$);
SELECT bi('GUC', $$SET kmeans_gpu.devices = '256'$$);
SELECT bi('GUC', $$SET kmeans_gpu.devices = '99999999999999999999'$$);
SELECT bi('GUC', $$SET kmeans_gpu.devices = '0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0'$$);
SELECT bi('GUC', $$SET kmeans_gpu.gpu_memory_limit = -1$$);
SELECT bi('GUC', $$SET kmeans_gpu.gpu_memory_limit = '1 parsec'$$);
SELECT bi('GUC', $$SET kmeans_gpu.gpu_memory_limit = '10000TB'$$);
SELECT bi('GUC', $$SELECT * FROM kmeans_gpu_devices(0)$$);
SELECT bi('GUC', $$SET kmeans_gpu.no_such_setting = 1$$);
SELECT bi('GUC', $$SELECT set_config('kmeans_gpu.engine', 'fpga', false)$$);
SET kmeans_gpu.engine = 'tpu';
SELECT current_setting('kmeans_gpu.engine') <> 'tpu' AS bad_value_not_taken;

-- The settings: kmeans_gpu.max_memory too small for the call.  Each fails
-- before the memory is taken (figures for 2 threads of the CPU engine).
SELECT bi('GUC', $$SET LOCAL kmeans_gpu.max_memory = '1MB';
                   SELECT kmeans(ARRAY[i, i]::real[], 3) FROM generate_series(1, 200000) i$$);
CREATE TABLE bi_big AS SELECT ARRAY[i, i, i, i]::real[] AS v FROM generate_series(1, 100000) i;
ANALYZE bi_big;
SELECT bi('GUC', $$SET LOCAL kmeans_gpu.max_memory = '1MB'; SELECT kmeans_fit('bi_big', 'v', 3)$$);
-- without statistics kmeans_fit finds out as rows come in
CREATE TABLE bi_big_nostats (v real[]) WITH (autovacuum_enabled = off);
INSERT INTO bi_big_nostats SELECT v FROM bi_big;
SELECT bi('GUC', $$SET LOCAL kmeans_gpu.max_memory = '1MB'; SELECT kmeans_fit('bi_big_nostats', 'v', 3)$$);
-- huge k: the engine's share
SELECT bi('GUC', $$SET LOCAL kmeans_gpu.max_memory = '2MB';
                   SELECT kmeans(ARRAY[i, i]::real[], 20000) FROM generate_series(1, 20000) i$$);
SELECT bi('GUC', $$SET LOCAL kmeans_gpu.max_memory = '2MB';
                   SELECT kmeans_cluster(ARRAY[i, i]::real[], 20000) OVER () FROM generate_series(1, 20000) i$$);
-- huge d: vectors of a million values
SELECT bi('GUC', $$SET LOCAL kmeans_gpu.max_memory = '16MB';
                   SELECT kmeans(array_fill(i::real, ARRAY[1000000]), 2) FROM generate_series(1, 10) i$$);
SELECT bi('GUC', $$SET LOCAL kmeans_gpu.max_memory = '8MB';
                   SELECT count(*) FROM kmeans_labels(bi_model(1, 1000000, 'l2', array_fill(0::real, ARRAY[1, 1000000])),
                                                      'bi_pts', 'v', 'id')$$);
SELECT count(*) AS usable FROM bi_pts;

----------------------------------------------------------------------------
-- How many inputs were tried, per entry point; every one must have failed
-- with an error that is not an internal one (class XX).
\pset tuples_only off
\pset format aligned
SELECT coalesce(entry, 'all') AS entry, count(*) AS inputs,
       count(*) FILTER (WHERE sqlstate <> 'none' AND sqlstate NOT LIKE 'XX%') AS clean_errors,
       count(DISTINCT sqlstate) AS sqlstates
FROM bi_log GROUP BY ROLLUP (entry) ORDER BY grouping(entry), entry;
SELECT sqlstate, count(*) FROM bi_log GROUP BY 1 ORDER BY 1;
SELECT n, entry, statement, message FROM bi_log WHERE sqlstate = 'none' OR sqlstate LIKE 'XX%';

RESET kmeans_gpu.engine;
RESET kmeans_gpu.cpu_threads;
DROP FUNCTION bi(text, text);
DROP FUNCTION bi_model(int, int, text, real[], bigint[], float8[]);
DROP VIEW bi_failing_view;
DROP TYPE bi_comp;
DROP SEQUENCE bi_seq;
DROP TABLE bi_log, bi_pts, bi_model, bi_gone_oid, bi_gone_model, bi_alter, bi_alter_model,
           bi_rows, bi_empty, bi_lab, bi_big, bi_big_nostats;
