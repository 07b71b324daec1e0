-- metric cosine is spherical k-means: unit-norm centroids, and only
-- directions matter.
BEGIN;
SELECT plan(6);
SELECT setseed(0.75);

-- four directions in 5-D, with small angular noise and lengths from 0.1 to 1000
CREATE TEMP TABLE dirs AS
SELECT row_number() OVER () AS id, d, i,
       (SELECT array_agg(((CASE WHEN j = d THEN 1 ELSE 0.15 END) + (random() - 0.5) * 0.1) * len
                         ORDER BY j)::real[]
        FROM generate_series(1, 5) j) AS v
FROM generate_series(1, 4) d, generate_series(1, 200) i,
     LATERAL (SELECT 10 ^ (random() * 4 - 1) + i * 0 AS len) l;

CREATE TEMP TABLE cm AS SELECT kmeans(v, 4, '{"metric": "cosine", "seed": 8}') AS m FROM dirs;

SELECT cmp_ok((SELECT max(abs(sqrt((SELECT sum(x ^ 2) FROM unnest(c.centroid) x)) - 1))
               FROM cm, kmeans_centroids(m) c), '<', 1e-6::float8,
              'every centroid has unit norm');
SELECT is((SELECT count(*) FROM (SELECT d FROM dirs, cm GROUP BY d
                                  HAVING count(DISTINCT kmeans_assign(m, v)) > 1) x),
          0::bigint, 'each direction is one cluster, whatever the lengths');

-- rescaling every row leaves the clustering unchanged
CREATE TEMP TABLE scaled AS
SELECT id, (SELECT array_agg(x * (1 + i % 7) * 3.5)::real[] FROM unnest(v) x) AS v FROM dirs;
SELECT is((SELECT count(*) FROM dirs a JOIN scaled b USING (id), cm
           WHERE kmeans_assign(m, a.v) <> kmeans_assign(m, b.v)), 0::bigint,
          'kmeans_assign ignores the length of a row');
SELECT cmp_ok((SELECT max(abs(x - y)) FROM cm,
               (SELECT kmeans(v, 4, jsonb_build_object('metric', 'cosine',
                                                       'init_centroids', to_jsonb((SELECT (m).centroids FROM cm))))
                       AS m2 FROM scaled) s,
               unnest((cm.m).centroids, (s.m2).centroids) u(x, y)), '<', 1e-5::real,
              'fitting the rescaled rows from the same start gives the same centroids');

-- distance is 1 - cos, inertia the sum of distances
CREATE TEMP TABLE lab AS
SELECT l.* FROM cm, kmeans_labels(m, 'dirs', 'v', 'id') l;
SELECT cmp_ok((SELECT max(abs(l.distance - (1 - s.dot / (s.nv * s.nc))))
               FROM lab l JOIN dirs x USING (id), cm,
               LATERAL (SELECT centroid FROM kmeans_centroids(m) WHERE cluster_id = l.cluster_id) cc,
               LATERAL (SELECT sum(p::float8 * q) AS dot, sqrt(sum(p::float8 * p)) AS nv,
                               sqrt(sum(q::float8 * q)) AS nc
                        FROM unnest(x.v, cc.centroid) u(p, q)) s), '<', 1e-6::float8,
              'kmeans_labels distance is 1 - cos');
SELECT cmp_ok((SELECT abs((m).inertia - (SELECT sum(distance) FROM lab)) / (m).inertia FROM cm),
              '<', 1e-9::float8, 'inertia is the sum of the distances');

SELECT * FROM finish();
ROLLBACK;
