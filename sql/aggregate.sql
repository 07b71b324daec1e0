-- kmeans(vec, k [, options]): the aggregate, its options and its errors.
SET extra_float_digits = 0;

-- Two groups of 30 points, around (0.5, 0.5) and (10.5, 10.5).
CREATE TABLE agg_pts AS
SELECT i AS id,
       ARRAY[(i % 2) * 10 + (i % 5) * 0.25, (i % 2) * 10 + (i % 3) * 0.5]::real[] AS v,
       i % 2 AS side
FROM generate_series(1, 60) i;

-- Centroids rounded and sorted, so that output does not depend on cluster ids.
CREATE FUNCTION show(m kmeans_model)
RETURNS TABLE (centroid numeric[], size bigint, inertia numeric)
LANGUAGE sql AS $$
  SELECT (SELECT array_agg(round(x::numeric, 3)) FROM unnest(c.centroid) x),
         c.size, round(c.inertia::numeric, 3)
  FROM kmeans_centroids(m) c ORDER BY 1
$$;

-- The model's fields.
SELECT (m).k, (m).dim, (m).metric, (m).n_rows, (m).n_skipped, (m).converged,
       (m).init, (m).seed, (m).n_init, (m).max_iter, (m).tol,
       round((m).inertia::numeric, 3) AS inertia,
       array_dims((m).centroids) AS centroid_dims
FROM (SELECT kmeans(v, 2, '{"seed": 7}') AS m FROM agg_pts) q;
SELECT * FROM show((SELECT kmeans(v, 2, '{"seed": 7}') FROM agg_pts));

-- Defaults: k-means++, l2, max_iter 300, tol 1e-4, n_init 1, a random seed.
SELECT (m).init, (m).metric, (m).max_iter, (m).tol, (m).n_init, (m).seed IS NOT NULL AS seeded
FROM (SELECT kmeans(v, 2) AS m FROM agg_pts) q;

-- float8[] input gives the same model as real[].
SELECT (SELECT kmeans(v::float8[], 2, '{"seed": 7}') FROM agg_pts) =
       (SELECT kmeans(v, 2, '{"seed": 7}') FROM agg_pts) AS same;

-- The same seed gives the same model; the seed is recorded.
SELECT a = b AS same_model, (a).seed AS seed
FROM (SELECT kmeans(v, 3, '{"seed": 42}') AS a FROM agg_pts) x,
     (SELECT kmeans(v, 3, '{"seed": 42}') AS b FROM agg_pts) y;

-- The model's seed reproduces a model fitted without one.
WITH first AS (SELECT kmeans(v, 3) AS m FROM agg_pts)
SELECT (SELECT kmeans(v, 3, jsonb_build_object('seed', (m).seed)) FROM agg_pts) = m AS reproduced
FROM first;

-- Row order does not matter.
SELECT (SELECT kmeans(v, 3, '{"seed": 5}') FROM (SELECT v FROM agg_pts ORDER BY id DESC) s) =
       (SELECT kmeans(v, 3, '{"seed": 5}') FROM (SELECT v FROM agg_pts ORDER BY id) s) AS same;

-- GROUP BY: one model per group.
SELECT side, (m).n_rows, s.*
FROM (SELECT side, kmeans(v, 1) AS m FROM agg_pts GROUP BY side) q, show(m) s
ORDER BY side;

-- WHERE and joins work like for any aggregate.
SELECT (m).n_rows, s.centroid
FROM (SELECT kmeans(a.v, 1) AS m FROM agg_pts a JOIN agg_pts b ON a.id = b.id + 1
      WHERE a.side = 1) q, show(m) s;

-- NULL vectors are skipped and counted.
SELECT (m).n_rows, (m).n_skipped
FROM (SELECT kmeans(v, 2, '{"seed": 1}') AS m
      FROM (SELECT v FROM agg_pts UNION ALL SELECT NULL UNION ALL SELECT NULL) s) q;

