-- Bad input to k-medoids, kmeans_score, kmeans_sweep and afk-mc2: every case
-- a clean ERROR with its SQLSTATE, the session still usable afterwards.
-- kb(statement) runs a statement, catches its error and prints the SQLSTATE,
-- the message and the detail; one that does not fail prints "NO ERROR".
SET kmeans_gpu.engine = cpu;
CREATE TABLE kb_pts (id bigint, v real[], sig real[], w float8);
INSERT INTO kb_pts
SELECT i, ARRAY[i % 5, i % 3]::real[],
       ARRAY[ARRAY[1, i % 5, i % 3], ARRAY[2, i % 4, 1]]::real[], 1
FROM generate_series(1, 40) i;
CREATE TABLE kb_sigs (sig real[]);
CREATE TABLE kb_ids (id bigint, v real[]);
INSERT INTO kb_ids VALUES (1, '{1,1}'), (2, '{2,2}'), (2, '{3,3}'), (3, '{4,4}');
CREATE TABLE kb_nullids (id bigint, v real[]);
INSERT INTO kb_nullids VALUES (1, '{1,1}'), (NULL, '{2,2}'), (3, '{4,4}');
CREATE TABLE kb_empty (id bigint, v real[]);
CREATE FUNCTION kb(statement text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  state text := 'none';
  msg text := 'NO ERROR';
  detail text;
BEGIN
  BEGIN
    EXECUTE statement;
  EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, detail = PG_EXCEPTION_DETAIL;
  END;
  RETURN state || ' ' || msg || coalesce(' [' || nullif(detail, '') || ']', '');
END $$;
-- figures in memory messages depend on the thread count
SET kmeans_gpu.cpu_threads = 2;
\pset tuples_only on
\pset format unaligned

-- unknown metric, method, init; bad options
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'v', 2, metric => 'hamming')$$);
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'v', 2, method => 'pam')$$);
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'v', 2, init => 'explicit')$$);
SELECT kb($$SELECT kmedoids(v, 2, '{"metric": "euclid"}') FROM kb_pts$$);
SELECT kb($$SELECT kmedoids(v, 2, '{"method": "clara"}') FROM kb_pts$$);
SELECT kb($$SELECT kmedoids(v, 2, '{"init": "build"}') FROM kb_pts$$);
SELECT kb($$SELECT kmedoids(v, 2, '{"tol": 0.1}') FROM kb_pts$$);
SELECT kb($$SELECT kmedoids(v, 2, '{"metric": 1}') FROM kb_pts$$);
SELECT kb($$SELECT kmedoids(v, 2, '[1, 2]') FROM kb_pts$$);
SELECT kb($$SELECT kmedoids(v, 2, '{"max_iter": 0}') FROM kb_pts$$);
SELECT kb($$SELECT kmedoids(v, 2, '{"chain_length": 1.5}') FROM kb_pts$$);
-- k, max_iter, chain_length, alpha
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'v', 0)$$);
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'v', 41)$$);
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'v', NULL)$$);
SELECT kb($$SELECT kmedoids(v, NULL) FROM kb_pts$$);
SELECT kb($$SELECT kmedoids(v, id::int % 2 + 1) FROM kb_pts$$);
SELECT kb($$SELECT kmedoids(v, 2, CASE WHEN id < 5 THEN '{"seed": 1}'::jsonb ELSE '{"seed": 2}' END) FROM kb_pts$$);
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'v', 2, max_iter => 0)$$);
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'v', 2, init => 'afk-mc2', chain_length => 0)$$);
SELECT kb($$SELECT kmedoids_fit('kb_sigs', 'sig', 2, metric => 'sqfd', alpha => 0)$$);
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'sig', 2, metric => 'sqfd', alpha => -1)$$);
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'sig', 2, metric => 'sqfd', alpha => 'NaN')$$);
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'sig', 2, metric => 'sqfd', alpha => 'Infinity')$$);
SELECT kb($$SELECT kmedoids(sig, 2, '{"metric": "sqfd", "alpha": 0}') FROM kb_pts$$);
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'v', 2, metric => NULL)$$);
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'v', 2, alpha => NULL)$$);
-- no rows
SELECT kb($$SELECT kmedoids_fit('kb_empty', 'v', 2)$$);
SELECT kb($$SELECT kmedoids(v, 2) FROM kb_empty$$);
SELECT kb($$SELECT kmedoids(v, 2) FROM kb_pts WHERE v IS NULL$$);

