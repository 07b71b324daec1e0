-- Rows in: every value of every row reaches the engine unchanged, and a NaN
-- or an infinity is caught wherever it sits, whatever the length of the
-- vectors and the alignment of the row in memory (rows are copied with wide
-- non-temporal stores, with narrow ones before and after).
BEGIN;
SELECT plan(8);
SET LOCAL client_min_messages = warning;
SELECT setseed(0.15);

-- For vectors of 1 to 20 values, a bad value at every place of one row
-- (a row at another offset each time) must stop kmeans_fit and kmeans().
CREATE FUNCTION pg_temp.bad_values_caught(agg boolean) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	caught bigint := 0;
	bad text;
BEGIN
	FOR d IN 1..20 LOOP
		DROP TABLE IF EXISTS pg_temp.bad_rows;
		CREATE TEMP TABLE bad_rows AS
		SELECT i, array_fill((i % 5)::real, ARRAY[d]) AS v FROM generate_series(1, 60) i;
		FOR p IN 1..d LOOP
			FOREACH bad IN ARRAY ARRAY['NaN', 'Infinity', '-Infinity'] LOOP
				UPDATE bad_rows SET v[p] = bad::real WHERE i = 17 + p;
				BEGIN
					IF agg THEN
						PERFORM kmeans(v, 1) FROM bad_rows;
					ELSE
						PERFORM kmeans_fit('bad_rows', 'v', 1);
					END IF;
				EXCEPTION WHEN data_exception THEN
					IF SQLERRM = 'vector must not contain NaN or infinite values' THEN
						caught := caught + 1;
					END IF;
				END;
				UPDATE bad_rows SET v[p] = (i % 5)::real WHERE i = 17 + p;
			END LOOP;
		END LOOP;
	END LOOP;
	RETURN caught;
END
$$;
SELECT is(pg_temp.bad_values_caught(false), 630::bigint,
          'kmeans_fit: NaN and infinities caught at every place, vectors of 1 to 20 values');
SELECT is(pg_temp.bad_values_caught(true), 630::bigint,
          'kmeans(): NaN and infinities caught at every place, vectors of 1 to 20 values');

-- k = n on distinct rows: every centroid is a row, every row a centroid,
-- so any value copied wrong shows.  300 rows span several chunks.
CREATE FUNCTION pg_temp.rows_kept() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	wrong bigint := 0;
	n bigint;
BEGIN
	FOR d IN 1..20 LOOP
		DROP TABLE IF EXISTS pg_temp.exact_rows;
		CREATE TEMP TABLE exact_rows AS
		SELECT i, (SELECT array_agg((i * 31 + j * 7) % 1001 - 500 + 0.25 ORDER BY j)::real[]
		           FROM generate_series(1, d) j WHERE i > 0) AS v
		FROM generate_series(1, 300) i;
		SELECT count(*) INTO n
		FROM kmeans_centroids(kmeans_fit('exact_rows', 'v', 300, init => 'random', seed => 1)) c
		FULL JOIN exact_rows r ON r.v = c.centroid
		WHERE r.v IS NULL OR c.centroid IS NULL OR c.size <> 1;
		wrong := wrong + n;
	END LOOP;
	RETURN wrong;
END
$$;
SELECT is(pg_temp.rows_kept(), 0::bigint,
          'k = n: the centroids are the rows, bit for bit, vectors of 1 to 20 values');

-- 20,000 rows of 128 values: chunks large enough for huge pages
CREATE TEMP TABLE wide AS
SELECT i, (SELECT array_agg(random() ORDER BY j)::real[] FROM generate_series(1, 128) j
           WHERE i > 0) AS v
FROM generate_series(1, 20000) i;
CREATE TEMP TABLE wide_mean AS
SELECT array_agg(m ORDER BY j) AS m
FROM (SELECT j, avg(v[j]) AS m FROM wide, generate_series(1, 128) j GROUP BY j) s;
SELECT cmp_ok((SELECT max(abs(c.centroid[j] - w.m[j]))
               FROM kmeans_centroids(kmeans_fit('wide', 'v', 1)) c, wide_mean w,
                    generate_series(1, 128) j), '<', 1e-5::float8,
              'kmeans_fit, k = 1 on 20,000 rows of 128 values: the mean of the rows');
SELECT ok(kmeans_fit('wide', 'v', 6, seed => 3) =
          (SELECT kmeans(v, 6, '{"seed": 3}') FROM wide),
          'kmeans_fit equals the aggregate on 20,000 rows of 128 values');

-- metric cosine: a zero vector is caught among many rows, a vector with one
-- value not zero is not
UPDATE wide SET v = array_fill(0::real, ARRAY[128]) WHERE i = 15000;
SELECT throws_ok($$SELECT kmeans_fit('wide', 'v', 2, metric => 'cosine')$$, '22000',
                 'zero vector cannot be clustered with metric cosine',
                 'kmeans_fit, metric cosine: a zero vector among 20,000 rows');
UPDATE wide SET v[128] = -0.5 WHERE i = 15000;
SELECT lives_ok($$SELECT kmeans_fit('wide', 'v', 2, metric => 'cosine')$$,
                'one value not zero is enough');
UPDATE wide SET v[128] = '-0'::real WHERE i = 15000;
SELECT throws_ok($$SELECT kmeans(v, 2, '{"metric": "cosine"}') FROM wide$$, '22000',
                 'zero vector cannot be clustered with metric cosine',
                 'kmeans(), metric cosine: minus zero is zero');

SELECT * FROM finish();
ROLLBACK;
