-- kmeans_score: inertia, silhouette, Davies-Bouldin and Calinski-Harabasz of
-- a k-means or a k-medoids model on a table.  (test/compare/score_compare.py
-- checks the figures against scikit-learn's; this checks what they depend
-- on.)  These run on the CPU engine everywhere (the silhouette on the GPU:
-- kmedoids_gpu.sql and the GPU suite).
SET kmeans_gpu.engine = cpu;
SET extra_float_digits = 0;

CREATE TABLE sc_pts (id bigint, v real[]);
INSERT INTO sc_pts
SELECT i, ARRAY[(i % 3) * 10 + (i % 7) * 0.5 + (i % 11) * 0.01, (i % 3) * 5 - (i % 5) * 0.25 + (i % 13) * 0.02]::real[]
FROM generate_series(1, 300) i;
INSERT INTO sc_pts VALUES (301, NULL);
-- the same rows, inserted in another order
CREATE TABLE sc_shuffled AS SELECT * FROM sc_pts ORDER BY md5(id::text);
CREATE TABLE sc_models AS
SELECT kmeans_fit('sc_pts', 'v', 3, seed => 1) AS km,
       kmedoids_fit('sc_pts', 'v', 3, seed => 1) AS kmd,
       kmedoids_fit('sc_pts', 'v', 3, seed => 1, metric => 'l1') AS kl1,
       kmeans_fit('sc_pts', 'v', 3, seed => 1, metric => 'cosine') AS kcos,
       kmeans_fit('sc_pts', 'v', 1, seed => 1) AS k1;

-- every figure, for each kind of model (all rows: fewer than the default sample)
SELECT 'kmeans l2' AS model, round(inertia::numeric, 6) AS inertia, round(silhouette::numeric, 10) AS silhouette,
       round(davies_bouldin::numeric, 10) AS davies_bouldin, round(calinski_harabasz::numeric, 6) AS calinski_harabasz,
       n_scored
FROM sc_models, kmeans_score(km, 'sc_pts', 'v')
UNION ALL
SELECT 'kmedoids l2', round(inertia::numeric, 6), round(silhouette::numeric, 10),
       round(davies_bouldin::numeric, 10), round(calinski_harabasz::numeric, 6), n_scored
FROM sc_models, kmeans_score(kmd, 'sc_pts', 'v')
UNION ALL
SELECT 'kmedoids l1', round(inertia::numeric, 6), round(silhouette::numeric, 10),
       round(davies_bouldin::numeric, 10), round(calinski_harabasz::numeric, 6), n_scored
FROM sc_models, kmeans_score(kl1, 'sc_pts', 'v')
UNION ALL
SELECT 'kmeans cosine', round(inertia::numeric, 6), round(silhouette::numeric, 10),
       round(davies_bouldin::numeric, 10), round(calinski_harabasz::numeric, 6), n_scored
FROM sc_models, kmeans_score(kcos, 'sc_pts', 'v');

-- inertia is the model's own objective, on the rows it was fitted on
SELECT abs(s.inertia - (km).inertia) <= 1e-9 * (km).inertia AS kmeans_inertia,
       abs(t.inertia - (kmd).cost) <= 1e-9 * (kmd).cost AS kmedoids_cost
FROM sc_models, kmeans_score(km, 'sc_pts', 'v') s, kmeans_score(kmd, 'sc_pts', 'v') t;

-- one cluster: no silhouette, Davies-Bouldin or Calinski-Harabasz
SELECT round(inertia::numeric, 6) AS inertia, silhouette, davies_bouldin, calinski_harabasz, n_scored
FROM sc_models, kmeans_score(k1, 'sc_pts', 'v');

-- the same rows in another order: the same figures, to the last bit
SELECT a = b AS same_figures
FROM sc_models, kmeans_score(km, 'sc_pts', 'v') a, kmeans_score(km, 'sc_shuffled', 'v') b;
SELECT a = b AS same_figures_sampled
FROM sc_models, kmeans_score(kmd, 'sc_pts', 'v', sample => 50, seed => 3) a,
     kmeans_score(kmd, 'sc_shuffled', 'v', sample => 50, seed => 3) b;

-- a sample: n_scored rows, chosen by the seed; the default seed is the model's
SELECT n_scored FROM sc_models, kmeans_score(km, 'sc_pts', 'v', sample => 50);
SELECT a = b AS default_seed_is_models
FROM sc_models, kmeans_score(km, 'sc_pts', 'v', sample => 50) a,
     kmeans_score(km, 'sc_pts', 'v', sample => 50, seed => (km).seed) b;
SELECT count(DISTINCT silhouette) AS distinct_silhouettes
FROM sc_models, generate_series(1, 5) s, kmeans_score(km, 'sc_pts', 'v', sample => 20, seed => s);
-- (another seed sums the same rows in another order: equal up to rounding)
SELECT abs(a.silhouette - b.silhouette) < 1e-12 AS sample_of_all_rows_is_all_rows
FROM sc_models, kmeans_score(km, 'sc_pts', 'v', sample => 300, seed => 1) a,
     kmeans_score(km, 'sc_pts', 'v', sample => 1000, seed => 2) b;

-- sqfd: inertia and silhouette, no Davies-Bouldin or Calinski-Harabasz
CREATE TABLE sc_sigs (id bigint, sig real[]);
INSERT INTO sc_sigs
SELECT i, ARRAY(SELECT ARRAY[1 + (f % 2), (i % 3) * 4 + f * 0.3 + (i % 5) * 0.05, (i % 3) * 2 - f * 0.1]::real[]
                FROM generate_series(1, 1 + i % 3) f)
FROM generate_series(1, 60) i;
SELECT round(inertia::numeric, 6) AS inertia, round(silhouette::numeric, 10) AS silhouette,
       davies_bouldin, calinski_harabasz, n_scored
FROM kmeans_score(kmedoids_fit('sc_sigs', 'sig', 3, metric => 'sqfd', seed => 1), 'sc_sigs', 'sig');

DROP TABLE sc_pts, sc_shuffled, sc_models, sc_sigs;
RESET kmeans_gpu.engine;
