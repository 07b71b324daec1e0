-- kmeans_fit on conc_live while writers change it.  In one REPEATABLE READ
-- snapshot: n_rows and n_skipped count the table's rows, the sizes count the
-- labels kmeans_labels gives, inertia is the sum of squared distances, no NaN.
\set seed random(1, 1000000)
BEGIN ISOLATION LEVEL REPEATABLE READ;
INSERT INTO conc_results (kind, ok, detail)
SELECT 'fit_live',
       (m).k = 5 AND (m).dim = 8
       AND (m).n_rows = c.nonnull AND (m).n_skipped = c.total - c.nonnull
       AND (SELECT sum(x) FROM unnest((m).sizes) x) = (m).n_rows
       AND (m).sizes = l.sizes
       AND abs((m).inertia - l.inertia) <= 1e-6 * greatest((m).inertia, 1e-30)
       AND (SELECT bool_and(x NOT IN ('NaN', 'Infinity', '-Infinity')) FROM unnest((m).centroids) x),
       format('n_rows %s/%s skipped %s/%s sizes %s/%s inertia %s/%s',
              (m).n_rows, c.nonnull, (m).n_skipped, c.total - c.nonnull, (m).sizes, l.sizes,
              (m).inertia, l.inertia)
FROM (SELECT kmeans_fit('conc_live', 'v', 5, seed => :seed, init => 'random') AS m) f,
     LATERAL (SELECT count(*) AS total, count(v) AS nonnull FROM conc_live) c,
     LATERAL (SELECT array_agg(coalesce(g.n, 0) ORDER BY cid) AS sizes,
                     coalesce(sum(g.s), 0) AS inertia
              FROM generate_series(0, 4) cid
              LEFT JOIN (SELECT cluster_id, count(*) AS n, sum(distance ^ 2) AS s
                         FROM kmeans_labels(f.m, 'conc_live', 'v', 'id') GROUP BY 1) g
                     ON g.cluster_id = cid) l;
COMMIT;