-- sqfd signatures: not two-dimensional, features of one value, features of
-- different lengths, negative or all-zero weights, NULL, NaN
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'v', 2, metric => 'sqfd')$$);
SELECT kb($$SELECT kmedoids(s, 2, '{"metric": "sqfd"}')
FROM (VALUES ('{{{1,2}}}'::real[]), ('{{1,2}}')) t(s)$$);
SELECT kb($$SELECT kmedoids(s, 2, '{"metric": "sqfd"}')
FROM (VALUES ('{{1},{2}}'::real[]), ('{{3},{4}}')) t(s)$$);
SELECT kb($$SELECT kmedoids(s, 2, '{"metric": "sqfd"}')
FROM (VALUES ('{{1,2,3}}'::real[]), ('{{1,2}}')) t(s)$$);
SELECT kb($$SELECT kmedoids(s, 2, '{"metric": "sqfd"}')
FROM (VALUES ('{{1,2},{-0.5,3}}'::real[]), ('{{1,2}}')) t(s)$$);
SELECT kb($$SELECT kmedoids(s, 2, '{"metric": "sqfd"}')
FROM (VALUES ('{{0,2},{0,3}}'::real[]), ('{{1,2}}')) t(s)$$);
SELECT kb($$SELECT kmedoids(s, 2, '{"metric": "sqfd"}')
FROM (VALUES ('{{1,NULL}}'::real[]), ('{{1,2}}')) t(s)$$);
SELECT kb($$SELECT kmedoids(s, 2, '{"metric": "sqfd"}')
FROM (VALUES ('{{1,NaN}}'::real[]), ('{{1,2}}')) t(s)$$);
SELECT kb($$SELECT kmedoids(s, 2, '{"metric": "sqfd"}')
FROM (VALUES ('{{1,1e300}}'::float8[]), ('{{1,2}}')) t(s)$$);
INSERT INTO kb_sigs VALUES ('{{1,2,3}}'), ('{{1,2,3},{1,4,5}}'), ('{{1,2}}');
SELECT kb($$SELECT kmedoids_fit('kb_sigs', 'sig', 2, metric => 'sqfd')$$);
-- vectors for the other metrics: not one-dimensional, different lengths,
-- zero vectors with cosine
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'sig', 2)$$);
SELECT kb($$SELECT kmedoids(s, 1) FROM (VALUES ('{1,2}'::real[]), ('{1,2,3}')) t(s)$$);
SELECT kb($$SELECT kmedoids(s, 1, '{"metric": "cosine"}') FROM (VALUES ('{1,2}'::real[]), ('{0,0}')) t(s)$$);

-- id columns with NULLs or duplicates
SELECT kb($$SELECT kmedoids_fit('kb_nullids', 'v', 2, id_column => 'id')$$);
SELECT kb($$SELECT kmedoids_fit('kb_ids', 'v', 2, id_column => 'id')$$);
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'v', 2, id_column => 'nope')$$);
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'v', 2, id_column => 'sig')$$);
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'nope', 2)$$);
SELECT kb($$SELECT kmedoids_fit('kb_missing', 'v', 2)$$);

