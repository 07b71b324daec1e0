-- k-medoids and the GPU engine.  With engine 'gpu' (the option, or
-- kmeans_gpu.engine) the alternating method and the silhouette run on the
-- GPU, or fail with a clear error where there is no usable GPU
-- (kmedoids_gpu.out); on a GPU machine (kmedoids_gpu_1.out) they give the
-- CPU engine's answers bit for bit.  'auto' runs wherever it can, with the
-- same answers; FasterPAM runs on the CPU engine (kmedoids_bad_input.sql:
-- 'gpu' refuses it).
SET extra_float_digits = 0;
CREATE TABLE kg_pts AS
SELECT i AS id, ARRAY[(i * 7) % 13, (i * 5) % 11, (i % 3) + 0.5]::real[] AS v
FROM generate_series(1, 400) i;
CREATE TABLE kg_sigs AS
SELECT i AS id,
       CASE WHEN i % 3 = 0 THEN ARRAY[ARRAY[1, i % 5, i % 7], ARRAY[0.5, i % 4, 1]]
            ELSE ARRAY[ARRAY[2, i % 6, i % 5]] END::real[] AS sig
FROM generate_series(1, 150) i;
-- the models of the CPU engine, to compare with
SET kmeans_gpu.engine = cpu;
CREATE TABLE kg_cpu AS
SELECT metric, kmedoids_fit('kg_pts', 'v', 4, metric => metric, seed => 1, id_column => 'id') AS m
FROM unnest(ARRAY['l2', 'sqeuclidean', 'l1', 'cosine']) metric;
INSERT INTO kg_cpu
SELECT 'sqfd', kmedoids_fit('kg_sigs', 'sig', 3, metric => 'sqfd', alpha => 0.5, seed => 2);
CREATE TABLE kg_sil AS
SELECT metric, (kmeans_score(m, 'kg_pts', 'v')).silhouette AS s FROM kg_cpu WHERE metric <> 'sqfd';
RESET kmeans_gpu.engine;
-- A model is the CPU engine's when every field the fit decides is.
CREATE FUNCTION kg_same(a kmedoids_model, b kmedoids_model) RETURNS boolean
LANGUAGE sql AS $$
  SELECT a.medoids = b.medoids AND a.medoid_ids IS NOT DISTINCT FROM b.medoid_ids
     AND a.medoid_features IS NOT DISTINCT FROM b.medoid_features
     AND a.sizes = b.sizes AND a.cost = b.cost AND a.cluster_cost = b.cluster_cost
     AND a.iterations = b.iterations AND a.converged = b.converged
$$;
-- Devices: none here (kmedoids_gpu.out), some on a GPU machine
-- (kmedoids_gpu_1.out); each file pairs it with what 'gpu' does below.
SELECT count(*) > 0 AS has_gpu FROM kmeans_gpu_devices();
-- (the reason, in the error's DETAIL, depends on the machine: hidden here)
\set VERBOSITY terse
-- engine 'gpu', every dense metric
SELECT c.metric, (g).engine, kg_same(g, c.m) AS same_as_cpu
FROM kg_cpu c,
     LATERAL (SELECT kmedoids_fit('kg_pts', 'v', 4, metric => c.metric, seed => 1,
                                  id_column => 'id', engine => 'gpu') AS g) f
WHERE c.metric <> 'sqfd' ORDER BY c.metric;
-- kmeans_gpu.engine = gpu: signatures, and the aggregate
SET kmeans_gpu.engine = gpu;
SELECT (g).engine, kg_same(g, (SELECT m FROM kg_cpu WHERE metric = 'sqfd')) AS same_as_cpu
FROM (SELECT kmedoids_fit('kg_sigs', 'sig', 3, metric => 'sqfd', alpha => 0.5, seed => 2) AS g) f;
SELECT (g).engine, (g).medoids = (c).medoids AND (g).sizes = (c).sizes AND (g).cost = (c).cost
       AS same_as_cpu
FROM (SELECT kmedoids(v, 5, '{"seed": 3, "metric": "l1"}') AS g,
             kmedoids(v, 5, '{"seed": 3, "metric": "l1", "engine": "cpu"}') AS c FROM kg_pts) f;
-- the silhouette of kmeans_score
SELECT s.metric, (kmeans_score(c.m, 'kg_pts', 'v')).silhouette = s.s AS same_as_cpu
FROM kg_cpu c JOIN kg_sil s USING (metric) ORDER BY s.metric;
RESET kmeans_gpu.engine;
\set VERBOSITY default
-- 'auto' never fails for want of a GPU, and gives the same model
SET kmeans_gpu.engine = auto;
SELECT c.metric, (a).engine IN ('cpu', 'gpu') AS ran, kg_same(a, c.m) AS same_as_cpu
FROM kg_cpu c,
     LATERAL (SELECT kmedoids_fit('kg_pts', 'v', 4, metric => c.metric, seed => 1,
                                  id_column => 'id') AS a) f
WHERE c.metric <> 'sqfd' ORDER BY c.metric;
SELECT (a).engine IN ('cpu', 'gpu') AS ran,
       kg_same(a, (SELECT m FROM kg_cpu WHERE metric = 'sqfd')) AS same_as_cpu
FROM (SELECT kmedoids_fit('kg_sigs', 'sig', 3, metric => 'sqfd', alpha => 0.5, seed => 2) AS a) f;
SELECT s.metric, (kmeans_score(c.m, 'kg_pts', 'v')).silhouette = s.s AS same_as_cpu
FROM kg_cpu c JOIN kg_sil s USING (metric) ORDER BY s.metric;
-- FasterPAM: the CPU engine, under 'auto' too
SELECT (kmedoids_fit('kg_pts', 'v', 4, seed => 1, method => 'fasterpam')).engine;
RESET kmeans_gpu.engine;
DROP FUNCTION kg_same(kmedoids_model, kmedoids_model);
DROP TABLE kg_pts, kg_sigs, kg_cpu, kg_sil;