-- Options.
SELECT (m).iterations, (m).converged
FROM (SELECT kmeans(v, 2, '{"max_iter": 1, "seed": 1}') AS m FROM agg_pts) q;
SELECT (m).init, (m).n_init
FROM (SELECT kmeans(v, 2, '{"init": "random", "n_init": 3, "seed": 1}') AS m FROM agg_pts) q;
SELECT * FROM show((SELECT kmeans(v, 2, '{"init": "random", "seed": 2}') FROM agg_pts));
-- explicit start centroids: init becomes 'explicit'
SELECT (m).init, (m).iterations, (m).converged, round((m).inertia::numeric, 3) AS inertia
FROM (SELECT kmeans(v, 2, '{"init_centroids": [[0, 0], [1, 1]]}') AS m FROM agg_pts) q;
SELECT (m).init
FROM (SELECT kmeans(v, 2, '{"init": "explicit", "init_centroids": [[0, 0], [1, 1]]}') AS m
      FROM agg_pts) q;
-- tol 0 runs until no point moves
SELECT (m).converged FROM (SELECT kmeans(v, 4, '{"tol": 0, "seed": 3}') AS m FROM agg_pts) q;
-- null means the default
SELECT (m).max_iter, (m).metric
FROM (SELECT kmeans(v, 2, '{"max_iter": null, "metric": null, "seed": 1}') AS m FROM agg_pts) q;

-- Cosine: spherical k-means, unit-norm centroids.
CREATE TABLE agg_dirs AS
SELECT ARRAY[cos(a) * r, sin(a) * r]::real[] AS v
FROM generate_series(1, 20) i,
     LATERAL (SELECT CASE WHEN i % 2 = 0 THEN 0.1 ELSE 1.5 END + (i % 5) * 0.01 AS a,
                     1 + i AS r) p;
SELECT s.centroid, s.size
FROM show((SELECT kmeans(v, 2, '{"metric": "cosine", "seed": 4}') FROM agg_dirs)) s;
SELECT round(sqrt(c.centroid[1] ^ 2 + c.centroid[2] ^ 2)::numeric, 5) AS norm
FROM kmeans_centroids((SELECT kmeans(v, 2, '{"metric": "cosine", "seed": 4}') FROM agg_dirs)) c;

-- k equal to the number of points: every point is a cluster.
SELECT (m).sizes, (m).inertia
FROM (SELECT kmeans(v, 3, '{"seed": 1}') AS m
      FROM (VALUES ('{0,0}'::real[]), ('{5,5}'), ('{9,1}')) t(v)) q;

-- Fewer distinct points than k: duplicate centroids, empty clusters, no NaN.
SELECT (SELECT array_agg(s ORDER BY s) FROM unnest((m).sizes) s) AS sizes,
       (SELECT bool_and(x = x) FROM unnest((m).centroids) x) AS no_nan
FROM (SELECT kmeans(v, 3, '{"seed": 1}') AS m
      FROM (VALUES ('{1,1}'::real[]), ('{1,1}'), ('{1,1}'), ('{2,2}')) t(v)) q;

-- Errors: bad vectors.
SELECT kmeans(v, 2) FROM (VALUES ('{1,2}'::real[]), ('{1,2,3}')) t(v);
SELECT kmeans(v, 1) FROM (VALUES ('{{1,2},{3,4}}'::real[])) t(v);
SELECT kmeans(v, 1) FROM (VALUES ('{}'::real[])) t(v);
SELECT kmeans(v, 1) FROM (VALUES ('{1,NULL}'::real[])) t(v);
SELECT kmeans(v, 1) FROM (VALUES ('{1,NaN}'::real[])) t(v);
SELECT kmeans(v, 1) FROM (VALUES ('{1,Infinity}'::real[])) t(v);
SELECT kmeans(v, 1) FROM (VALUES ('{1,-Infinity}'::float8[])) t(v);
SELECT kmeans(v, 1) FROM (VALUES ('{1e300,1}'::float8[])) t(v);
SELECT kmeans(v, 1, '{"metric": "cosine"}') FROM (VALUES ('{0,0}'::real[])) t(v);

