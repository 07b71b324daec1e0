-- Names in any case and their common spellings; integer and numeric
-- vectors for the aggregate, the window function and kmeans_assign.
SET extra_float_digits = 0;

CREATE TABLE fi_pts AS
SELECT i AS id,
       ARRAY[(i % 2) * 10 + i % 5 + 1, (i % 2) * 10 + i % 3]::integer[] AS vi,
       ARRAY[(i % 2) * 10 + i % 5 + 1, (i % 2) * 10 + i % 3]::smallint[] AS vs,
       ARRAY[(i % 2) * 10 + i % 5 + 1, (i % 2) * 10 + i % 3]::bigint[] AS vb,
       ARRAY[(i % 2) * 10 + (i % 5) * 0.25 + 1, (i % 2) * 10 + (i % 3) * 0.5]::numeric[] AS vn,
       ARRAY[(i % 2) * 10 + (i % 5) * 0.25 + 1, (i % 2) * 10 + (i % 3) * 0.5]::real[] AS v
FROM generate_series(1, 40) i;

-- Spellings: any case, 'euclidean' for l2, 'kmeans++' and 'kmeanspp' for
-- k-means++; the model stores the canonical name.
SELECT (m).metric, (m).init
FROM (SELECT kmeans(v, 2, '{"metric": "L2", "init": "kmeans++", "seed": 1}') AS m FROM fi_pts) q;
SELECT (m).metric, (m).init
FROM (SELECT kmeans(v, 2, '{"metric": "Euclidean", "init": "K-Means++", "seed": 1}') AS m FROM fi_pts) q;
SELECT (m).metric, (m).init
FROM (SELECT kmeans(v, 2, '{"metric": "COSINE", "init": "Random", "seed": 1}') AS m FROM fi_pts) q;
SELECT (m).init
FROM (SELECT kmeans(v, 2, '{"init": "EXPLICIT", "init_centroids": [[0, 0], [10, 10]]}') AS m FROM fi_pts) q;
SELECT (m).metric, (m).init, (m).engine
FROM (SELECT kmeans_fit('fi_pts', 'v', 2, metric => 'euclidean', init => 'kmeanspp', seed => 1,
                        engine => 'CPU') AS m) q;
-- the same model whatever the spelling
SELECT (SELECT kmeans(v, 2, '{"metric": "EUCLIDEAN", "init": "kmeans++", "seed": 3}') FROM fi_pts) =
       (SELECT kmeans(v, 2, '{"metric": "l2", "init": "k-means++", "seed": 3}') FROM fi_pts) AS same;
SELECT count(DISTINCT c) AS clusters
FROM (SELECT kmeans_cluster(v, 2, '{"metric": "Cosine", "init": "KMEANS++", "seed": 1}') OVER () AS c
      FROM fi_pts) q;
-- a model typed by hand with another spelling of its metric
SELECT kmeans_assign(ROW(2, 2, 'L2', '{{0,0},{10,10}}', NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                         NULL, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model, '{9,9}'::real[]) AS cluster;
-- unknown names are still errors, with the accepted ones in the hint
SELECT kmeans(v, 2, '{"metric": "manhattan"}') FROM fi_pts;
SELECT kmeans(v, 2, '{"init": "k-means--"}') FROM fi_pts;
SELECT kmeans_fit('fi_pts', 'v', 2, engine => 'tpu');

-- Integer and numeric vectors: converted as a cast to real converts them,
-- so the model is the one of the cast column.
SELECT (SELECT kmeans(vi, 2, '{"seed": 5}') FROM fi_pts) =
       (SELECT kmeans(vi::real[], 2, '{"seed": 5}') FROM fi_pts) AS integer_same,
       (SELECT kmeans(vs, 2, '{"seed": 5}') FROM fi_pts) =
       (SELECT kmeans(vs::real[], 2, '{"seed": 5}') FROM fi_pts) AS smallint_same,
       (SELECT kmeans(vb, 2, '{"seed": 5}') FROM fi_pts) =
       (SELECT kmeans(vb::real[], 2, '{"seed": 5}') FROM fi_pts) AS bigint_same,
       (SELECT kmeans(vn, 2, '{"seed": 5}') FROM fi_pts) =
       (SELECT kmeans(vn::real[], 2, '{"seed": 5}') FROM fi_pts) AS numeric_same;
SELECT (SELECT kmeans(vi, 2) FROM fi_pts) IS NOT NULL AS without_options;
SELECT (m).k, (m).dim, (m).n_rows
FROM (SELECT kmeans(vi, 2, '{"seed": 1}') AS m FROM fi_pts GROUP BY id % 2 ORDER BY id % 2) q;
-- kmeans_assign and the window function
SELECT kmeans_assign(m, '{9,9}'::integer[]) = kmeans_assign(m, '{9,9}'::real[]) AS int_assign,
       kmeans_assign(m, '{9,9}'::bigint[]) = kmeans_assign(m, '{9,9}'::real[]) AS bigint_assign,
       kmeans_assign(m, '{9.5,9.5}'::numeric[]) = kmeans_assign(m, '{9.5,9.5}'::real[]) AS numeric_assign
FROM (SELECT kmeans(v, 2, '{"seed": 1}') AS m FROM fi_pts) q;
SELECT bool_and(a = b) AS window_same
FROM (SELECT kmeans_cluster(vi, 2, '{"seed": 2}') OVER () AS a,
             kmeans_cluster(vi::real[], 2, '{"seed": 2}') OVER () AS b FROM fi_pts) q;
-- integers beyond 2^24 round to the nearest real, as the cast does
SELECT (SELECT kmeans(v, 1, '{"seed": 1}') FROM (VALUES ('{16777217,1}'::bigint[])) t(v)) =
       (SELECT kmeans(v::real[], 1, '{"seed": 1}') FROM (VALUES ('{16777217,1}'::bigint[])) t(v))
         AS rounded_as_cast,
       (SELECT (kmeans(v, 1)).centroids[1][1]::float8 FROM (VALUES ('{16777217,1}'::bigint[])) t(v))
         AS centroid;
-- bad values: as for real[]
SELECT kmeans(v, 1) FROM (VALUES ('{1,NULL}'::integer[])) t(v);
SELECT kmeans(v, 1) FROM (VALUES ('{1,NaN}'::numeric[])) t(v);
SELECT kmeans(v, 1) FROM (VALUES ('{1,1e50}'::numeric[])) t(v);
SELECT kmeans(v, 1) FROM (VALUES ('{1,2}'::integer[]), ('{1,2,3}')) t(v);
SELECT kmeans(v, 1, '{"metric": "cosine"}') FROM (VALUES ('{0,0}'::integer[])) t(v);
SELECT kmeans_assign(m, '{1,2,3}'::integer[]) FROM (SELECT kmeans(v, 2, '{"seed": 1}') AS m FROM fi_pts) q;

DROP TABLE fi_pts;
