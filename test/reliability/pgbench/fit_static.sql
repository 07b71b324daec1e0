-- kmeans_fit on conc_static, which nobody modifies: the serial model, bit for bit.
INSERT INTO conc_results (kind, ok, detail)
SELECT 'fit_static', f.m = s.m, CASE WHEN f.m IS DISTINCT FROM s.m THEN f.m::text END
FROM (SELECT kmeans_fit('conc_static', 'v', 6, seed => 5) AS m) f, conc_serial s
WHERE s.name = 'fit';
