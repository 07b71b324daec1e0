-- Planted Gaussian blobs are recovered: every blob lands in one cluster of
-- its own and each centroid is near its blob's centre.
BEGIN;
SELECT plan(8);
SELECT setseed(0.25);

CREATE TEMP TABLE centers AS
SELECT b, array_agg((random() * 100 - 50)::real ORDER BY j) AS c
FROM generate_series(1, 6) b, generate_series(1, 8) j GROUP BY b;

-- 250 points per blob, standard deviation 1 (Box-Muller)
CREATE TEMP TABLE blobs AS
SELECT row_number() OVER () AS id, b,
       (SELECT array_agg((c[j] + sqrt(-2 * ln(1 - random())) * cos(2 * pi() * random()))::real
                         ORDER BY j)
        FROM generate_series(1, 8) j) AS v
FROM centers, generate_series(1, 250) i;

CREATE TEMP TABLE fits AS
SELECT 'aggregate' AS via, (SELECT kmeans(v, 6, '{"seed": 3}') FROM blobs) AS m
UNION ALL
SELECT 'kmeans_fit', kmeans_fit('blobs', 'v', 6, seed => 3)
UNION ALL
SELECT 'float8[]', (SELECT kmeans(v::float8[], 6, '{"seed": 3, "n_init": 2}') FROM blobs);

CREATE TEMP TABLE labeled AS
SELECT f.via, b.b, kmeans_assign(f.m, b.v) AS c FROM fits f, blobs b;

SELECT is((SELECT count(*) FROM (SELECT via, b FROM labeled GROUP BY via, b
                                  HAVING count(DISTINCT c) > 1) x),
          0::bigint, 'every blob lies in a single cluster');
SELECT is((SELECT count(*) FROM (SELECT via, c FROM labeled GROUP BY via, c
                                  HAVING count(DISTINCT b) > 1) x),
          0::bigint, 'no cluster mixes two blobs');

-- distance from each centroid to the centre of the blob it captured
CREATE TEMP TABLE offsets AS
SELECT l.via, l.c,
       sqrt((SELECT sum((cc.centroid[j] - ce.c[j]) ^ 2) FROM generate_series(1, 8) j)) AS off
FROM (SELECT DISTINCT via, b, c FROM labeled) l
JOIN fits f ON f.via = l.via
JOIN centers ce ON ce.b = l.b
JOIN LATERAL kmeans_centroids(f.m) cc ON cc.cluster_id = l.c;

SELECT cmp_ok((SELECT max(off) FROM offsets), '<', 0.3::float8,
              'every centroid within 0.3 of its planted centre (expected ~0.06)');
SELECT is((SELECT count(*) FROM offsets), 18::bigint, 'six clusters for each way of fitting');
SELECT is((SELECT array_agg(DISTINCT s ORDER BY s) FROM fits, unnest((m).sizes) s),
          ARRAY[250]::bigint[], 'every cluster has the 250 points of its blob');
SELECT ok((SELECT bool_and((m).converged) FROM fits), 'all fits converged');
SELECT cmp_ok((SELECT max(abs((m).inertia / (1500 * 8) - 1)) FROM fits), '<', 0.1::float8,
              'inertia per point and dimension close to the noise variance 1');
SELECT is((SELECT count(DISTINCT (m).inertia::numeric(20,6)) FROM fits WHERE via <> 'float8[]'),
          1::bigint, 'aggregate and kmeans_fit give the same inertia for the same seed');

SELECT * FROM finish();
ROLLBACK;
