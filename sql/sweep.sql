-- kmeans_sweep: one read of the table, a k-means model per k, with the
-- elbow (inertia) and the silhouette and Davies-Bouldin index beside it.
-- (On a GPU machine the fits could run there; this file fixes the CPU so
-- that its figures are the same everywhere.)
SET kmeans_gpu.engine = cpu;
SET extra_float_digits = 0;

CREATE TABLE sw_pts (id bigint, v real[], w float8);
INSERT INTO sw_pts
SELECT i, ARRAY[(i % 4) * 10 + (i % 7) * 0.5 + (i % 11) * 0.01, (i % 4) * 5 - (i % 5) * 0.25]::real[],
       1 + i % 3
FROM generate_series(1, 400) i;
INSERT INTO sw_pts VALUES (401, NULL, 1);

-- the README's example: the elbow and the silhouette side by side
SELECT k, round(inertia::numeric, 4) AS inertia, round(silhouette::numeric, 6) AS silhouette,
       round(davies_bouldin::numeric, 6) AS davies_bouldin, (model).k AS model_k, (model).n_rows,
       (model).n_skipped
FROM kmeans_sweep('sw_pts', 'v', ARRAY[2, 3, 4, 5, 6], seed => 1)
ORDER BY k;

-- rows come in the order of ks
SELECT array_agg(k) AS ks FROM kmeans_sweep('sw_pts', 'v', ARRAY[5, 2, 3], seed => 1);

-- each model is kmeans_fit's for its k and the same options
SELECT bool_and((s.model).centroids = (f).centroids AND (s.model).inertia = (f).inertia
                AND (s.model).seed = (f).seed AND (s.model).sizes = (f).sizes) AS models_are_fits
FROM kmeans_sweep('sw_pts', 'v', ARRAY[2, 3, 4], seed => 1) s,
     LATERAL kmeans_fit('sw_pts', 'v', s.k, seed => 1) f;
-- and its figures are kmeans_score's (same sample, same seed)
SELECT bool_and(s.silhouette = c.silhouette AND s.davies_bouldin = c.davies_bouldin) AS figures_are_scores,
       bool_and(c.n_scored = 100) AS sampled
FROM kmeans_sweep('sw_pts', 'v', ARRAY[2, 4], seed => 1, sample => 100) s,
     LATERAL kmeans_score(s.model, 'sw_pts', 'v', sample => 100) c;
-- one seed for every k, also when none is given
SELECT count(DISTINCT (model).seed) AS seeds FROM kmeans_sweep('sw_pts', 'v', ARRAY[2, 3, 4]);

-- one read of the table: a view that counts the rows it hands out
CREATE SEQUENCE sw_reads;
CREATE VIEW sw_counted AS SELECT v FROM sw_pts WHERE nextval('sw_reads') > 0;
SELECT count(*) AS fits FROM kmeans_sweep('sw_counted', 'v', ARRAY[2, 3, 4, 5, 6, 7], seed => 1);
SELECT currval('sw_reads') AS rows_read;

-- kmeans_fit's options: weights, cosine, init, n_init, max_iter
SELECT k, (model).n_init, (model).init, (model).max_iter, (model).metric,
       round(inertia::numeric, 4) AS inertia, silhouette IS NOT NULL AS has_silhouette
FROM kmeans_sweep('sw_pts', 'v', ARRAY[3, 4], seed => 2, weight_column => 'w', n_init => 2,
                  max_iter => 50, init => 'random')
ORDER BY k;
SELECT k, (model).metric, round(inertia::numeric, 6) AS inertia, round(silhouette::numeric, 6) AS silhouette
FROM kmeans_sweep('sw_pts', 'v', ARRAY[2, 4], seed => 2, metric => 'cosine') ORDER BY k;
SELECT k, (model).init, round(inertia::numeric, 4) AS inertia
FROM kmeans_sweep('sw_pts', 'v', ARRAY[4], seed => 3, init => 'afk-mc2', chain_length => 50);
-- k = 1: an inertia, no silhouette or Davies-Bouldin
SELECT k, round(inertia::numeric, 4) AS inertia, silhouette, davies_bouldin
FROM kmeans_sweep('sw_pts', 'v', ARRAY[1], seed => 1);

DROP VIEW sw_counted;
DROP SEQUENCE sw_reads;
DROP TABLE sw_pts;
RESET kmeans_gpu.engine;
