-- Rows in half precision (the storage option), and the settings of fits
-- that do not fit one GPU (kmeans_gpu.devices, kmeans_gpu.device,
-- kmeans_gpu.gpu_memory_limit).  The memory plans of those fits are
-- gpu_plan.sql's: their output depends on the GPU engine being built.
--
-- Storage 'float16' or 'bfloat16' rounds every value to the format, to
-- nearest, ties to even, as it is read; the fit then clusters the rounded
-- values, on every engine.  So a float16 fit must equal, bit for bit, the
-- float32 fit of the same rows rounded beforehand, here in plain SQL.
SET extra_float_digits = 1;		-- every real shown exactly
LOAD 'kmeans_gpu';

----------------------------------------------------------------------------
-- The settings.

-- kmeans_gpu.devices: 'all', or GPU numbers separated by commas (spaces
-- allowed, repeats allowed: two logical devices on one GPU).  A machine
-- without a GPU accepts any well-formed list: numbers are checked against
-- the devices only when a GPU is used.
SHOW kmeans_gpu.devices;
SET kmeans_gpu.devices = 'all';
SET kmeans_gpu.devices = 'ALL ';
SET kmeans_gpu.devices = '0,0';
SET kmeans_gpu.devices = ' 3 , 1,3 ';
SHOW kmeans_gpu.devices;
SET kmeans_gpu.devices = '0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15';
-- bad lists
SET kmeans_gpu.devices = '';
SET kmeans_gpu.devices = '0,,1';
SET kmeans_gpu.devices = '1 2';
SET kmeans_gpu.devices = 'gpu0';
SET kmeans_gpu.devices = '-1';
SET kmeans_gpu.devices = '0,all';
SET kmeans_gpu.devices = '256';
SET kmeans_gpu.devices = '0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16';
SHOW kmeans_gpu.devices;
RESET kmeans_gpu.devices;

-- kmeans_gpu.device, 0.1's one-GPU setting, stays as a deprecated alias:
-- -1 (its default) leaves kmeans_gpu.devices in charge; any other value
-- is the one GPU to use (gpu_plan.sql shows it win over kmeans_gpu.devices).
SHOW kmeans_gpu.device;
SET kmeans_gpu.device = 2;
SHOW kmeans_gpu.device;
SET kmeans_gpu.device = -2;
SET kmeans_gpu.device = 256;
RESET kmeans_gpu.device;

-- kmeans_gpu.gpu_memory_limit: per device, in MB; 0, the default, is the
-- device's free memory.
SHOW kmeans_gpu.gpu_memory_limit;
SET kmeans_gpu.gpu_memory_limit = '1.5GB';
SHOW kmeans_gpu.gpu_memory_limit;
SET kmeans_gpu.gpu_memory_limit = 300;
SHOW kmeans_gpu.gpu_memory_limit;
SET kmeans_gpu.gpu_memory_limit = -1;
SET kmeans_gpu.gpu_memory_limit = '1 parsec';
SET kmeans_gpu.gpu_memory_limit = '4PB';
RESET kmeans_gpu.gpu_memory_limit;
SELECT name, setting, unit, boot_val FROM pg_settings
WHERE name IN ('kmeans_gpu.devices', 'kmeans_gpu.device', 'kmeans_gpu.gpu_memory_limit') ORDER BY 1;

----------------------------------------------------------------------------
-- Storage names: any case, and the usual spellings; the model says the
-- canonical name.
CREATE TABLE st_one AS SELECT '{1.00048828125, 0.1}'::real[] AS v;
SELECT s AS given, (kmeans(v, 1, jsonb_build_object('storage', s))).storage,
       (kmeans(v, 1, jsonb_build_object('storage', s))).centroids
FROM st_one, (VALUES ('float32'), ('FLOAT4'), ('Real'), ('fp32'), ('float16'), ('Half'),
                     ('FP16'), ('binary16'), ('bfloat16'), ('BF16'), (NULL)) n(s)
