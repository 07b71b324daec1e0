-- k-medoids: kmedoids_fit, the kmedoids aggregate, kmedoids_assign and
-- kmedoids_labels, every metric and method, and the model they make.
-- These run on the CPU engine everywhere (the GPU's k-medoids, which gives
-- the same models: kmedoids_gpu.sql and the GPU suite).
SET kmeans_gpu.engine = cpu;
SET extra_float_digits = 0;

-- three groups of points on a grid: no two distances between different
-- pairs tie by accident, and the clusters are clear
CREATE TABLE kmd_pts (id bigint, v real[], v8 float8[]);
INSERT INTO kmd_pts
SELECT i,
       ARRAY[(i % 3) * 10 + (i % 7) * 0.5 + (i % 11) * 0.01, (i % 3) * 5 - (i % 5) * 0.25]::real[],
       ARRAY[(i % 3) * 10 + (i % 7) * 0.5 + (i % 11) * 0.01, (i % 3) * 5 - (i % 5) * 0.25]::float8[]
FROM generate_series(1, 300) i;
INSERT INTO kmd_pts VALUES (301, NULL, NULL);

-- defaults: metric l2, method alternate, init k-means++, max_iter 100
CREATE TABLE kmd_models AS
SELECT 'default'::text AS name, kmedoids_fit('kmd_pts', 'v', 3, seed => 1) AS m;
SELECT (m).k, (m).dim, (m).metric, (m).method, (m).init, (m).max_iter, (m).seed, (m).engine,
       (m).n_rows, (m).n_skipped, (m).sizes, (m).converged, (m).medoid_ids, (m).alpha,
       (m).chain_length, (m).medoid_features, round((m).cost::numeric, 6) AS cost
FROM kmd_models;

-- medoids are rows of the table, and the cost is the sum of the rows'
-- distances to their medoids
SELECT bool_and(EXISTS (SELECT 1 FROM kmd_pts p WHERE p.v = c.medoid)) AS medoids_are_rows
FROM kmd_models, LATERAL (SELECT (m).medoids[j:j][1:2] AS medoid FROM generate_series(1, 3) j) s,
     LATERAL (SELECT ARRAY[s.medoid[1][1], s.medoid[1][2]] AS medoid) c;
SELECT round(sum(l.distance)::numeric, 6) = round((m).cost::numeric, 6) AS cost_is_sum,
       count(*) FILTER (WHERE l.cluster_id IS NULL) AS null_rows
FROM kmd_models, kmedoids_labels(m, 'kmd_pts', 'v', 'id') l
GROUP BY m;
SELECT array_agg(cnt ORDER BY cluster_id) AS label_sizes
FROM (SELECT cluster_id, count(*) AS cnt FROM kmd_models, kmedoids_labels(m, 'kmd_pts', 'v', 'id')
      WHERE cluster_id IS NOT NULL GROUP BY cluster_id) s;
-- the cost per cluster adds up to the cost
SELECT round((SELECT sum(x) FROM unnest((m).cluster_cost) x)::numeric, 6) =
       round((m).cost::numeric, 6) AS cluster_cost_adds_up FROM kmd_models;

-- kmedoids_assign agrees with kmedoids_labels, for real[] and float8[]
SELECT count(*) AS rows_compared,
       count(*) FILTER (WHERE kmedoids_assign(m, p.v) <> l.cluster_id) AS assign_differs,
       count(*) FILTER (WHERE kmedoids_assign(m, p.v8) <> l.cluster_id) AS assign8_differs
FROM kmd_models, kmedoids_labels(m, 'kmd_pts', 'v', 'id') l JOIN kmd_pts p ON p.id = l.id
WHERE p.v IS NOT NULL;
SELECT kmedoids_assign(m, NULL::real[]) IS NULL AS null_in_null_out FROM kmd_models;

-- the same rows in another order, or as float8[]: the same model
SELECT (a.m).medoids = (b.m).medoids AND (a.m).cost = (b.m).cost AS same_model
FROM (SELECT kmedoids(v, 3, '{"seed": 1}') AS m FROM (SELECT v FROM kmd_pts ORDER BY id) o) a,
     (SELECT kmedoids(v, 3, '{"seed": 1}') AS m FROM (SELECT v FROM kmd_pts ORDER BY md5(id::text)) o) b;
SELECT (a.m).medoids = (b.m).medoids AND (a.m).cost = (b.m).cost AS same_as_float8
FROM (SELECT kmedoids(v, 3, '{"seed": 1}') AS m FROM kmd_pts) a,
     (SELECT kmedoids(v8, 3, '{"seed": 1}') AS m FROM kmd_pts) b;
