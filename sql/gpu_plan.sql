-- kmeans_gpu_plan(n, dim, k, ...): the memory a fit split over the logical
-- devices of kmeans_gpu.devices would take, in memory and out of core, from
-- the GPU engine's own plan (split_plan).  With kmeans_gpu.gpu_memory_limit
-- set it plans for that budget on each device, on any machine, also one
-- without a GPU.  Which expected file matches depends on the build:
--   gpu_plan.out    a GPU engine that splits fits (kmeans_gpu_cuda.so, ABI 3)
--   gpu_plan_1.out  a GPU engine without split fits (split_plan not there)
--   gpu_plan_2.out  no GPU engine (built without nvcc)
-- The figures themselves are the GPU engine's: shown here are the budget,
-- the split of the rows, and how the figures relate, not the byte counts.
SET extra_float_digits = 0;
LOAD 'kmeans_gpu';
-- (details name files and devices of the machine: hidden)
\set VERBOSITY terse

-- Arguments are checked before the GPU engine is asked.
SELECT * FROM kmeans_gpu_plan(0, 8, 2);
SELECT * FROM kmeans_gpu_plan(100, 0, 2);
SELECT * FROM kmeans_gpu_plan(100, 8, 0);
SELECT * FROM kmeans_gpu_plan(100, 8, 101);
SELECT * FROM kmeans_gpu_plan(100, 8, 2, metric => 'hamming');
SELECT * FROM kmeans_gpu_plan(100, 8, 2, storage => 'float8');
SELECT * FROM kmeans_gpu_plan(NULL, 8, 2);
SELECT * FROM kmeans_gpu_plan(100, 8, 2, storage => NULL);

-- Without a limit the budget is the devices' free memory: a device that is
-- not there cannot be planned for.
SET kmeans_gpu.devices = '200';
SELECT * FROM kmeans_gpu_plan(1000, 8, 2);
RESET kmeans_gpu.devices;

CREATE FUNCTION pg_temp.plan(n bigint, dim int, k int, storage text DEFAULT 'float32',
                             weighted boolean DEFAULT false)
RETURNS TABLE (mode text, device int, ordinal int, rows bigint, budget text, fits boolean,
               within_budget boolean, chunk_rows_ok boolean, whole boolean)
LANGUAGE sql AS $$
  SELECT mode, device, ordinal, rows, pg_size_pretty(budget), fits,
         device_bytes <= budget,
         chunk_rows BETWEEN least(4096, rows) AND rows,
         CASE WHEN mode = 'in memory' AND storage = 'float32'
              THEN chunk_rows = min(rows) OVER (PARTITION BY mode) END
  FROM kmeans_gpu_plan(n, dim, k, storage => storage, weighted => weighted)
$$;

-- One device with 1 GB: half a million rows of 128 values into 1024
-- clusters fit in memory, each device's float32 rows one step (whole:
-- chunk_rows, the smallest step of any device, is the fewest rows a device
-- has); out of core, in steps of at least 4096 rows (how many is the GPU
-- engine's choice).
SET kmeans_gpu.gpu_memory_limit = '1GB';
SELECT * FROM pg_temp.plan(500000, 128, 1024);
-- Ten million do not fit in memory; out of core they do.
SELECT * FROM pg_temp.plan(10000000, 128, 1024);
-- Two logical devices on one GPU ('0,0') share the rows, each with 1 GB.
SET kmeans_gpu.devices = '0,0';
SELECT * FROM pg_temp.plan(1000001, 128, 1024);
SELECT mode, sum(rows) AS rows, count(*) AS devices, bool_and(fits) AS fits
FROM kmeans_gpu_plan(10000000, 128, 1024) GROUP BY mode ORDER BY mode;
-- float16 and bfloat16 keep a value in two bytes: less device memory;
-- out of core the rows stream from a pinned copy at two bytes a value
-- (float32 rows stream from where they are); weights take more.
SELECT a.mode,
       h.device_bytes < a.device_bytes AS float16_smaller,
       b.device_bytes = h.device_bytes AS bfloat16_as_float16,
       w.device_bytes > a.device_bytes AS weighted_larger,
       h.pinned_bytes - a.pinned_bytes = CASE a.mode WHEN 'out of core' THEN 4000000 * 128 * 2 ELSE 0 END
         AS float16_pinned_copy
FROM kmeans_gpu_plan(4000000, 128, 1024) a
JOIN kmeans_gpu_plan(4000000, 128, 1024, storage => 'float16') h USING (mode, device)
JOIN kmeans_gpu_plan(4000000, 128, 1024, storage => 'bfloat16') b USING (mode, device)
JOIN kmeans_gpu_plan(4000000, 128, 1024, weighted => true) w USING (mode, device)
WHERE a.device = 0 ORDER BY 1;
SELECT * FROM pg_temp.plan(10000000, 128, 1024, 'float16');
-- Three logical devices (on GPU 0, which every GPU machine has): rows in
-- proportion to the budgets.
SET kmeans_gpu.devices = '0, 0,0';
SELECT mode, device, ordinal, rows, fits FROM kmeans_gpu_plan(3000000, 64, 100) ORDER BY mode, device;
-- A budget too small for the working set of a step fits in neither mode.
SET kmeans_gpu.gpu_memory_limit = '16MB';
SELECT * FROM pg_temp.plan(1000000, 128, 1024);
-- The deprecated kmeans_gpu.device, when set, is the one device.
SET kmeans_gpu.gpu_memory_limit = '1GB';
SET kmeans_gpu.device = 0;
SELECT mode, device, ordinal, rows, fits FROM kmeans_gpu_plan(1000, 8, 2) ORDER BY mode;
RESET kmeans_gpu.device;
RESET kmeans_gpu.devices;
RESET kmeans_gpu.gpu_memory_limit;
