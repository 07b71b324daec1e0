-- kmeans_labels with the serial model on conc_static: the serial labels.
INSERT INTO conc_results (kind, ok, detail)
SELECT 'labels_static',
       count(*) = 4000 AND count(*) FILTER (WHERE l.cluster_id IS DISTINCT FROM s.cluster_id
                                            OR l.distance IS DISTINCT FROM s.distance) = 0,
       count(*) || ' rows, ' || count(*) FILTER (WHERE l.cluster_id IS DISTINCT FROM s.cluster_id) || ' differ'
FROM kmeans_labels((SELECT m FROM conc_serial WHERE name = 'fit'), 'conc_static', 'v', 'id') l
FULL JOIN conc_serial_labels s USING (id);