-- the aggregate and kmedoids_fit (no id column) give the same model
SELECT (a.m).medoids = (f.m).medoids AND (a.m).cost = (f.m).cost AS aggregate_is_fit
FROM (SELECT kmedoids(v, 3, '{"seed": 1}') AS m FROM kmd_pts) a,
     (SELECT kmedoids_fit('kmd_pts', 'v', 3, seed => 1) AS m) f;
-- the same seed twice: the same model; the seed is kept when none is given
SELECT kmedoids_fit('kmd_pts', 'v', 3, seed => 7) = kmedoids_fit('kmd_pts', 'v', 3, seed => 7)
       AS reproducible;
SELECT (kmedoids_fit('kmd_pts', 'v', 3, seed => (m).seed)).medoids = (m).medoids AS seed_reproduces
FROM (SELECT kmedoids_fit('kmd_pts', 'v', 3) AS m) s;
-- one model per group
SELECT g, (m).k, (m).n_rows FROM (
  SELECT id % 2 AS g, kmedoids(v, 2, '{"seed": 3}') AS m FROM kmd_pts GROUP BY id % 2) s ORDER BY g;

-- with an id column: the medoids' ids, and ties go to the lowest id
SELECT (m).medoid_ids, (m).sizes,
       (SELECT array_agg(p.v ORDER BY o) FROM unnest((m).medoid_ids) WITH ORDINALITY u(mid, o)
        JOIN kmd_pts p ON p.id = u.mid) = (SELECT array_agg(ARRAY[(m).medoids[j][1], (m).medoids[j][2]]
                                                      ORDER BY j) FROM generate_series(1, 3) j)
         AS ids_name_the_medoids
FROM (SELECT kmedoids_fit('kmd_pts', 'v', 3, seed => 1, id_column => 'id') AS m) s;
CREATE TABLE kmd_dups (id bigint, v real[]);
INSERT INTO kmd_dups SELECT i, ARRAY[(i % 2) * 10, 0]::real[] FROM generate_series(1, 20) i;
SELECT (m).medoid_ids, (m).cost FROM (SELECT kmedoids_fit('kmd_dups', 'v', 2, seed => 4, id_column => 'id') AS m) s;
SELECT (m).medoid_ids, (m).cost FROM (SELECT kmedoids_fit('kmd_dups', 'v', 2, seed => 4, id_column => 'id',
                                                          method => 'fasterpam') AS m) s;

-- every metric, both methods, k = 3 and 4
SELECT mt, me, kk, (m).metric, (m).method, (m).sizes, (m).converged,
       round((m).cost::numeric, 6) AS cost
FROM unnest(ARRAY['l2', 'sqeuclidean', 'l1', 'cosine']) mt,
     unnest(ARRAY['alternate', 'fasterpam']) me, unnest(ARRAY[3, 4]) kk,
     LATERAL (SELECT kmedoids_fit('kmd_pts', 'v', kk, metric => mt, method => me, seed => 5) AS m) s
ORDER BY mt, me, kk;
-- inits
SELECT it, (m).init, (m).chain_length, (m).sizes, round((m).cost::numeric, 6) AS cost
FROM unnest(ARRAY['k-means++', 'random', 'afk-mc2']) it,
     LATERAL (SELECT kmedoids_fit('kmd_pts', 'v', 3, init => it, seed => 8, method => 'fasterpam') AS m) s
ORDER BY it;
SELECT (m).chain_length FROM (SELECT kmedoids(v, 3, '{"init": "afk-mc2", "chain_length": 7, "seed": 1}') AS m
                              FROM kmd_pts) s;
-- max_iter 1 stops early
SELECT (m).iterations, (m).converged
FROM (SELECT kmedoids_fit('kmd_pts', 'v', 3, init => 'random', seed => 2, max_iter => 1) AS m) s;
-- k = 1 and k = n
SELECT (m).sizes, round((m).cost::numeric, 6) AS cost FROM (SELECT kmedoids_fit('kmd_pts', 'v', 1, seed => 1) AS m) s;
SELECT (m).cost, array_length((m).sizes, 1) AS k
FROM (SELECT kmedoids(v, 20, '{"seed": 1, "method": "fasterpam"}') AS m
      FROM (SELECT v FROM kmd_pts WHERE id <= 20) s) s;
