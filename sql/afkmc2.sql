-- init 'afk-mc2' (assumption-free k-MC^2) for k-means: in kmeans_fit, the
-- aggregate and the window function, with its chain length.  The GPU engine
-- fits from centroids the CPU engine seeds on the host, so every answer here
-- is the same whichever engine 'auto' picks.
SET extra_float_digits = 0;
SET kmeans_gpu.engine = auto;

CREATE TABLE af_pts (id bigint, v real[], w float8);
INSERT INTO af_pts
SELECT i, ARRAY[(i % 5) * 10 + (i % 7) * 0.5 + (i % 11) * 0.01, (i % 5) * 3 - (i % 13) * 0.25]::real[],
       1 + i % 4
FROM generate_series(1, 500) i;

SELECT (m).init, (m).k, (m).sizes, round((m).inertia::numeric, 4) AS inertia
FROM (SELECT kmeans_fit('af_pts', 'v', 5, init => 'afk-mc2', seed => 1) AS m) s;
-- reproducible, and independent of row order
SELECT kmeans_fit('af_pts', 'v', 5, init => 'afk-mc2', seed => 4) =
       kmeans_fit('af_pts', 'v', 5, init => 'afk-mc2', seed => 4) AS reproducible;
SELECT (a.m).centroids = (b.m).centroids AS same_in_any_order
FROM (SELECT kmeans(v, 5, '{"init": "afk-mc2", "seed": 4}') AS m FROM (SELECT v FROM af_pts ORDER BY id) o) a,
     (SELECT kmeans(v, 5, '{"init": "afk-mc2", "seed": 4}') AS m FROM (SELECT v FROM af_pts ORDER BY md5(id::text)) o) b;
-- the aggregate and kmeans_fit agree; chain_length is an option of both
SELECT (a.m).centroids = (f.m).centroids AS aggregate_is_fit
FROM (SELECT kmeans(v, 5, '{"init": "afk-mc2", "seed": 4, "chain_length": 20}') AS m FROM af_pts) a,
     (SELECT kmeans_fit('af_pts', 'v', 5, init => 'afk-mc2', seed => 4, chain_length => 20) AS m) f;
-- afk-mc2 with one step per chain is q-sampling; longer chains, other starts
SELECT count(DISTINCT (kmeans_fit('af_pts', 'v', 5, init => 'afk-mc2', seed => 4, chain_length => c,
                                  max_iter => 1)).centroids) > 1 AS chain_length_matters
FROM unnest(ARRAY[1, 200]) c;
-- with weights, cosine, several runs
SELECT (m).sizes, round((m).inertia::numeric, 4) AS inertia
FROM (SELECT kmeans_fit('af_pts', 'v', 5, init => 'afk-mc2', seed => 2, weight_column => 'w') AS m) s;
SELECT (m).metric, (m).sizes
FROM (SELECT kmeans_fit('af_pts', 'v', 3, init => 'afk-mc2', seed => 2, metric => 'cosine') AS m) s;
SELECT (m).n_init, (m).sizes
FROM (SELECT kmeans_fit('af_pts', 'v', 5, init => 'afk-mc2', seed => 2, n_init => 3) AS m) s;
-- the window function
SELECT count(DISTINCT c) AS clusters
FROM (SELECT kmeans_cluster(v, 5, '{"init": "afk-mc2", "seed": 1}') OVER () AS c FROM af_pts) s;
-- k = 1 and k = n
SELECT (kmeans_fit('af_pts', 'v', 1, init => 'afk-mc2', seed => 1)).sizes;
SELECT array_length((m).sizes, 1) AS k, (m).inertia
FROM (SELECT kmeans(v, 10, '{"init": "afk-mc2", "seed": 1}') AS m FROM af_pts WHERE id <= 10) s;

DROP TABLE af_pts;
RESET kmeans_gpu.engine;
