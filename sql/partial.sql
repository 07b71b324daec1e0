-- kmeans_partial, kmeans_merge, kmeans_step: a Lloyd step split over parts
-- of the rows, and k-means|| through kmeans_fit, the aggregate and the
-- window function.
SET extra_float_digits = 0;

-- 300 points around four centres, in three parts.
CREATE TABLE part_pts AS
SELECT i AS id, i % 3 AS part,
       ARRAY[(i % 4 / 2) * 10 + (i * 7 % 11) * 0.1, (i % 2) * 10 + (i * 5 % 13) * 0.1]::real[] AS v
FROM generate_series(1, 300) i;
INSERT INTO part_pts VALUES (0, 0, NULL);

-- A start: the model after one iteration from four explicit centroids.
CREATE TABLE part_start AS
SELECT kmeans_fit('part_pts', 'v', 4, init_centroids => '{{0,0},{0,11},{11,0},{11,11}}',
                  max_iter => 1, tol => 0, seed => 1) AS m;

-- A partial: rows, counts, exact sums, for the model's centroids.
SELECT p::text
FROM (SELECT kmeans_partial(v, (SELECT m FROM part_start)) AS p FROM part_pts) s;

-- The text form reads back to the same partial; float8[] input maps the same rows.
SELECT p::text::kmeans_partial::text = p::text AS text_round_trip,
       p::text = (SELECT kmeans_partial(v::float8[], (SELECT m FROM part_start)) FROM part_pts)::text
         AS float8_same
FROM (SELECT kmeans_partial(v, (SELECT m FROM part_start)) AS p FROM part_pts) s;

-- Merged partials of any split are the partial of all the rows.
SELECT (SELECT kmeans_merge(p)::text
        FROM (SELECT part, kmeans_partial(v, (SELECT m FROM part_start)) AS p
              FROM part_pts GROUP BY part) s) =
       (SELECT kmeans_partial(v, (SELECT m FROM part_start))::text FROM part_pts) AS merged_equal,
       (SELECT kmeans_merge(p)::text
        FROM (SELECT id % 7 AS g, kmeans_partial(v, (SELECT m FROM part_start)) AS p
              FROM part_pts GROUP BY 1) s) =
       (SELECT kmeans_partial(v, (SELECT m FROM part_start))::text FROM part_pts) AS seven_parts_equal;

-- The step from merged partials is kmeans_fit's next iteration, bit for bit;
-- sizes and inertia describe the assignment the partial summed.
WITH p AS (SELECT kmeans_merge(p) AS p
           FROM (SELECT part, kmeans_partial(v, (SELECT m FROM part_start)) AS p
                 FROM part_pts GROUP BY part) s),
     stepped AS (SELECT kmeans_step((SELECT m FROM part_start), p) AS m FROM p),
     fit AS (SELECT kmeans_fit('part_pts', 'v', 4, init_centroids => '{{0,0},{0,11},{11,0},{11,11}}',
                               max_iter => 2, tol => 0, seed => 1) AS m)
SELECT (s.m).centroids = (f.m).centroids AS as_fit, (s.m).iterations, (s.m).converged,
       (s.m).sizes, (s.m).n_rows, (s.m).n_skipped, (s.m).init, (s.m).seed
FROM stepped s, fit f;

-- Stepping to convergence from the start, by partials, gives kmeans_fit's model.
CREATE FUNCTION pg_temp.step_until_converged(m kmeans_model) RETURNS kmeans_model
LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..50 LOOP
    m := kmeans_step(m, (SELECT kmeans_merge(p) FROM
                           (SELECT part, kmeans_partial(v, m) AS p FROM part_pts GROUP BY part) s));
    EXIT WHEN (m).converged;
  END LOOP;
  RETURN m;
END $$;
SELECT (s).centroids = (f).centroids AS same_centroids, (s).sizes = (f).sizes AS same_sizes,
       (s).cluster_inertia = (f).cluster_inertia AS same_cluster_inertia, (s).converged
FROM (SELECT pg_temp.step_until_converged(m) AS s FROM part_start) a,
     (SELECT kmeans_fit('part_pts', 'v', 4, init_centroids => '{{0,0},{0,11},{11,0},{11,11}}',
                        tol => 0, seed => 1) AS f) b;