-- the engine option overrides the setting
SET kmeans_gpu.engine = gpu;
SELECT (kmedoids_fit('kmd_pts', 'v', 2, seed => 1, engine => 'cpu')).engine;
SELECT (kmedoids(v, 2, '{"seed": 1, "engine": "cpu"}')).engine FROM kmd_pts;
SET kmeans_gpu.engine = cpu;

-- sqfd: signatures of different lengths, each feature a weight and two
-- coordinates; medoids keep their own number of features
CREATE TABLE kmd_sigs (id bigint, sig real[]);
INSERT INTO kmd_sigs
SELECT i, ARRAY(SELECT ARRAY[1 + (f % 2), (i % 3) * 4 + f * 0.3 + (i % 5) * 0.05, (i % 3) * 2 - f * 0.1]::real[]
                FROM generate_series(1, 1 + i % 3) f)
FROM generate_series(1, 90) i;
SELECT (m).k, (m).dim, (m).metric, (m).alpha, (m).medoid_features, array_dims((m).medoids) AS medoid_dims,
       (m).sizes, (m).medoid_ids, round((m).cost::numeric, 6) AS cost
FROM (SELECT kmedoids_fit('kmd_sigs', 'sig', 3, metric => 'sqfd', seed => 1, id_column => 'id') AS m) s;
-- each medoid is its row's signature, padding aside
SELECT j, (m).medoid_features[j] AS features,
       ARRAY(SELECT unnest(p.sig)) =
       ARRAY(SELECT unnest((m).medoids[j:j][1:(m).medoid_features[j]][1:3])) AS medoid_is_row,
       ARRAY(SELECT unnest((m).medoids[j:j][(m).medoid_features[j] + 1:3][1:3])) AS padding
FROM (SELECT kmedoids_fit('kmd_sigs', 'sig', 3, metric => 'sqfd', seed => 1, id_column => 'id') AS m) s,
     generate_series(1, 3) j, kmd_sigs p
WHERE p.id = (m).medoid_ids[j]
ORDER BY j;
SELECT array_dims(p.sig) FROM kmd_sigs p WHERE id IN (1, 2, 3) ORDER BY id;
SELECT me, al, (m).alpha, (m).sizes, round((m).cost::numeric, 6) AS cost
FROM unnest(ARRAY['alternate', 'fasterpam']) me, unnest(ARRAY[0.5, 2.0]) al,
     LATERAL (SELECT kmedoids_fit('kmd_sigs', 'sig', 3, metric => 'sqfd', method => me,
                                  alpha => al, seed => 2) AS m) s
ORDER BY me, al;
-- assign and labels take signatures, and agree
SELECT count(*) AS rows_compared,
       count(*) FILTER (WHERE kmedoids_assign(m, p.sig) <> l.cluster_id) AS assign_differs,
       round(sum(l.distance)::numeric, 6) = round((m).cost::numeric, 6) AS cost_is_sum
FROM (SELECT kmedoids_fit('kmd_sigs', 'sig', 3, metric => 'sqfd', seed => 1) AS m) s,
     kmedoids_labels(m, 'kmd_sigs', 'sig', 'id') l JOIN kmd_sigs p ON p.id = l.id
GROUP BY m;
SELECT kmedoids_assign(m, '{{1, 8, 4}, {2, 8.3, 3.9}}'::real[]) AS near_third_group,
       kmedoids_assign(m, '{{1, 0, 0}}'::float8[]) AS near_first_group
FROM (SELECT kmedoids(sig, 3, '{"metric": "sqfd", "seed": 1}') AS m FROM kmd_sigs) s;
-- the aggregate takes signatures too
SELECT (a.m).medoids = (f.m).medoids AS aggregate_is_fit
FROM (SELECT kmedoids(sig, 3, '{"metric": "sqfd", "seed": 1}') AS m FROM kmd_sigs) a,
     (SELECT kmedoids_fit('kmd_sigs', 'sig', 3, metric => 'sqfd', seed => 1) AS m) f;

-- a stored model keeps working
CREATE TABLE kmd_stored AS SELECT kmedoids_fit('kmd_pts', 'v', 3, seed => 1, metric => 'l1') AS m;
SELECT kmedoids_assign(m, '{0,0}'::real[]) AS a, kmedoids_assign(m, '{21,10}'::real[]) AS b FROM kmd_stored;

DROP TABLE kmd_pts, kmd_models, kmd_dups, kmd_sigs, kmd_stored;
RESET kmeans_gpu.engine;
