-- The aggregate and kmeans_fit on conc_live while writers change it, in one
-- snapshot: the same model.
\set seed random(1, 1000000)
BEGIN ISOLATION LEVEL REPEATABLE READ;
INSERT INTO conc_results (kind, ok, detail)
SELECT 'agg_live', a.m = f.m, CASE WHEN a.m IS DISTINCT FROM f.m THEN a.m::text || ' / ' || f.m::text END
FROM (SELECT kmeans(v, 4, jsonb_build_object('seed', :seed)) AS m FROM conc_live) a,
     (SELECT kmeans_fit('conc_live', 'v', 4, seed => :seed) AS m) f;
COMMIT;
