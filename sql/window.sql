-- kmeans_cluster(vec, k [, options]) OVER (...): one clustering per partition.
SET extra_float_digits = 0;

CREATE TABLE win_pts AS
SELECT i AS id, g,
       ARRAY[(i % 2) * 10 + (i % 5) * 0.25 + g * 100, (i % 2) * 10 + (i % 3) * 0.5]::real[] AS v
FROM generate_series(1, 40) i, generate_series(0, 2) g;
INSERT INTO win_pts VALUES (41, 0, NULL);

-- Each partition splits into its two groups of 20; the NULL row gets NULL.
SELECT g, c IS NULL AS no_cluster, count(*)
FROM (SELECT g, kmeans_cluster(v, 2, '{"seed": 1}') OVER (PARTITION BY g) AS c FROM win_pts) q
GROUP BY g, c IS NULL ORDER BY 1, 2;
SELECT g, count(DISTINCT c) AS clusters,
       bool_and(c = first_c) FILTER (WHERE id % 2 = 1) AS odd_rows_together
FROM (SELECT id, g, c, first_value(c) OVER (PARTITION BY g, id % 2 ORDER BY id) AS first_c
      FROM (SELECT id, g, kmeans_cluster(v, 2, '{"seed": 1}') OVER (PARTITION BY g) AS c
            FROM win_pts WHERE v IS NOT NULL) q) r
GROUP BY g ORDER BY g;

-- The window function and the aggregate cluster a partition the same way.
SELECT g, count(*) AS disagreements
FROM (SELECT w.g, w.c, kmeans_assign(m.m, w.v) AS a
      FROM (SELECT g, v, kmeans_cluster(v, 3, '{"seed": 9}') OVER (PARTITION BY g) AS c
            FROM win_pts WHERE v IS NOT NULL) w
      JOIN (SELECT g, kmeans(v, 3, '{"seed": 9}') AS m FROM win_pts GROUP BY g) m USING (g)) q
WHERE c <> a GROUP BY g ORDER BY g;

-- Without PARTITION BY: the whole result; float8[] input; default options.
SELECT count(DISTINCT c) FROM (SELECT kmeans_cluster(v::float8[], 2) OVER () AS c FROM win_pts) q;
SELECT count(DISTINCT c) FROM (SELECT kmeans_cluster(v, 6) OVER () AS c FROM win_pts) q;

-- Errors.
SELECT kmeans_cluster(v, (id % 2)::int + 1) OVER () FROM win_pts;
SELECT kmeans_cluster(v, NULL) OVER () FROM win_pts;
SELECT kmeans_cluster(v, 200) OVER () FROM win_pts;
SELECT kmeans_cluster(v, 2, CASE WHEN id = 3 THEN '{"seed": 1}'::jsonb END) OVER () FROM win_pts;
SELECT kmeans_cluster(v, 2, '{"metric": "nope"}') OVER () FROM win_pts;
SELECT kmeans_cluster(v, 2) OVER () FROM (VALUES ('{1,2}'::real[]), ('{1}')) t(v);
SELECT kmeans_cluster(NULL::real[], 2) OVER () FROM win_pts;

SELECT count(*) FROM win_pts;
DROP TABLE win_pts;