-- Empty clusters: two centroids far from every row get the rows farthest
-- from their centroids, as kmeans_fit re-seeds them, also across parts.
CREATE TABLE part_far AS
SELECT kmeans_fit('part_pts', 'v', 4, init_centroids => '{{5,5},{100,100},{5,6},{-100,-100}}',
                  max_iter => 1, tol => 0, seed => 1) AS m;
WITH far AS (SELECT '(4,2,l2,"{{5,5},{100,100},{5,6},{-100,-100}}",,,,,,,,,explicit,1,1,300,0,)'::kmeans_model AS m),
     p AS (SELECT kmeans_merge(p) AS p
           FROM (SELECT part, kmeans_partial(v, (SELECT m FROM far)) AS p FROM part_pts GROUP BY part) s)
SELECT (kmeans_step((SELECT m FROM far), p)).centroids = (SELECT (m).centroids FROM part_far) AS reseeded_as_fit,
       (p::text::jsonb)->'far' AS kept_rows
FROM p;

-- Cosine, and a parallel plan (the partial state travels between processes).
CREATE TABLE part_cos AS
SELECT kmeans_fit('part_pts', 'v', 3, metric => 'cosine', init => 'random', seed => 4, max_iter => 1) AS m;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
SELECT (kmeans_step((SELECT m FROM part_cos), (SELECT kmeans_partial(v, (SELECT m FROM part_cos)) FROM part_pts))).centroids =
       (kmeans_fit('part_pts', 'v', 3, metric => 'cosine', init => 'random', seed => 4, max_iter => 2)).centroids
       AS cosine_as_fit;
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
RESET max_parallel_workers_per_gather;

-- No rows: NULL, which merges away.
SELECT kmeans_partial(v, (SELECT m FROM part_start)) IS NULL AS null_partial FROM part_pts WHERE false;
SELECT kmeans_merge(p) IS NULL AS null_merge FROM (SELECT NULL::kmeans_partial AS p) s;

-- k-means|| (Bahmani et al.) in kmeans_fit, the aggregate and the window function.
SELECT (a).init, (a).centroids = (b).centroids AS fit_equals_aggregate,
       (SELECT count(DISTINCT c) FROM (SELECT kmeans_cluster(v, 4, '{"init": "k-means||", "seed": 3}') OVER () AS c
                                       FROM part_pts) w) AS window_clusters
FROM (SELECT kmeans_fit('part_pts', 'v', 4, init => 'k-means||', seed => 3) AS a) x,
     (SELECT kmeans(v, 4, '{"init": "k-means||", "seed": 3}') AS b FROM part_pts) y;
SELECT (m).init, (m).sizes FROM (SELECT kmeans_fit('part_pts', 'v', 4, init => 'KMeans||', seed => 3) AS m) s;

-- Errors.
SELECT kmeans_partial(v, NULL) FROM part_pts;
SELECT kmeans_partial(v || 1::real, (SELECT m FROM part_start)) FROM part_pts;
SELECT kmeans_partial(v, CASE WHEN id < 100 THEN (SELECT m FROM part_start) ELSE (SELECT m FROM part_far) END)
FROM part_pts;
SELECT kmeans_partial(ARRAY[0, 0]::real[], (SELECT m FROM part_cos)) FROM part_pts;
SELECT kmeans_step((SELECT m FROM part_far), (SELECT kmeans_partial(v, (SELECT m FROM part_start)) FROM part_pts));
SELECT kmeans_step((SELECT m FROM part_start), NULL);
SELECT kmeans_step(NULL, (SELECT kmeans_partial(v, (SELECT m FROM part_start)) FROM part_pts));
SELECT kmeans_step((SELECT m FROM part_start), (SELECT kmeans_partial(v, (SELECT m FROM part_start))
                                                FROM part_pts WHERE v IS NULL));
SELECT kmeans_merge(p) FROM (SELECT kmeans_partial(v, (SELECT m FROM part_start)) AS p FROM part_pts
                             UNION ALL SELECT kmeans_partial(v, (SELECT m FROM part_far)) FROM part_pts) s;

