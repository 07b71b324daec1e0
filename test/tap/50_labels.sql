-- kmeans_labels, kmeans_assign and the window function agree row by row,
-- and the model's sizes and inertia are what its labels say.
BEGIN;
SELECT plan(8);
SELECT setseed(0.3);

CREATE TEMP TABLE pts AS
SELECT i AS id,
       (SELECT array_agg((random() * 4 + (i % 9) * 2 + j * 0)::real) FROM generate_series(1, 16) j) AS v
FROM generate_series(1, 4000) i;
INSERT INTO pts VALUES (4001, NULL), (4002, NULL);

CREATE TEMP TABLE model AS SELECT kmeans_fit('pts', 'v', 12, seed => 17) AS m;
CREATE TEMP TABLE lab AS SELECT l.* FROM model, kmeans_labels(m, 'pts', 'v', 'id') l;
CREATE TEMP TABLE win AS
SELECT id, kmeans_cluster(v, 12, '{"seed": 17}') OVER () AS c FROM pts;

SELECT is((SELECT count(*) FROM lab), 4002::bigint, 'kmeans_labels returns every row');
SELECT is((SELECT count(*) FROM lab l JOIN pts p USING (id), model
           WHERE l.cluster_id IS DISTINCT FROM kmeans_assign(m, p.v)), 0::bigint,
          'kmeans_labels agrees with kmeans_assign on every row');
SELECT is((SELECT count(*) FROM lab l JOIN win w USING (id)
           WHERE l.cluster_id IS DISTINCT FROM w.c), 0::bigint,
          'kmeans_labels agrees with the window function on every row');
SELECT is((SELECT array_agg(n ORDER BY c) FROM
             (SELECT cluster_id AS c, count(*) AS n FROM lab WHERE cluster_id IS NOT NULL
              GROUP BY 1) x),
          (SELECT (m).sizes FROM model), 'sizes count the labels');

-- distances recomputed in SQL
CREATE TEMP TABLE check_d AS
SELECT l.id, l.distance, sqrt(sum((p.x::float8 - c.x) ^ 2)) AS sql_distance
FROM lab l JOIN (SELECT id, x, o FROM pts, unnest(v) WITH ORDINALITY u(x, o)) p USING (id),
     model, LATERAL (SELECT x, o FROM kmeans_centroids(m) cc, unnest(cc.centroid) WITH ORDINALITY u(x, o)
                     WHERE cc.cluster_id = l.cluster_id) c
WHERE c.o = p.o GROUP BY l.id, l.distance;
SELECT cmp_ok((SELECT max(abs(distance - sql_distance) / greatest(sql_distance, 1e-9)) FROM check_d),
              '<', 1e-9::float8, 'distances are Euclidean distances to the centroid');
SELECT cmp_ok((SELECT abs((m).inertia - (SELECT sum(distance ^ 2) FROM lab)) / (m).inertia
               FROM model), '<', 1e-9::float8, 'inertia is the sum of squared distances');
SELECT cmp_ok((SELECT max(abs(ci - s) / greatest(s, 1e-9))
               FROM model, unnest((m).cluster_inertia) WITH ORDINALITY u(ci, o)
               JOIN (SELECT cluster_id + 1 AS o, sum(distance ^ 2) AS s FROM lab GROUP BY 1) x USING (o)),
              '<', 1e-9::float8, 'per-cluster inertia too');
-- no row is closer to another centroid than to its own
SELECT is((SELECT count(*) FROM lab l JOIN pts p USING (id), model,
           LATERAL (SELECT min(sqrt((SELECT sum((a::float8 - b) ^ 2) FROM unnest(p.v, cc.centroid) u(a, b))))
                           AS best FROM kmeans_centroids(m) cc) b
           WHERE l.distance > b.best * (1 + 1e-12) AND p.id <= 500), 0::bigint,
          'each of the first 500 rows is labelled with its nearest centroid');

SELECT * FROM finish();
ROLLBACK;
