-- A writer on conc_live: update a row's vector (sometimes to NULL), insert a
-- row, or delete one; one row per statement, so writers never deadlock.
\set id random(1, 6000)
\set op random(1, 4)
\if :op <= 2
UPDATE conc_live
SET v = CASE WHEN random() < 0.1 THEN NULL
             ELSE (SELECT array_agg((random() * 10 + (:id % 3) * 20)::real) FROM generate_series(1, 8)) END
WHERE id = :id;
\elif :op = 3
INSERT INTO conc_live (v)
SELECT array_agg((random() * 10 + (:id % 3) * 20)::real) FROM generate_series(1, 8);
\else
DELETE FROM conc_live WHERE id = (SELECT min(id) FROM conc_live WHERE id >= :id);
\endif
