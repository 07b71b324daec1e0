-- The aggregate on conc_static in a parallel plan: the serial model.
BEGIN;
SET LOCAL parallel_setup_cost = 0;
SET LOCAL parallel_tuple_cost = 0;
SET LOCAL min_parallel_table_scan_size = 0;
INSERT INTO conc_results (kind, ok, detail)
SELECT 'agg_static', a.m = s.m, CASE WHEN a.m IS DISTINCT FROM s.m THEN a.m::text END
FROM (SELECT kmeans(v, 6, '{"seed": 5}') AS m FROM conc_static) a, conc_serial s
WHERE s.name = 'fit';
COMMIT;
