-- The window function on conc_static, one partition per group: the serial labels.
INSERT INTO conc_results (kind, ok, detail)
SELECT 'window_static', count(*) = 4000 AND count(*) FILTER (WHERE w.c IS DISTINCT FROM s.c) = 0,
       count(*) FILTER (WHERE w.c IS DISTINCT FROM s.c) || ' differ'
FROM (SELECT id, kmeans_cluster(v, 3, '{"seed": 2}') OVER (PARTITION BY id % 4) AS c
      FROM conc_static) w
JOIN conc_serial_window s USING (id);
