-- kmeans_centroids, kmeans_assign and kmeans_labels on fitted and hand-built models.
SET extra_float_digits = 0;

CREATE TABLE asg_pts AS
SELECT i AS id,
       ARRAY[(i % 2) * 10 + (i % 5) * 0.25, (i % 2) * 10 + (i % 3) * 0.5]::real[] AS v
FROM generate_series(1, 60) i;
INSERT INTO asg_pts VALUES (61, NULL);

-- A model with known cluster ids: explicit start centroids near each group.
CREATE TABLE asg_model AS
SELECT kmeans_fit('asg_pts', 'v', 2, init_centroids => '{{0,0},{10,10}}') AS m;

SELECT cluster_id, centroid, size, round(inertia::numeric, 4) AS inertia
FROM kmeans_centroids((SELECT m FROM asg_model));

-- One row at a time, real[] and float8[] (a literal needs its type: both exist).
SELECT kmeans_assign(m, '{0.2,0.1}'::real[]), kmeans_assign(m, '{9,11}'::real[]),
       kmeans_assign(m, '{0.2,0.1}'::float8[]), kmeans_assign(m, NULL::real[])
FROM asg_model;

-- Per row, and in UPDATE.
SELECT kmeans_assign(m, v) AS cluster_id, count(*)
FROM asg_pts, asg_model GROUP BY 1 ORDER BY 1;
ALTER TABLE asg_pts ADD COLUMN cluster int;
UPDATE asg_pts SET cluster = kmeans_assign((SELECT m FROM asg_model), v);
SELECT cluster, count(*) FROM asg_pts GROUP BY 1 ORDER BY 1;

-- kmeans_labels: every row, one pass; NULL vectors give NULL.
SELECT cluster_id, count(*), round(max(distance)::numeric, 4) AS max_distance
FROM kmeans_labels((SELECT m FROM asg_model), 'asg_pts', 'v', 'id')
GROUP BY 1 ORDER BY 1;
SELECT * FROM kmeans_labels((SELECT m FROM asg_model), 'asg_pts', 'v', 'id') WHERE id IN (1, 2, 61)
ORDER BY id;
-- ... and agrees with kmeans_assign on every row
SELECT count(*) AS disagreements
FROM kmeans_labels((SELECT m FROM asg_model), 'asg_pts', 'v', 'id') l
JOIN asg_pts p ON p.id = l.id
WHERE l.cluster_id IS DISTINCT FROM p.cluster;

