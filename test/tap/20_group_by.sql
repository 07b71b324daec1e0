-- GROUP BY gives one model per group, each fitted on its own rows only.
BEGIN;
SELECT plan(5);
SELECT setseed(0.5);

-- three groups, each with two blobs of its own (centres g*100 and g*100+20)
CREATE TEMP TABLE grouped AS
SELECT g, blob,
       ARRAY[(g * 100 + blob * 20 + random() - 0.5)::real, (random() - 0.5)::real] AS v
FROM generate_series(1, 3) g, generate_series(0, 1) blob, generate_series(1, 100 + 50 * g) i;

CREATE TEMP TABLE models AS
SELECT g, kmeans(v, 2, '{"seed": 1}') AS m FROM grouped GROUP BY g;

SELECT is((SELECT count(*) FROM models), 3::bigint, 'one model per group');
SELECT is((SELECT array_agg((m).n_rows ORDER BY g) FROM models),
          ARRAY[300, 400, 500]::bigint[], 'each model counts its own group''s rows');
SELECT ok((SELECT bool_and(abs(c.centroid[1] - (g * 100 + 10)) BETWEEN 9.5 AND 10.5)
           FROM models, kmeans_centroids(m) c),
          'centroids sit on their own group''s blobs');
SELECT is((SELECT count(*) FROM grouped x JOIN models USING (g)
           GROUP BY g, blob HAVING count(DISTINCT kmeans_assign(m, v)) > 1), NULL,
          'each blob of each group in one cluster');
SELECT is((SELECT array_agg(m = (SELECT kmeans(v, 2, '{"seed": 1}') FROM grouped y WHERE y.g = models.g)
                            ORDER BY g) FROM models),
          ARRAY[true, true, true], 'a group''s model equals the model of its rows alone');

SELECT * FROM finish();
ROLLBACK;
