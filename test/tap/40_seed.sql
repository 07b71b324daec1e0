-- The same seed gives the same model, whatever the row order, the path
-- (aggregate or kmeans_fit) or the number of threads.
BEGIN;
SELECT plan(7);
SELECT setseed(0.1);

CREATE TEMP TABLE pts AS
SELECT i AS id, ARRAY[random() * 10, random() * 10, random() * 10]::real[] AS v
FROM generate_series(1, 3000) i;

SELECT ok((SELECT kmeans(v, 12, '{"seed": 99}') FROM pts) =
          (SELECT kmeans(v, 12, '{"seed": 99}') FROM pts), 'same seed, same model');
SELECT ok((SELECT kmeans(v, 12, '{"seed": 99}') FROM (SELECT v FROM pts ORDER BY random()) s) =
          (SELECT kmeans(v, 12, '{"seed": 99}') FROM pts), 'row order does not matter');
SELECT ok(kmeans_fit('pts', 'v', 12, seed => 99) =
          (SELECT kmeans(v, 12, '{"seed": 99}') FROM pts), 'kmeans_fit equals the aggregate');
SELECT ok((SELECT kmeans(v, 12, '{"seed": 99, "init": "random", "n_init": 3}') FROM pts) =
          (SELECT kmeans(v, 12, '{"seed": 99, "init": "random", "n_init": 3}')
           FROM (SELECT v FROM pts ORDER BY random()) s), 'also for random init and n_init');
SELECT isnt((SELECT (kmeans(v, 12, '{"seed": 1}')).centroids FROM pts),
            (SELECT (kmeans(v, 12, '{"seed": 2}')).centroids FROM pts),
            'another seed gives other centroids');

-- Threads: the CPU engine works alone below KM_CPU_MIN_PARALLEL_WORK
-- (4e6 = n * d * (k + 2) flops a pass, src/engine/cpu_internal.h), so this
-- needs more work than pts: 20000 * 16 * 34 = 10.9e6, 79 tiles of 192 rows,
-- four threads really run (test/compare/sklearn_compare.py checks the
-- verbose line that says so for this shape).
CREATE TEMP TABLE wide AS
SELECT i AS id, (SELECT array_agg((random() * 10 + (i % 9) * 4 + j * 0)::real) FROM generate_series(1, 16) j) AS v
FROM generate_series(1, 20000) i;
SET LOCAL kmeans_gpu.engine = cpu;
SET LOCAL kmeans_gpu.cpu_threads = 1;
CREATE TEMP TABLE one_thread AS
SELECT kmeans(v, 32, '{"seed": 99}') AS m, kmeans(v, 32, '{"seed": 99, "init": "random", "max_iter": 5}') AS r
FROM wide;
SET LOCAL kmeans_gpu.cpu_threads = 4;
SELECT ok((SELECT m FROM one_thread) = (SELECT kmeans(v, 32, '{"seed": 99}') FROM wide)
          AND (SELECT r FROM one_thread) =
              (SELECT kmeans(v, 32, '{"seed": 99, "init": "random", "max_iter": 5}') FROM wide),
          'one thread or four: the same model (k-means++ and random, 20000 x 16, k = 32)');
RESET kmeans_gpu.engine;

-- n_init keeps the best run
SELECT cmp_ok((SELECT (kmeans(v, 12, '{"seed": 5, "n_init": 4}')).inertia FROM pts), '<=',
              (SELECT (kmeans(v, 12, '{"seed": 5}')).inertia FROM pts),
              'n_init 4 is at least as good as its first run');

SELECT * FROM finish();
ROLLBACK;