-- A hand-built model.
SELECT kmeans_assign(ROW(2, 1, 'l2', '{{0},{10}}', NULL, NULL, NULL, NULL, NULL, NULL,
                         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model, '{6}'::real[]);
SELECT * FROM kmeans_centroids(ROW(2, 1, 'l2', '{{0},{10}}', NULL, NULL, NULL, NULL, NULL,
                                   NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model);
-- ties go to the lowest cluster id
SELECT kmeans_assign(ROW(2, 1, 'l2', '{{0},{10}}', NULL, NULL, NULL, NULL, NULL, NULL,
                         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model, '{5}'::real[]);
-- cosine: the direction decides, not the length
SELECT kmeans_assign(ROW(2, 2, 'cosine', '{{1,0},{0,1}}', NULL, NULL, NULL, NULL, NULL, NULL,
                         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model, '{100,120}'::real[]);
CREATE TABLE asg_dirs (id int, v real[]);
INSERT INTO asg_dirs VALUES (1, '{3,1}'), (2, '{1,3}'), (3, '{-1,-2}'), (4, NULL);
SELECT * FROM kmeans_labels(ROW(2, 2, 'cosine', '{{1,0},{0,1}}', NULL, NULL, NULL, NULL, NULL,
                                NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model,
                            'asg_dirs', 'v', 'id') ORDER BY id;

-- Errors: vectors of the wrong shape.
SELECT kmeans_assign(m, '{1,2,3}'::real[]) FROM asg_model;
SELECT kmeans_assign(m, '{{1,2},{3,4}}'::real[]) FROM asg_model;
SELECT kmeans_assign(m, '{1,NULL}'::real[]) FROM asg_model;
SELECT kmeans_assign(m, '{1,NaN}'::real[]) FROM asg_model;
SELECT kmeans_assign(ROW(2, 2, 'cosine', '{{1,0},{0,1}}', NULL, NULL, NULL, NULL, NULL, NULL,
                         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model, '{0,0}'::real[]);

-- Errors: inconsistent hand-built models.
SELECT kmeans_assign(ROW(3, 1, 'l2', '{{0},{10}}', NULL, NULL, NULL, NULL, NULL, NULL,
                         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model, '{6}'::real[]);
SELECT kmeans_assign(ROW(2, 2, 'l2', '{{0},{10}}', NULL, NULL, NULL, NULL, NULL, NULL,
                         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model, '{6,6}'::real[]);
SELECT kmeans_assign(ROW(2, 1, 'l2', '{0,10}', NULL, NULL, NULL, NULL, NULL, NULL,
                         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model, '{6}'::real[]);
SELECT kmeans_assign(ROW(2, 1, 'l2', NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model, '{6}'::real[]);
SELECT kmeans_assign(ROW(2, 1, 'l2', '{{0},{NaN}}', NULL, NULL, NULL, NULL, NULL, NULL,
                         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model, '{6}'::real[]);
SELECT kmeans_assign(ROW(2, 1, 'l2', '{{0},{NULL}}', NULL, NULL, NULL, NULL, NULL, NULL,
                         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model, '{6}'::real[]);
SELECT kmeans_assign(ROW(2, 1, 'hamming', '{{0},{10}}', NULL, NULL, NULL, NULL, NULL, NULL,
                         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model, '{6}'::real[]);
SELECT kmeans_assign(ROW(NULL, 1, 'l2', '{{0},{10}}', NULL, NULL, NULL, NULL, NULL, NULL,
                         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model, '{6}'::real[]);
SELECT kmeans_assign(ROW(0, 1, 'l2', '{{0},{10}}', NULL, NULL, NULL, NULL, NULL, NULL,
                         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model, '{6}'::real[]);
SELECT kmeans_assign(ROW(2, 1, 'cosine', '{{0},{10}}', NULL, NULL, NULL, NULL, NULL, NULL,
                         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model, '{6}'::real[]);
SELECT * FROM kmeans_centroids(ROW(2, 1, 'l2', '{{0},{10}}', '{1,2,3}', NULL, NULL, NULL, NULL,
                                   NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model);
SELECT * FROM kmeans_centroids(ROW(2, 1, 'l2', '{{0},{10}}', NULL, NULL, NULL, NULL, NULL,
                                   NULL, NULL, '{1,NULL}', NULL, NULL, NULL, NULL, NULL, NULL)::kmeans_model);

-- Errors: kmeans_labels arguments.
SELECT * FROM kmeans_labels(NULL, 'asg_pts', 'v', 'id');
SELECT * FROM kmeans_labels((SELECT m FROM asg_model), 'asg_pts', 'v', NULL);
SELECT * FROM kmeans_labels((SELECT m FROM asg_model), 'asg_pts', 'nope', 'id');
SELECT * FROM kmeans_labels((SELECT m FROM asg_model), 'asg_pts', 'v', 'nope');
SELECT * FROM kmeans_labels((SELECT m FROM asg_model), 'asg_pts', 'v', 'v');
SELECT * FROM kmeans_labels((SELECT m FROM asg_model), 'missing', 'v', 'id');
CREATE TABLE asg_3d AS SELECT 1 AS id, '{1,2,3}'::real[] AS v;
SELECT * FROM kmeans_labels((SELECT m FROM asg_model), 'asg_3d', 'v', 'id');

-- The session is still usable.
SELECT count(*) FROM asg_pts;

DROP TABLE asg_pts, asg_model, asg_3d, asg_dirs;
