-- kmeans_fit(source, column_name, k, ...): one pass over a table's column.
SET extra_float_digits = 0;

CREATE TABLE fit_pts (
	id bigint PRIMARY KEY,
	v real[],
	v8 float8[],
	vi integer[],
	w float8,
	label text
);
INSERT INTO fit_pts
SELECT i,
       ARRAY[(i % 2) * 10 + (i % 5) * 0.25 + 1, (i % 2) * 10 + (i % 3) * 0.5]::real[],
       ARRAY[(i % 2) * 10 + (i % 5) * 0.25 + 1, (i % 2) * 10 + (i % 3) * 0.5]::float8[],
       ARRAY[(i % 2) * 10, (i % 2) * 10],
       1 + i % 3,
       'row ' || i
FROM generate_series(1, 60) i;

CREATE FUNCTION show(m kmeans_model)
RETURNS TABLE (centroid numeric[], size bigint, inertia numeric)
LANGUAGE sql AS $$
  SELECT (SELECT array_agg(round(x::numeric, 3)) FROM unnest(c.centroid) x),
         c.size, round(c.inertia::numeric, 3)
  FROM kmeans_centroids(m) c ORDER BY 1
$$;

-- Defaults after k: max_iter 300, tol 1e-4, k-means++, l2, a random seed, n_init 1.
SELECT (m).k, (m).dim, (m).metric, (m).init, (m).max_iter, (m).tol, (m).n_init,
       (m).n_rows, (m).n_skipped, (m).seed IS NOT NULL AS seeded
FROM (SELECT kmeans_fit('fit_pts', 'v', 2) AS m) q;
SELECT * FROM show(kmeans_fit('fit_pts', 'v', 2, seed => 7));

-- kmeans_fit and the aggregate agree for the same seed.
SELECT kmeans_fit('fit_pts', 'v', 3, seed => 11) =
       (SELECT kmeans(v, 3, '{"seed": 11}') FROM fit_pts) AS same;

-- float8[] columns, and columns with a cast to real[].
SELECT * FROM show(kmeans_fit('fit_pts', 'v8', 2, seed => 7));
SELECT * FROM show(kmeans_fit('fit_pts', 'vi', 2, seed => 7));

-- Named arguments, in any order.
SELECT (m).iterations, (m).converged, (m).init, round((m).inertia::numeric, 3) AS inertia
FROM (SELECT kmeans_fit(k => 2, column_name => 'v', source => 'fit_pts',
                        init_centroids => '{{0,0},{1,1}}', max_iter => 1) AS m) q;
SELECT (m).init, (m).n_init
FROM (SELECT kmeans_fit('fit_pts', 'v', 2, init => 'random', n_init => 4, seed => 3) AS m) q;
SELECT (m).metric FROM (SELECT kmeans_fit('fit_pts', 'v', 2, metric => 'cosine', seed => 3) AS m) q;
SELECT (m).converged FROM (SELECT kmeans_fit('fit_pts', 'v', 4, tol => 0, seed => 3) AS m) q;

-- Weights: a row of weight 3 counts like three rows.
CREATE TABLE fit_w (v real[], w float8);
INSERT INTO fit_w VALUES ('{0,0}', 3), ('{1,0}', 1), ('{10,0}', 1), ('{12,0}', 1);
SELECT * FROM show(kmeans_fit('fit_w', 'v', 2, weight_column => 'w',
                              init_centroids => '{{0,0},{10,0}}'));
CREATE TABLE fit_dup (v real[]);
INSERT INTO fit_dup VALUES ('{0,0}'), ('{0,0}'), ('{0,0}'), ('{1,0}'), ('{10,0}'), ('{12,0}');
SELECT c.centroid FROM kmeans_centroids(kmeans_fit('fit_dup', 'v', 2,
                                        init_centroids => '{{0,0},{10,0}}')) c;
-- rows whose weight is NULL are skipped like rows whose vector is NULL
INSERT INTO fit_w VALUES ('{5,5}', NULL), (NULL, 1);
SELECT (m).n_rows, (m).n_skipped
FROM (SELECT kmeans_fit('fit_w', 'v', 2, weight_column => 'w', seed => 1) AS m) q;