GROUP BY s ORDER BY 2, s COLLATE "C";
SELECT (kmeans_fit('st_one', 'v', 1, storage => 'HALF')).storage;
SELECT (kmeans(v, 1)).storage FROM st_one;
-- bad names and types
SELECT kmeans(v, 1, '{"storage": "float64"}') FROM st_one;
SELECT kmeans(v, 1, '{"storage": 16}') FROM st_one;
SELECT kmeans_fit('st_one', 'v', 1, storage => 'int8');
SELECT kmeans_fit('st_one', 'v', 1, storage => NULL);
SELECT kmeans_cluster(v, 1, '{"storage": "quarter"}') OVER () FROM st_one;

----------------------------------------------------------------------------
-- What rounding does to single values: a one-row fit's centroid is its
-- row, as stored.
CREATE FUNCTION pg_temp.stored(v real[], storage text) RETURNS real[]
LANGUAGE sql AS $$ SELECT (kmeans(v, 1, jsonb_build_object('storage', storage))).centroids[1:1][:]
                   FROM (SELECT v) s $$;
-- float16: 10 fraction bits; halfway cases go to the even neighbour
SELECT pg_temp.stored('{1.00048828125, 1.00146484375, -1.00146484375, 2049, 2051}', 'float16');
-- 0.1 to nearest; the largest float16, and what still rounds to it
SELECT pg_temp.stored('{0.1, 65504, 65519.996, -65519.996, 1e-3}', 'float16');
-- subnormals (multiples of 2^-24 = 5.96e-8) are kept; below half of one, zero
SELECT pg_temp.stored('{5.9604645e-08, 1e-7, 4.4703484e-08, 2.9802322e-08, 2.9802326e-08, -1e-9}', 'float16');
-- bfloat16: 7 fraction bits, float32's range
SELECT pg_temp.stored('{1.00390625, 1.01171875, 3.14159265, 1e38, -3.3961e38, 1e-40}', 'bfloat16');
-- float32 keeps the values as they are
SELECT pg_temp.stored('{1.00048828125, 0.1, 70000, 3e5}', 'float32');

-- Overflow is an ERROR naming the value, its position and the row.
SELECT pg_temp.stored('{1, 65520}', 'float16');
SELECT kmeans(ARRAY[i, CASE WHEN i = 4 THEN -1e5 ELSE 1 END]::real[], 1, '{"storage": "float16"}')
FROM generate_series(1, 6) i;
SELECT kmeans(CASE WHEN i = 2 THEN NULL ELSE ARRAY[i, i * 3e4]::float8[] END, 1, '{"storage": "float16"}')
FROM generate_series(1, 6) i;
SELECT pg_temp.stored('{1, 3.3962e38}', 'bfloat16');
-- A row that rounds to zeros has no direction for cosine.
SELECT kmeans(v, 1, '{"storage": "float16", "metric": "cosine"}')
FROM (VALUES ('{1, 1}'::real[]), ('{1e-8, 2e-8}')) t(v);

----------------------------------------------------------------------------
-- The same rounding in plain SQL: x to the nearest multiple of its quantum,
-- 2^(e - bits) for x in [2^e, 2^(e+1)) (e no lower than emin, where the
-- subnormals' fixed quantum starts), ties to even (round() on float8 is
-- rint()).  float16: bits 10, emin -14; bfloat16: bits 7, emin -126.
CREATE FUNCTION pg_temp.round_to(x real, bits int, emin int) RETURNS real
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
  a float8 := abs(x::float8);
  e int;
  q float8;
BEGIN
  IF a = 0 THEN
    RETURN x;
  END IF;
  e := floor(ln(a) / ln(2));
  WHILE power(2::float8, e) > a LOOP e := e - 1; END LOOP;
  WHILE power(2::float8, e + 1) <= a LOOP e := e + 1; END LOOP;
  q := power(2::float8, greatest(e, emin) - bits);
  RETURN (round(x::float8 / q) * q)::real;