-- Errors: k.
SELECT kmeans(v, 0) FROM agg_pts;
SELECT kmeans(v, -3) FROM agg_pts;
SELECT kmeans(v, NULL) FROM agg_pts;
SELECT kmeans(v, 61) FROM agg_pts;
SELECT kmeans(v, (id % 2)::int + 1) FROM agg_pts;

-- Errors: no input.
SELECT kmeans(v, 2) FROM agg_pts WHERE false;
SELECT kmeans(NULL::real[], 2) FROM agg_pts;

-- Errors: options.
SELECT kmeans(v, 2, '[1, 2]') FROM agg_pts;
SELECT kmeans(v, 2, '5') FROM agg_pts;
SELECT kmeans(v, 2, '{"metric": "manhattan"}') FROM agg_pts;
SELECT kmeans(v, 2, '{"init": "kmeans##"}') FROM agg_pts;
SELECT kmeans(v, 2, '{"max_iters": 5}') FROM agg_pts;
SELECT kmeans(v, 2, '{"max_iter": 0}') FROM agg_pts;
SELECT kmeans(v, 2, '{"max_iter": "ten"}') FROM agg_pts;
SELECT kmeans(v, 2, '{"max_iter": 2.5}') FROM agg_pts;
SELECT kmeans(v, 2, '{"max_iter": 1e20}') FROM agg_pts;
SELECT kmeans(v, 2, '{"tol": -0.1}') FROM agg_pts;
SELECT kmeans(v, 2, '{"tol": "small"}') FROM agg_pts;
SELECT kmeans(v, 2, '{"seed": 1.5}') FROM agg_pts;
SELECT kmeans(v, 2, '{"seed": "abc"}') FROM agg_pts;
SELECT kmeans(v, 2, '{"n_init": 0}') FROM agg_pts;
SELECT kmeans(v, 2, '{"metric": 2}') FROM agg_pts;
SELECT kmeans(v, 2, '{"init": true}') FROM agg_pts;
SELECT kmeans(v, 2, '{"init": "explicit"}') FROM agg_pts;
SELECT kmeans(v, 2, '{"init": "random", "init_centroids": [[0, 0], [1, 1]]}') FROM agg_pts;
SELECT kmeans(v, 2, '{"n_init": 2, "init_centroids": [[0, 0], [1, 1]]}') FROM agg_pts;
SELECT kmeans(v, 2, '{"init_centroids": [1, 2]}') FROM agg_pts;
SELECT kmeans(v, 2, '{"init_centroids": "[[0, 0]]"}') FROM agg_pts;
SELECT kmeans(v, 2, '{"init_centroids": [[0, 0], [1]]}') FROM agg_pts;
SELECT kmeans(v, 2, '{"init_centroids": [[0, 0], [1, "x"]]}') FROM agg_pts;
SELECT kmeans(v, 2, '{"init_centroids": [[0, 0]]}') FROM agg_pts;
SELECT kmeans(v, 2, '{"init_centroids": [[0, 0, 0], [1, 1, 1]]}') FROM agg_pts;
SELECT kmeans(v, 2, '{"init_centroids": [[0, 1e39], [1, 1]]}') FROM agg_pts;
SELECT kmeans(v, 2, '{"init_centroids": [[0, 0], [1, 1]], "metric": "cosine"}') FROM agg_dirs;
SELECT kmeans(v, 2, o) FROM agg_pts, (VALUES ('{"seed": 1}'::jsonb), ('{"seed": 2}')) t(o);

-- The session is still usable after all these errors.
SELECT count(*) FROM agg_pts;

DROP FUNCTION show(kmeans_model);
DROP TABLE agg_pts, agg_dirs;