-- Names are names: quotes, spaces and semicolons are no problem.
CREATE TABLE "fit ""odd"" table;" ("my col; DROP TABLE fit_pts" real[], "id""x" int);
INSERT INTO "fit ""odd"" table;" VALUES ('{1,1}', 1), ('{2,2}', 2), ('{9,9}', 3);
SELECT (m).n_rows
FROM (SELECT kmeans_fit('"fit ""odd"" table;"', 'my col; DROP TABLE fit_pts', 2, seed => 1) AS m) q;
SELECT count(*) FROM fit_pts;

-- Views and schemas.
CREATE SCHEMA fit_schema;
CREATE VIEW fit_schema.side1 AS SELECT v FROM fit_pts WHERE id % 2 = 1;
SELECT (m).n_rows, s.centroid
FROM (SELECT kmeans_fit('fit_schema.side1', 'v', 1) AS m) q, show(m) s;

-- Errors: the table and the columns.
SELECT kmeans_fit('no_such_table', 'v', 2);
SELECT kmeans_fit('fit_pts', 'no_such_column', 2);
SELECT kmeans_fit('fit_pts', 'label', 2);
SELECT kmeans_fit('fit_pts', 'id', 2);
SELECT kmeans_fit('fit_pts', 'ctid', 2);
SELECT kmeans_fit('fit_pts', 'v', 2, weight_column => 'label');
SELECT kmeans_fit('fit_pts', 'v', 2, weight_column => 'nope');
SELECT kmeans_fit('fit_pts', 'V', 2);

-- Errors: arguments.
SELECT kmeans_fit(NULL, 'v', 2);
SELECT kmeans_fit('fit_pts', NULL, 2);
SELECT kmeans_fit('fit_pts', 'v', NULL);
SELECT kmeans_fit('fit_pts', 'v', 0);
SELECT kmeans_fit('fit_pts', 'v', 61);
SELECT kmeans_fit('fit_pts', 'v', 2, max_iter => 0);
SELECT kmeans_fit('fit_pts', 'v', 2, max_iter => NULL);
SELECT kmeans_fit('fit_pts', 'v', 2, tol => -1);
SELECT kmeans_fit('fit_pts', 'v', 2, tol => 'NaN');
SELECT kmeans_fit('fit_pts', 'v', 2, tol => 'Infinity');
SELECT kmeans_fit('fit_pts', 'v', 2, init => 'farthest');
SELECT kmeans_fit('fit_pts', 'v', 2, metric => 'dot');
SELECT kmeans_fit('fit_pts', 'v', 2, n_init => 0);
SELECT kmeans_fit('fit_pts', 'v', 2, init => 'explicit');
SELECT kmeans_fit('fit_pts', 'v', 2, init_centroids => '{1,2}');
SELECT kmeans_fit('fit_pts', 'v', 2, init_centroids => '{{1,2}}');
SELECT kmeans_fit('fit_pts', 'v', 2, init_centroids => '{{1,2,3},{4,5,6}}');
SELECT kmeans_fit('fit_pts', 'v', 2, init_centroids => '{{1,NULL},{4,5}}');
SELECT kmeans_fit('fit_pts', 'v', 2, init_centroids => '{{1,NaN},{4,5}}');
SELECT kmeans_fit('fit_pts', 'v', 2, init_centroids => '{{1,2},{4,5}}', init => 'random');
SELECT kmeans_fit('fit_pts', 'v', 2, init_centroids => '{{1,2},{4,5}}', n_init => 3);

-- Errors: weights.
INSERT INTO fit_w VALUES ('{1,1}', -1);
SELECT kmeans_fit('fit_w', 'v', 2, weight_column => 'w');
CREATE TABLE fit_w0 (v real[], w float8);
INSERT INTO fit_w0 VALUES ('{0,0}', 0), ('{1,1}', 0);
SELECT kmeans_fit('fit_w0', 'v', 1, weight_column => 'w');

-- The session is still usable.
SELECT count(*) FROM fit_pts;

DROP FUNCTION show(kmeans_model);
DROP VIEW fit_schema.side1;
DROP SCHEMA fit_schema;
DROP TABLE fit_pts, fit_w, fit_w0, fit_dup, "fit ""odd"" table;";