END $$;
CREATE FUNCTION pg_temp.round_row(v real[], storage text) RETURNS real[]
LANGUAGE sql IMMUTABLE STRICT AS $$
  SELECT array_agg(CASE storage WHEN 'float16' THEN pg_temp.round_to(x, 10, -14)
                                ELSE pg_temp.round_to(x, 7, -126) END ORDER BY i)
  FROM unnest(v) WITH ORDINALITY u(x, i) $$;

-- Values of every magnitude, and every kind of halfway case, one a row.
CREATE TABLE st_values (id bigint, x real);
INSERT INTO st_values
SELECT i, ((abs(hashint4(i)) % 100000) / 100000.0 + 1) * power(2::float8, (i % 44) - 28)
          * CASE WHEN i % 3 = 0 THEN -1 ELSE 1 END
FROM generate_series(1, 4000) i;
-- float16 and bfloat16 halfway cases, normal and subnormal
INSERT INTO st_values
SELECT 10000 + j * 40 + s, (1024 + j + 0.5) * power(2::float8, s - 24) FROM generate_series(0, 99) j, generate_series(0, 29) s;
INSERT INTO st_values
SELECT 20000 + j, (j + 0.5) * power(2::float8, -24) FROM generate_series(0, 1023) j;
INSERT INTO st_values
SELECT 30000 + j * 40 + s, (128 + j + 0.5) * power(2::float8, s - 20) FROM generate_series(0, 99) j, generate_series(0, 39) s;
-- kmeans_labels with a one-centroid model at 0 gives each row's distance to
-- 0: the magnitude of the row as the model's storage rounds it.
CREATE FUNCTION pg_temp.at_zero(storage text) RETURNS kmeans_model
LANGUAGE sql AS $$ SELECT json_populate_record(NULL::kmeans_model,
  json_build_object('k', 1, 'dim', 1, 'metric', 'l2', 'centroids', '{{0}}'::real[], 'storage', storage)) $$;
CREATE TABLE st_vec AS SELECT id, ARRAY[x] AS v, x FROM st_values;
CREATE TABLE st_vec16 AS SELECT * FROM st_vec WHERE abs(x) < 65520;
SELECT count(*) AS values_compared,
       count(*) FILTER (WHERE l.distance <> abs(pg_temp.round_to(x, 10, -14))) AS float16_differ,
       count(*) FILTER (WHERE pg_temp.round_to(x, 10, -14) <> x) AS float16_rounded
FROM kmeans_labels(pg_temp.at_zero('float16'), 'st_vec16', 'v', 'id') l JOIN st_vec USING (id);
SELECT count(*) AS values_compared,
       count(*) FILTER (WHERE l.distance <> abs(pg_temp.round_to(x, 7, -126))) AS bfloat16_differ,
       count(*) FILTER (WHERE pg_temp.round_to(x, 7, -126) <> x) AS bfloat16_rounded
FROM kmeans_labels(pg_temp.at_zero('bfloat16'), 'st_vec', 'v', 'id') l JOIN st_vec USING (id);
-- the rest are beyond float16, each an ERROR naming the row by its id
SELECT count(*) AS beyond_float16 FROM st_vec WHERE abs(x) >= 65520;
SELECT count(*) FROM kmeans_labels(pg_temp.at_zero('float16'), 'st_vec', 'v', 'id');

----------------------------------------------------------------------------
-- A fit with storage float16 (bfloat16) is, bit for bit, the float32 fit
-- of the rows rounded beforehand: every field but storage.
CREATE TABLE st_pts AS
SELECT i AS id,
       ARRAY[(i % 5) * 3 + sin(i) * 0.7, cos(i * 1.3) * 2 + (i % 3), (i % 7) * 0.37 + 0.001 * i,
             100 + i * 0.0123]::real[] AS v,
       1 + (i % 4) * 0.25 AS w
