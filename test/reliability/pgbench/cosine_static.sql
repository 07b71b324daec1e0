-- kmeans_fit with metric cosine, n_init 2 and weights on conc_static: the serial model.
INSERT INTO conc_results (kind, ok, detail)
SELECT 'cosine_static', f.m = s.m, CASE WHEN f.m IS DISTINCT FROM s.m THEN f.m::text END
FROM (SELECT kmeans_fit('conc_static', 'v', 4, metric => 'cosine', seed => 9, n_init => 2,
                        weight_column => 'w') AS m) f, conc_serial s
WHERE s.name = 'cosine';
