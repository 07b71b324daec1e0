-- kmeans_assign with the serial model on every row of conc_static: the serial labels.
INSERT INTO conc_results (kind, ok, detail)
SELECT 'assign_static', count(*) = 4000 AND count(*) FILTER (WHERE c IS DISTINCT FROM s.cluster_id) = 0,
       count(*) FILTER (WHERE c IS DISTINCT FROM s.cluster_id) || ' differ'
FROM (SELECT p.id, kmeans_assign(m.m, p.v) AS c
      FROM conc_static p, conc_serial m WHERE m.name = 'fit') a
JOIN conc_serial_labels s USING (id);