FROM generate_series(1, 3000) i;
INSERT INTO st_pts VALUES (3001, NULL, 1), (3002, '{1,2,3,4}', NULL);
CREATE TABLE st_pts16 AS SELECT id, pg_temp.round_row(v, 'float16') AS v, w FROM st_pts;
CREATE TABLE st_ptsbf AS SELECT id, pg_temp.round_row(v, 'bfloat16') AS v, w FROM st_pts;
-- the rounding changes most rows
SELECT count(*) FILTER (WHERE a.v <> b.v) AS float16_rows_changed,
       count(*) FILTER (WHERE a.v <> c.v) AS bfloat16_rows_changed
FROM st_pts a JOIN st_pts16 b USING (id) JOIN st_ptsbf c USING (id);

CREATE FUNCTION pg_temp.same(a kmeans_model, b kmeans_model) RETURNS boolean
LANGUAGE sql AS $$ SELECT (to_jsonb(a) - 'storage') = (to_jsonb(b) - 'storage') $$;
SELECT name, pg_temp.same(half, rounded) AS same_model, (half).storage, (rounded).storage AS rounded_storage,
       (half).centroids <> (plain).centroids AS differs_from_float32
FROM (VALUES
  ('l2, k-means++',
   kmeans_fit('st_pts', 'v', 5, seed => 3, storage => 'float16'),
   kmeans_fit('st_pts16', 'v', 5, seed => 3),
   kmeans_fit('st_pts', 'v', 5, seed => 3)),
  ('cosine, weights, random',
   kmeans_fit('st_pts', 'v', 6, seed => 4, metric => 'cosine', weight_column => 'w', init => 'random', storage => 'float16'),
   kmeans_fit('st_pts16', 'v', 6, seed => 4, metric => 'cosine', weight_column => 'w', init => 'random'),
   kmeans_fit('st_pts', 'v', 6, seed => 4, metric => 'cosine', weight_column => 'w', init => 'random')),
  ('k-means||, n_init 2',
   kmeans_fit('st_pts', 'v', 7, seed => 5, init => 'k-means||', n_init => 2, storage => 'float16'),
   kmeans_fit('st_pts16', 'v', 7, seed => 5, init => 'k-means||', n_init => 2),
   kmeans_fit('st_pts', 'v', 7, seed => 5, init => 'k-means||', n_init => 2)),
  ('explicit start, tol 0',
   kmeans_fit('st_pts', 'v', 2, init_centroids => '{{0,0,0,100},{12,4,2,130}}', tol => 0, seed => 1, storage => 'float16'),
   kmeans_fit('st_pts16', 'v', 2, init_centroids => '{{0,0,0,100},{12,4,2,130}}', tol => 0, seed => 1),
   kmeans_fit('st_pts', 'v', 2, init_centroids => '{{0,0,0,100},{12,4,2,130}}', tol => 0, seed => 1)),
  ('bfloat16, afk-mc2, weights',
   kmeans_fit('st_pts', 'v', 5, seed => 6, init => 'afk-mc2', weight_column => 'w', storage => 'bfloat16'),
   kmeans_fit('st_ptsbf', 'v', 5, seed => 6, init => 'afk-mc2', weight_column => 'w'),
   kmeans_fit('st_pts', 'v', 5, seed => 6, init => 'afk-mc2', weight_column => 'w')),
  ('the aggregate, float16',
   (SELECT kmeans(v, 5, '{"seed": 3, "storage": "float16"}') FROM st_pts),
   (SELECT kmeans(v, 5, '{"seed": 3}') FROM st_pts16),
   (SELECT kmeans(v, 5, '{"seed": 3}') FROM st_pts)),
  ('the aggregate, bfloat16, GROUP BY',
   (SELECT kmeans(v, 3, '{"seed": 8, "storage": "bf16"}') FROM st_pts WHERE id % 2 = 0 GROUP BY id % 2),
   (SELECT kmeans(v, 3, '{"seed": 8}') FROM st_ptsbf WHERE id % 2 = 0 GROUP BY id % 2),
   (SELECT kmeans(v, 3, '{"seed": 8}') FROM st_pts WHERE id % 2 = 0 GROUP BY id % 2))
) t(name, half, rounded, plain);
-- the aggregate and kmeans_fit agree with each other too
SELECT (SELECT kmeans(v, 5, '{"seed": 3, "storage": "float16"}') FROM st_pts) =
       kmeans_fit('st_pts', 'v', 5, seed => 3, storage => 'float16') AS aggregate_is_fit;