-- engines: FasterPAM runs on the CPU engine only, so 'gpu' refuses it, with
-- or without a GPU ('gpu' with the alternating method: kmedoids_gpu.sql)
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'v', 2, method => 'fasterpam', engine => 'gpu')$$);
SELECT kb($$SELECT kmedoids(v, 2, '{"engine": "gpu", "method": "fasterpam"}') FROM kb_pts$$);
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'v', 2, engine => 'tpu')$$);
SET kmeans_gpu.engine = gpu;
SELECT kb($$SELECT kmedoids_fit('kb_pts', 'v', 2, method => 'fasterpam')$$);
SET kmeans_gpu.engine = cpu;

-- a model of one type where the other is expected
CREATE TABLE kb_models AS
SELECT kmeans_fit('kb_pts', 'v', 2, seed => 1) AS km,
       kmedoids_fit('kb_pts', 'v', 2, seed => 1) AS kmd,
       kmedoids_fit('kb_pts', 'sig', 2, seed => 1, metric => 'sqfd') AS ksig;
SELECT kb($$SELECT kmedoids_assign(km, '{1,2}'::real[]) FROM kb_models$$);
SELECT kb($$SELECT kmeans_assign(kmd, '{1,2}'::real[]) FROM kb_models$$);
SELECT kb($$SELECT * FROM kmedoids_labels((SELECT km FROM kb_models), 'kb_pts', 'v', 'id')$$);
SELECT kb($$SELECT * FROM kmeans_labels((SELECT kmd FROM kb_models), 'kb_pts', 'v', 'id')$$);
SELECT kb($$SELECT * FROM kmeans_centroids((SELECT kmd FROM kb_models))$$);
SELECT kb($$SELECT (SELECT kmd FROM kb_models)::kmeans_model$$);
SELECT kb($$SELECT (SELECT km FROM kb_models)::kmedoids_model$$);

-- kmedoids_assign: rows that do not fit the model
SELECT kb($$SELECT kmedoids_assign(kmd, '{1,2,3}'::real[]) FROM kb_models$$);
SELECT kb($$SELECT kmedoids_assign(kmd, '{{1,2}}'::real[]) FROM kb_models$$);
SELECT kb($$SELECT kmedoids_assign(ksig, '{1,2,3}'::real[]) FROM kb_models$$);
SELECT kb($$SELECT kmedoids_assign(ksig, '{{1,2}}'::real[]) FROM kb_models$$);
SELECT kb($$SELECT kmedoids_assign(ksig, '{{-1,2,3}}'::real[]) FROM kb_models$$);
SELECT kb($$SELECT kmedoids_assign(kmedoids_fit('kb_pts', 'v', 2, seed => 1, metric => 'cosine'), '{0,0}'::real[])$$);
SELECT kb($$SELECT * FROM kmedoids_labels((SELECT kmd FROM kb_models), 'kb_pts', 'sig', 'id')$$);
SELECT kb($$SELECT * FROM kmedoids_labels((SELECT kmd FROM kb_models), 'kb_pts', 'v', NULL)$$);
SELECT kb($$SELECT * FROM kmedoids_labels(NULL, 'kb_pts', 'v', 'id')$$);

-- models built by hand
SELECT kb($$SELECT kmedoids_assign(ROW(2, 2, 'hamming', '{{1,2},{3,4}}', NULL, NULL, 0, 1, true, 'cpu', 2, 0,
                           NULL, 'alternate', 'random', 1, 10, NULL, NULL, NULL)::kmedoids_model,
                       '{1,2}'::real[])$$);
SELECT kb($$SELECT kmedoids_assign(ROW(3, 2, 'l2', '{{1,2},{3,4}}', NULL, NULL, 0, 1, true, 'cpu', 2, 0,
                           NULL, 'alternate', 'random', 1, 10, NULL, NULL, NULL)::kmedoids_model,
                       '{1,2}'::real[])$$);
SELECT kb($$SELECT kmedoids_assign(ROW(2, 2, 'l2', '{{1,NaN},{3,4}}', NULL, NULL, 0, 1, true, 'cpu', 2, 0,
                           NULL, 'alternate', 'random', 1, 10, NULL, NULL, NULL)::kmedoids_model,
                       '{1,2}'::real[])$$);
