-- Upgrades keep users' models: models stored under 0.1 (both metrics,
-- weights, from the aggregate and from kmeans_fit) work with every function
-- after ALTER EXTENSION kmeans_gpu UPDATE, with the same labels as before.
-- Runs in a database of its own, so that 0.1 can be installed there.
SET extra_float_digits = 0;
\set regress_db :DBNAME
DROP DATABASE IF EXISTS kmeans_upgrade;
CREATE DATABASE kmeans_upgrade;
\c kmeans_upgrade
SET extra_float_digits = 0;

-- 0.1, driven by this build's library
CREATE EXTENSION kmeans_gpu VERSION '0.1';
SELECT extversion FROM pg_extension WHERE extname = 'kmeans_gpu';

CREATE TABLE pts (id bigint PRIMARY KEY, v real[], v8 float8[], w float8);
INSERT INTO pts
SELECT i,
       ARRAY[(i % 3) * 10 + (i % 7) * 0.5 + 1, (i % 3) * 5 - (i % 5) * 0.25, (i % 4) + 1]::real[],
       ARRAY[(i % 3) * 10 + (i % 7) * 0.5 + 1, (i % 3) * 5 - (i % 5) * 0.25, (i % 4) + 1]::float8[],
       1 + i % 4
FROM generate_series(1, 300) i;

CREATE TABLE stored (name text PRIMARY KEY, m kmeans_model);
INSERT INTO stored
SELECT 'aggregate l2', kmeans(v, 3, '{"seed": 5}') FROM pts;
INSERT INTO stored
SELECT 'aggregate cosine float8', kmeans(v8, 4, '{"seed": 6, "metric": "cosine"}') FROM pts;
INSERT INTO stored VALUES
  ('fit l2 weighted', kmeans_fit('pts', 'v', 3, seed => 7, weight_column => 'w')),
  ('fit cosine', kmeans_fit('pts', 'v', 5, seed => 8, metric => 'cosine')),
  ('fit explicit', kmeans_fit('pts', 'v', 2, init_centroids => '{{0,0,0},{20,10,4}}'));
SELECT name, (m).k, (m).dim, (m).metric, (m).init, (m).n_rows FROM stored ORDER BY name;
-- 0.1's model cannot say how its rows were stored: a half-precision fit
-- waits for the update
SELECT kmeans(v, 3, '{"seed": 5, "storage": "float16"}') FROM pts;

-- 0.1 has no kmeans_read_row: kmeans_fit reads in one backend, even when
-- asked for parallel workers
SET kmeans_gpu.read_workers = 2;
SELECT (m).n_rows, m = (SELECT s.m FROM stored s WHERE name = 'fit l2 weighted') AS same
FROM (SELECT kmeans_fit('pts', 'v', 3, seed => 7, weight_column => 'w') AS m) q;
RESET kmeans_gpu.read_workers;

-- What every function says of the stored models under 0.1.
CREATE TABLE before AS
SELECT s.name, l.id, l.cluster_id, l.distance, kmeans_assign(s.m, p.v) AS assigned,
       kmeans_assign(s.m, p.v8) AS assigned8
FROM stored s CROSS JOIN LATERAL kmeans_labels(s.m, 'pts', 'v', 'id') l
JOIN pts p ON p.id = l.id;
CREATE TABLE centroids_before AS
SELECT s.name, c.* FROM stored s, kmeans_centroids(s.m) c;

ALTER EXTENSION kmeans_gpu UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'kmeans_gpu';
SELECT installed_version = default_version AS latest FROM pg_available_extensions WHERE name = 'kmeans_gpu';

-- The same answers from the stored values after the update.
SELECT count(*) AS rows_compared,
       count(*) FILTER (WHERE b.cluster_id IS DISTINCT FROM l.cluster_id
                           OR b.distance IS DISTINCT FROM l.distance) AS labels_changed,
       count(*) FILTER (WHERE b.assigned IS DISTINCT FROM kmeans_assign(s.m, p.v)
                           OR b.assigned8 IS DISTINCT FROM kmeans_assign(s.m, p.v8)) AS assign_changed,
       count(*) FILTER (WHERE l.cluster_id IS DISTINCT FROM b.assigned) AS labels_vs_assign
FROM stored s CROSS JOIN LATERAL kmeans_labels(s.m, 'pts', 'v', 'id') l
JOIN pts p ON p.id = l.id JOIN before b ON b.name = s.name AND b.id = l.id;
SELECT count(*) AS centroid_rows,
       count(*) FILTER (WHERE (b.centroid, b.size, b.inertia) IS DISTINCT FROM (c.centroid, c.size, c.inertia))
         AS centroids_changed
FROM stored s, kmeans_centroids(s.m) c JOIN centroids_before b ON b.cluster_id = c.cluster_id
WHERE b.name = s.name;
-- A stored model reads the same as before, field for field.
SELECT name, (m).k, (m).dim, (m).metric, (m).init, (m).n_rows FROM stored ORDER BY name;

-- 0.2's storage attribute reads NULL in the old values, which means float32:
-- a vector float16 could not hold is labelled, as a float32 model labels it.
SELECT name, (m).storage FROM stored ORDER BY name;
SELECT kmeans_assign(m, '{70000, 0, 1}'::real[]) AS old_model,
       kmeans_assign(json_populate_record(m, '{"storage": "float32"}'), '{70000, 0, 1}'::real[]) AS float32_model
FROM stored WHERE name = 'fit explicit';
SELECT kmeans_assign(json_populate_record(m, '{"storage": "float16"}'), '{70000, 0, 1}'::real[])
FROM stored WHERE name = 'fit explicit';

-- New models sit beside the old ones in the same column.
INSERT INTO stored SELECT 'new aggregate', kmeans(v, 3, '{"seed": 5}') FROM pts;
-- (compared on 0.1's attributes: later attributes are NULL in old values)
SELECT ((a.m).k, (a.m).dim, (a.m).metric, (a.m).centroids, (a.m).sizes, (a.m).inertia,
        (a.m).iterations, (a.m).converged, (a.m).engine, (a.m).n_rows, (a.m).n_skipped,
        (a.m).cluster_inertia, (a.m).init, (a.m).seed, (a.m).n_init, (a.m).max_iter, (a.m).tol) =
       ((b.m).k, (b.m).dim, (b.m).metric, (b.m).centroids, (b.m).sizes, (b.m).inertia,
        (b.m).iterations, (b.m).converged, (b.m).engine, (b.m).n_rows, (b.m).n_skipped,
        (b.m).cluster_inertia, (b.m).init, (b.m).seed, (b.m).n_init, (b.m).max_iter, (b.m).tol)
         AS same_model_as_0_1
FROM stored a, stored b WHERE a.name = 'new aggregate' AND b.name = 'aggregate l2';
SELECT (m).storage FROM stored WHERE name = 'new aggregate';
INSERT INTO stored SELECT 'new float16', kmeans(v, 3, '{"seed": 5, "storage": "float16"}') FROM pts;
SELECT (m).storage, (m).n_rows FROM stored WHERE name = 'new float16';

\c :regress_db
DROP DATABASE kmeans_upgrade;