-- Bad kmeans_partial input: every field is checked.
CREATE FUNCTION pg_temp.bad(t text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  PERFORM t::kmeans_partial;
  RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ' ' || SQLERRM;
END $$;
CREATE FUNCTION pg_temp.p(k int, dim int, extra jsonb) RETURNS text LANGUAGE sql AS $$
  SELECT (jsonb_build_object('version', 1, 'k', k, 'dim', dim, 'metric', 'l2', 'model', '0123456789abcdef',
          'rows', 4, 'skipped', 0, 'counts', jsonb_build_array(2, 2),
          'weights', '[[2], [2]]'::jsonb, 'inertia', '[[1], [0.5]]'::jsonb,
          'sums', '[[[1], [2]], [[3], [4]]]'::jsonb, 'far', '[]'::jsonb) || extra)::text $$;
SELECT pg_temp.bad(pg_temp.p(2, 2, '{}'));
SELECT pg_temp.bad('not json');
SELECT pg_temp.bad('[1, 2]');
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"color": "red"}'));
SELECT pg_temp.bad((pg_temp.p(2, 2, '{}')::jsonb - 'far')::text);
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"version": 2}'));
SELECT pg_temp.bad(pg_temp.p(0, 2, '{}'));
SELECT pg_temp.bad(pg_temp.p(2, 0, '{}'));
SELECT pg_temp.bad(pg_temp.p(100000, 10000, '{}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"metric": "manhattan"}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"model": "xyz"}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"rows": -1}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"rows": 5}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"counts": [2]}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"counts": [-2, 6]}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"counts": [4, 0]}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"weights": [[2], [-2]]}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"weights": [[2], ["2"]]}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"weights": [[1e400], [2]]}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"weights": [[1e308, 1e308], [2]]}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"inertia": [[-1], [0.5]]}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"sums": [[[1], [2]]]}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"sums": [[[1], [2], [3]], [[3], [4]]]}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"sums": [[1, 2], [[3], [4]]]}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"metric": "cosine"}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"far": [{"cluster": 0, "weight": 1, "cost": 1, "hash": "0000000000000000", "vector": [1, 2]}]}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"counts": [4, 0], "weights": [[4], []], "inertia": [[1], []], "sums": [[[1], [2]], [[], []]], "far": [{"cluster": 0, "weight": 1, "cost": 1, "hash": "0000000000000000", "vector": [1, 2]}]}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"counts": [4, 0], "weights": [[4], []], "inertia": [[1], []], "sums": [[[1], [2]], [[], []]], "far": [{"cluster": 1, "weight": 1, "cost": 1, "hash": "0000000000000000", "vector": [1, 2]}]}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"counts": [4, 0], "weights": [[4], []], "inertia": [[1], []], "sums": [[[1], [2]], [[], []]], "far": [{"cluster": 0, "weight": 1, "cost": 1, "hash": "0000000000000000", "vector": [1]}]}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"counts": [4, 0], "weights": [[4], []], "inertia": [[1], []], "sums": [[[1], [2]], [[], []]], "far": [{"cluster": 0, "weight": -1, "cost": 1, "hash": "0000000000000000", "vector": [1, 2]}]}'));
SELECT pg_temp.bad(pg_temp.p(2, 2, '{"counts": [4, 0], "weights": [[4], []], "inertia": [[1], []], "sums": [[[1], [2]], [[], []]], "far": [{"cluster": 0, "weight": 1, "cost": 1, "vector": [1, 2]}]}'));
-- a kept row whose hash is right is accepted; kmeans_step then checks it against the model
SELECT pg_temp.bad(replace(pg_temp.p(2, 2, '{"counts": [4, 0], "weights": [[4], []], "inertia": [[1], []], "sums": [[[1], [2]], [[], []]], "far": [{"cluster": 0, "weight": 1, "cost": 1, "hash": "HASH", "vector": [1, 2]}]}'),
                       'HASH', (SELECT (p::text::jsonb)->'far'->0->>'hash'
                                FROM (SELECT kmeans_partial(ARRAY[1, 2]::real[],
                                        '(2,2,l2,"{{1,2},{100,100}}",,,,,,,,,,,,,,)'::kmeans_model) AS p) s)));
-- a partial whose kept row is not where the model puts it
WITH m AS (SELECT '(2,2,l2,"{{1,2},{100,100}}",,,,,,,,,,,,,,)'::kmeans_model AS m),
     p AS (SELECT kmeans_partial(ARRAY[1, 2]::real[], m) AS p FROM m)
SELECT kmeans_step(m, jsonb_set(p::text::jsonb, '{far,0,cost}', '2')::text::kmeans_partial) FROM m, p;
DROP TABLE part_pts, part_start, part_far, part_cos;
