-- kmeans_fit_sharded (the extension kmeans_gpu_sharded, over PL/Proxy): its
-- signature and the errors it raises before reaching a shard.  The fits
-- themselves, across live servers, are test/sharded's.
SET extra_float_digits = 0;
CREATE EXTENSION plproxy;
CREATE EXTENSION kmeans_gpu_sharded;

-- kmeans_fit's options and defaults, but k-means|| seeding.
SELECT pg_get_function_arguments('kmeans_fit_sharded'::regproc);

-- kmeans_gpu itself does not need PL/Proxy.
SELECT extname, (SELECT array_agg(e2.extname ORDER BY e2.extname) FROM pg_depend d
                 JOIN pg_extension e2 ON d.refobjid = e2.oid
                 WHERE d.classid = 'pg_extension'::regclass AND d.objid = e.oid
                   AND d.refclassid = 'pg_extension'::regclass) AS requires
FROM pg_extension e WHERE extname LIKE 'kmeans%' ORDER BY 1;

CREATE TABLE sh_pts AS SELECT ARRAY[i, i]::real[] AS v FROM generate_series(1, 10) i;

-- A cluster whose shards cannot be reached: the shard is named, with the
-- last message of its connection.
CREATE SERVER sh_gone FOREIGN DATA WRAPPER plproxy
	OPTIONS (p0 'host=/nonexistent/kmeans_gpu port=1 dbname=postgres password=hunter2');
CREATE USER MAPPING FOR CURRENT_USER SERVER sh_gone;
SET kmeans_gpu.shard_retries = 0;
SELECT kmeans_fit_sharded('sh_gone', 'sh_pts', 'v', 2);
SET kmeans_gpu.shard_retries = 1;
SET kmeans_gpu."verbose" = on;
SELECT kmeans_fit_sharded('sh_gone', 'sh_pts', 'v', 2);
RESET kmeans_gpu."verbose";
RESET kmeans_gpu.shard_retries;

-- Errors.
SELECT kmeans_fit_sharded('sh_nosuch', 'sh_pts', 'v', 2);
CREATE EXTENSION postgres_fdw;
CREATE SERVER sh_fdw FOREIGN DATA WRAPPER postgres_fdw;
SELECT kmeans_fit_sharded('sh_fdw', 'sh_pts', 'v', 2);
SELECT kmeans_fit_sharded('sh_gone', 'sh_pts', 'v', 2, init => 'k-means++');
SELECT kmeans_fit_sharded('sh_gone', 'sh_pts', 'v', 2, init => 'afk-mc2');
SELECT kmeans_fit_sharded('sh_gone', 'sh_pts', 'v', 2, init => 'random', chain_length => 0);
SELECT kmeans_fit_sharded('sh_gone', 'sh_pts', 'v', 2, engine => 'gpu');
SELECT kmeans_fit_sharded('sh_gone', 'sh_pts', 'v', 2, init => 'farthest');
SELECT kmeans_fit_sharded('sh_gone', 'sh_pts', 'v', 2, storage => 'float64');
SELECT kmeans_fit_sharded('sh_gone', 'sh_pts', 'v', 2, storage => NULL);
SELECT kmeans_fit_sharded('sh_gone', 'sh_pts', 'v', 0);
SELECT kmeans_fit_sharded('sh_gone', 'sh_pts', 'v', 2, n_init => 2, init_centroids => '{{0,0},{1,1}}');
SELECT kmeans_fit_sharded('sh_gone', 'sh_pts', 'v', 3, init_centroids => '{{0,0},{1,1}}');
SELECT kmeans_fit_sharded(NULL, 'sh_pts', 'v', 2);
SELECT kmeans_fit_sharded('sh_gone', NULL, 'v', 2);
SELECT kmeans_fit_sharded('sh_gone', 'sh_pts', NULL, 2);
SELECT kmeans_fit_sharded('sh_gone', 'sh_pts', 'v', NULL);

-- An ordinary role needs USAGE on the cluster.
CREATE ROLE sh_role;
SET ROLE sh_role;
SELECT kmeans_fit_sharded('sh_gone', 'sh_pts', 'v', 2);
RESET ROLE;

-- The shard side refuses calls that did not come through kmeans_fit_sharded.
SELECT * FROM kmeans_shard_load('{0,1}', 1, 'sh_pts', 'v', NULL, 'l2', 'float32', NULL);
SELECT * FROM kmeans_shard_step('{0}', 1, 'sh_pts', 'v', NULL, 'l2', 'float32', NULL, NULL, NULL);
SELECT part, n_rows, n_skipped, dim, reloaded FROM kmeans_shard_load('{0}', 1, 'sh_pts', 'v', NULL, 'l2', 'float32', NULL);
SELECT part, fit_id, n_rows FROM kmeans_shard_status('{0}');
-- rows already loaded for the fit are not checked again
SELECT part, n_rows, reloaded FROM kmeans_shard_load('{0}', 1, 'sh_pts', 'v', NULL, 'l2', 'float32', '{42}');
SELECT part, freed > 0 AS freed FROM kmeans_shard_end('{0}', 1);
SELECT part, fit_id, n_rows FROM kmeans_shard_status('{0}');
-- loaded afresh, they must have the fingerprint the fit started with
SELECT part, n_rows FROM kmeans_shard_load('{0}', 2, 'sh_pts', 'v', NULL, 'l2', 'float32', '{42}');
SELECT part, fit_id, n_rows FROM kmeans_shard_status('{0}');
-- another role may not use rows this backend loaded for a fit
SELECT part, n_rows FROM kmeans_shard_load('{0}', 3, 'sh_pts', 'v', NULL, 'l2', 'float32', NULL);
GRANT SELECT ON sh_pts TO sh_role;
SET ROLE sh_role;
SELECT part, n_rows FROM kmeans_shard_load('{0}', 3, 'sh_pts', 'v', NULL, 'l2', 'float32', NULL);
RESET ROLE;
-- (a failed call frees the rows: the coordinator retries or gives up)
SELECT part, fit_id, n_rows FROM kmeans_shard_status('{0}');
-- the same rows for another storage are other rows; a shard rounds them as
-- it loads them, and names a row its storage cannot hold
SELECT part, n_rows, reloaded FROM kmeans_shard_load('{0}', 4, 'sh_pts', 'v', NULL, 'l2', 'float32', NULL);
SELECT part, n_rows FROM kmeans_shard_load('{0}', 4, 'sh_pts', 'v', NULL, 'l2', 'float16', NULL);
SELECT * FROM kmeans_shard_load('{0}', 5, 'sh_pts', 'v', NULL, 'l2', 'fp8', NULL);
SELECT * FROM kmeans_shard_load('{0}', 5, 'sh_pts', 'v', NULL, 'l2', NULL, NULL);
INSERT INTO sh_pts VALUES ('{1,1e6}');
SELECT * FROM kmeans_shard_load('{0}', 6, 'sh_pts', 'v', NULL, 'l2', 'float16', NULL);
SELECT part, n_rows, reloaded FROM kmeans_shard_load('{0}', 6, 'sh_pts', 'v', NULL, 'l2', 'bfloat16', NULL);
SELECT part, freed > 0 AS freed FROM kmeans_shard_end('{0}', 6);

DROP TABLE sh_pts;
DROP ROLE sh_role;
DROP SERVER sh_fdw;
DROP USER MAPPING FOR CURRENT_USER SERVER sh_gone;
DROP SERVER sh_gone;
DROP EXTENSION postgres_fdw;
DROP EXTENSION kmeans_gpu_sharded;
DROP EXTENSION plproxy;