SELECT (m).n_rows, (m).n_skipped, (m).storage, (m).k
FROM (SELECT kmeans_fit('st_pts', 'v', 5, seed => 3, storage => 'float16', weight_column => 'w') AS m) q;

----------------------------------------------------------------------------
-- Labelling rounds a row as the model's storage says, so the rows of a fit
-- get the fit's labels from kmeans_assign, kmeans_labels and the window
-- function alike.
CREATE TABLE st_model AS SELECT kmeans_fit('st_pts', 'v', 5, seed => 3, storage => 'float16') AS m;
CREATE TABLE st_window AS
SELECT id, kmeans_cluster(v, 5, '{"seed": 3, "storage": "float16"}') OVER () AS c FROM st_pts;
SELECT count(*) AS rows_labelled,
       count(*) FILTER (WHERE w.c IS DISTINCT FROM l.cluster_id) AS window_vs_labels,
       count(*) FILTER (WHERE l.cluster_id IS DISTINCT FROM kmeans_assign(m, p.v)) AS labels_vs_assign,
       count(*) FILTER (WHERE l.cluster_id IS DISTINCT FROM kmeans_assign(m, r.v)) AS labels_vs_rounded_rows
FROM st_model, kmeans_labels(m, 'st_pts', 'v', 'id') l
JOIN st_window w USING (id) JOIN st_pts p USING (id) JOIN st_pts16 r USING (id);
-- the window function's clustering is the aggregate's
SELECT count(*) FILTER (WHERE c IS DISTINCT FROM kmeans_assign(m, v)) AS window_vs_model
FROM st_window JOIN st_pts USING (id), st_model;
-- kmeans_score rounds the rows as the model's storage says too: its
-- inertia is the fit's (summed in another order), not that of the rows as
-- they are
SELECT abs(s.inertia - (m).inertia) <= 1e-9 * (m).inertia AS score_inertia_is_fit,
       abs(f.inertia - (m).inertia) > 1e-6 * (m).inertia AS float32_rows_differ
FROM st_model, kmeans_score(m, 'st_pts', 'v') s,
     kmeans_score(json_populate_record(m, '{"storage": "float32"}'), 'st_pts', 'v') f;
-- one row the rounding moves: 1.0004 is nearer 2 than 0, but rounds to 1.0
-- (halfway; ties go to the lower cluster id) in float16
CREATE TABLE st_two AS
SELECT json_populate_record(NULL::kmeans_model,
         json_build_object('k', 2, 'dim', 1, 'metric', 'l2', 'centroids', '{{0},{2}}'::real[],
                           'storage', s)) AS m, s
FROM (VALUES ('float32'), ('float16'), ('bfloat16'), (NULL)) t(s);
CREATE TABLE st_row AS SELECT 1 AS id, '{1.0004}'::real[] AS v;
SELECT s AS storage, kmeans_assign(m, '{1.0004}'::real[]) AS assigned, l.cluster_id, l.distance
FROM st_two, kmeans_labels(m, 'st_row', 'v', 'id') l ORDER BY s NULLS FIRST;
-- kmeans_partial and kmeans_step round as the model's storage says: a
-- converged float16 model does not move on its own rows
SELECT (s).storage, (s).centroids = (m).centroids AS settled, (s).converged
FROM (SELECT m, kmeans_step(m, (SELECT kmeans_partial(v, m) FROM st_pts)) AS s
      FROM (SELECT kmeans_fit('st_pts', 'v', 5, seed => 3, tol => 0, storage => 'float16') AS m) f) q;

DROP TABLE st_one, st_values, st_vec, st_vec16, st_pts, st_pts16, st_ptsbf, st_model, st_window, st_two, st_row;