SELECT kb($$SELECT kmedoids_assign(ROW(2, 2, 'cosine', '{{0,0},{3,4}}', NULL, NULL, 0, 1, true, 'cpu', 2, 0,
                           NULL, 'alternate', 'random', 1, 10, NULL, NULL, NULL)::kmedoids_model,
                       '{1,2}'::real[])$$);
SELECT kb($$SELECT kmedoids_assign(ROW(1, 2, 'sqfd', '{{{1,2}}}', NULL, NULL, 0, 1, true, 'cpu', 2, 0,
                           NULL, 'alternate', 'random', 1, 10, 1.0, NULL, NULL)::kmedoids_model,
                       '{{1,2}}'::real[])$$);
SELECT kb($$SELECT kmedoids_assign(ROW(1, 2, 'sqfd', '{{{1,2}}}', NULL, NULL, 0, 1, true, 'cpu', 2, 0,
                           NULL, 'alternate', 'random', 1, 10, 1.0, NULL, '{2}')::kmedoids_model,
                       '{{1,2}}'::real[])$$);
SELECT kb($$SELECT kmedoids_assign(ROW(1, 2, 'sqfd', '{{{1,2}}}', NULL, NULL, 0, 1, true, 'cpu', 2, 0,
                           NULL, 'alternate', 'random', 1, 10, NULL, NULL, '{1}')::kmedoids_model,
                       '{{1,2}}'::real[])$$);
SELECT kb($$SELECT kmedoids_assign(ROW(1, 2, 'sqfd', '{{{0,2}}}', NULL, NULL, 0, 1, true, 'cpu', 2, 0,
                           NULL, 'alternate', 'random', 1, 10, 1.0, NULL, '{1}')::kmedoids_model,
                       '{{1,2}}'::real[])$$);
SELECT kb($$SELECT kmedoids_assign(ROW(1, 2, 'sqfd', '{{{1,2}}}', NULL, NULL, 0, 1, true, 'cpu', 2, 0,
                           NULL, 'alternate', 'random', 1, 10, -2, NULL, '{1}')::kmedoids_model,
                       '{{1,2}}'::real[])$$);
-- a model built by hand that is right works
SELECT kmedoids_assign(ROW(2, 2, 'l1', '{{1,2},{3,4}}', NULL, NULL, 0, 1, true, 'cpu', 2, 0,
                           NULL, 'alternate', 'random', 1, 10, NULL, NULL, NULL)::kmedoids_model,
                       '{2.9,4}'::real[]);

-- kmeans_score: sample, NULLs, rows that do not fit
SELECT kb($$SELECT * FROM kmeans_score((SELECT km FROM kb_models), 'kb_pts', 'v', sample => 1)$$);
SELECT kb($$SELECT * FROM kmeans_score((SELECT kmd FROM kb_models), 'kb_pts', 'v', sample => -5)$$);
SELECT kb($$SELECT * FROM kmeans_score((SELECT kmd FROM kb_models), 'kb_pts', 'v', sample => NULL)$$);
SELECT kb($$SELECT * FROM kmeans_score(NULL::kmeans_model, 'kb_pts', 'v')$$);
SELECT kb($$SELECT * FROM kmeans_score((SELECT km FROM kb_models), 'kb_pts', NULL)$$);
SELECT kb($$SELECT * FROM kmeans_score((SELECT km FROM kb_models), 'kb_pts', 'sig')$$);
SELECT kb($$SELECT * FROM kmeans_score((SELECT ksig FROM kb_models), 'kb_pts', 'v')$$);
SELECT kb($$SELECT * FROM kmeans_score((SELECT km FROM kb_models), 'kb_empty', 'v')$$);
SELECT kb($$SELECT * FROM kmeans_score((SELECT kmd FROM kb_models), 'kb_missing', 'v')$$);

