-- kmeans_labels and kmeans_assign on conc_live while writers change it, in
-- one snapshot: every row once, NULL vectors unlabelled, the same labels.
BEGIN ISOLATION LEVEL REPEATABLE READ;
INSERT INTO conc_results (kind, ok, detail)
SELECT 'labels_live',
       count(*) = (SELECT count(*) FROM conc_live)
       AND count(*) FILTER (WHERE l.id IS NULL OR p.id IS NULL) = 0
       AND count(*) FILTER (WHERE l.cluster_id IS DISTINCT FROM kmeans_assign(m.m, p.v)) = 0
       AND count(*) FILTER (WHERE (l.cluster_id IS NULL) <> (p.v IS NULL)) = 0,
       count(*) || ' rows'
FROM kmeans_labels((SELECT m FROM conc_serial WHERE name = 'fit'), 'conc_live', 'v', 'id') l
FULL JOIN conc_live p USING (id), conc_serial m
WHERE m.name = 'fit';
COMMIT;