-- kmeans_sweep: ks empty, k < 1, duplicates, NULLs, k > n; explicit init
SELECT kb($$SELECT k FROM kmeans_sweep('kb_pts', 'v', '{}')$$);
SELECT kb($$SELECT k FROM kmeans_sweep('kb_pts', 'v', ARRAY[2, 0, 3])$$);
SELECT kb($$SELECT k FROM kmeans_sweep('kb_pts', 'v', ARRAY[2, 3, 2])$$);
SELECT kb($$SELECT k FROM kmeans_sweep('kb_pts', 'v', ARRAY[2, NULL])$$);
SELECT kb($$SELECT k FROM kmeans_sweep('kb_pts', 'v', '{{2,3}}')$$);
SELECT kb($$SELECT k FROM kmeans_sweep('kb_pts', 'v', NULL)$$);
SELECT kb($$SELECT k FROM kmeans_sweep('kb_pts', 'v', ARRAY[2, 41])$$);
SELECT kb($$SELECT k FROM kmeans_sweep('kb_pts', 'v', ARRAY[2], init => 'explicit')$$);
SELECT kb($$SELECT k FROM kmeans_sweep('kb_pts', 'v', ARRAY[2], sample => 1)$$);
SELECT kb($$SELECT k FROM kmeans_sweep('kb_pts', 'v', ARRAY[2], metric => 'l1')$$);
SELECT kb($$SELECT k FROM kmeans_sweep('kb_pts', 'v', ARRAY[2], chain_length => 0)$$);
SELECT kb($$SELECT k FROM kmeans_sweep('kb_empty', 'v', ARRAY[2])$$);
SELECT kb($$SELECT k FROM kmeans_sweep('kb_pts', 'v', ARRAY[2], weight_column => 'nope')$$);

-- afk-mc2 for k-means: chain_length (on the GPU engine afk-mc2 seeds on the
-- host and the GPU fits from its centroids, like k-means||: no error there)
SELECT kb($$SELECT kmeans_fit('kb_pts', 'v', 2, init => 'afk-mc2', chain_length => 0)$$);
SELECT kb($$SELECT kmeans_fit('kb_pts', 'v', 2, init => 'afk-mc2', chain_length => NULL)$$);
SELECT kb($$SELECT kmeans(v, 2, '{"init": "afk-mc2", "chain_length": -3}') FROM kb_pts$$);
SELECT kb($$SELECT kmeans(v, 2, '{"init": "afk-mc2", "chain_length": "long"}') FROM kb_pts$$);

-- too little memory
CREATE TABLE kb_big AS SELECT i AS id, array_fill((i % 7)::real, ARRAY[64]) AS v FROM generate_series(1, 5000) i;
CREATE TABLE kb_big_model AS SELECT kmedoids_fit('kb_big', 'v', 2, seed => 1) AS m;
SET kmeans_gpu.max_memory = '1MB';
SELECT kb($$SELECT kmedoids_fit('kb_big', 'v', 2)$$);
SELECT kb($$SELECT * FROM kmeans_score((SELECT m FROM kb_big_model), 'kb_big', 'v')$$);
SELECT kb($$SELECT k FROM kmeans_sweep('kb_big', 'v', ARRAY[2])$$);
RESET kmeans_gpu.max_memory;

\pset tuples_only off
\pset format aligned
-- one failure at the top level, and the session still works
SELECT kmedoids_fit('kb_pts', 'v', 2, metric => 'hamming');
SELECT (kmedoids_fit('kb_pts', 'v', 2, seed => 1)).sizes;
DROP TABLE kb_pts, kb_sigs, kb_ids, kb_nullids, kb_empty, kb_models, kb_big, kb_big_model;
DROP FUNCTION kb(text);
RESET kmeans_gpu.cpu_threads;
RESET kmeans_gpu.engine;
