-- kmeans_gpu 0.1: the install script (CREATE EXTENSION kmeans_gpu runs it).
\echo Use "CREATE EXTENSION kmeans_gpu" to load this file. \quit

-- A fitted model.  A plain composite value: store it in a table, pass it to
-- kmeans_centroids, kmeans_assign and kmeans_labels.
CREATE TYPE kmeans_model AS (
	k integer,					-- number of clusters
	dim integer,				-- vector length
	metric text,				-- 'l2' or 'cosine'
	centroids real[],			-- k x dim (two-dimensional)
	sizes bigint[],				-- rows per cluster
	inertia double precision,	-- l2: sum of squared distances; cosine: sum of 1 - cos
	iterations integer,			-- Lloyd iterations of the best run
	converged boolean,			-- stopped before max_iter
	engine text,				-- 'cpu' or 'gpu'
	n_rows bigint,				-- vectors clustered
	n_skipped bigint,			-- rows skipped because the vector was NULL
	cluster_inertia double precision[],	-- inertia per cluster
	init text,					-- 'k-means++', 'random' or 'explicit'
	seed bigint,				-- seed used (give it back to reproduce the model)
	n_init integer,
	max_iter integer,
	tol double precision
);

-- The aggregate: kmeans(vec, k [, options])

CREATE FUNCTION kmeans_accum(internal, real[], integer)
	RETURNS internal AS 'MODULE_PATHNAME', 'kmeans_accum'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION kmeans_accum(internal, real[], integer, jsonb)
	RETURNS internal AS 'MODULE_PATHNAME', 'kmeans_accum'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION kmeans_accum(internal, double precision[], integer)
	RETURNS internal AS 'MODULE_PATHNAME', 'kmeans_accum'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION kmeans_accum(internal, double precision[], integer, jsonb)
	RETURNS internal AS 'MODULE_PATHNAME', 'kmeans_accum'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;

CREATE FUNCTION kmeans_combine(internal, internal)
	RETURNS internal AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION kmeans_serialize(internal)
	RETURNS bytea AS 'MODULE_PATHNAME'
	LANGUAGE C STRICT PARALLEL SAFE;
CREATE FUNCTION kmeans_deserialize(bytea, internal)
	RETURNS internal AS 'MODULE_PATHNAME'
	LANGUAGE C STRICT PARALLEL SAFE;
CREATE FUNCTION kmeans_final(internal)
	RETURNS kmeans_model AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;

CREATE AGGREGATE kmeans(vec real[], k integer) (
	SFUNC = kmeans_accum, STYPE = internal,
	FINALFUNC = kmeans_final, FINALFUNC_MODIFY = READ_ONLY,
	COMBINEFUNC = kmeans_combine,
	SERIALFUNC = kmeans_serialize, DESERIALFUNC = kmeans_deserialize,
	PARALLEL = SAFE
);
CREATE AGGREGATE kmeans(vec real[], k integer, options jsonb) (
	SFUNC = kmeans_accum, STYPE = internal,
	FINALFUNC = kmeans_final, FINALFUNC_MODIFY = READ_ONLY,
	COMBINEFUNC = kmeans_combine,
	SERIALFUNC = kmeans_serialize, DESERIALFUNC = kmeans_deserialize,
	PARALLEL = SAFE
);
CREATE AGGREGATE kmeans(vec double precision[], k integer) (
	SFUNC = kmeans_accum, STYPE = internal,
	FINALFUNC = kmeans_final, FINALFUNC_MODIFY = READ_ONLY,
	COMBINEFUNC = kmeans_combine,
	SERIALFUNC = kmeans_serialize, DESERIALFUNC = kmeans_deserialize,
	PARALLEL = SAFE
);
CREATE AGGREGATE kmeans(vec double precision[], k integer, options jsonb) (
	SFUNC = kmeans_accum, STYPE = internal,
	FINALFUNC = kmeans_final, FINALFUNC_MODIFY = READ_ONLY,
	COMBINEFUNC = kmeans_combine,
	SERIALFUNC = kmeans_serialize, DESERIALFUNC = kmeans_deserialize,
	PARALLEL = SAFE
);

-- One pass over a table's column.  Named arguments work:
--   SELECT kmeans_fit('docs', 'embedding', 100, metric => 'cosine', seed => 7);
CREATE FUNCTION kmeans_fit(
	source regclass,
	column_name text,
	k integer,
	max_iter integer DEFAULT 300,
	tol double precision DEFAULT 1e-4,
	init text DEFAULT 'k-means++',
	init_centroids real[] DEFAULT NULL,
	metric text DEFAULT 'l2',
	seed bigint DEFAULT NULL,
	n_init integer DEFAULT 1,
	weight_column text DEFAULT NULL,
	engine text DEFAULT NULL)
	RETURNS kmeans_model AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;

CREATE FUNCTION kmeans_centroids(model kmeans_model,
	OUT cluster_id integer, OUT centroid real[], OUT size bigint,
	OUT inertia double precision)
	RETURNS SETOF record AS 'MODULE_PATHNAME'
	LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;

CREATE FUNCTION kmeans_assign(model kmeans_model, vec real[])
	RETURNS integer AS 'MODULE_PATHNAME', 'kmeans_assign'
	LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;
CREATE FUNCTION kmeans_assign(model kmeans_model, vec double precision[])
	RETURNS integer AS 'MODULE_PATHNAME', 'kmeans_assign'
	LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;

CREATE FUNCTION kmeans_labels(model kmeans_model, source regclass,
	column_name text, id_column text,
	OUT id bigint, OUT cluster_id integer, OUT distance double precision)
	RETURNS SETOF record AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT STABLE PARALLEL RESTRICTED;

-- The GPUs this backend can use (none: no rows).
CREATE FUNCTION kmeans_gpu_devices(
	OUT device integer, OUT name text, OUT total_memory bigint, OUT free_memory bigint,
	OUT compute_capability text, OUT multiprocessors integer)
	RETURNS SETOF record AS 'MODULE_PATHNAME'
	LANGUAGE C VOLATILE PARALLEL RESTRICTED;

-- The window function: each row's cluster within its partition.
CREATE FUNCTION kmeans_cluster(vec real[], k integer)
	RETURNS integer AS 'MODULE_PATHNAME', 'kmeans_cluster'
	LANGUAGE C WINDOW CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;
CREATE FUNCTION kmeans_cluster(vec real[], k integer, options jsonb)
	RETURNS integer AS 'MODULE_PATHNAME', 'kmeans_cluster'
	LANGUAGE C WINDOW CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;
CREATE FUNCTION kmeans_cluster(vec double precision[], k integer)
	RETURNS integer AS 'MODULE_PATHNAME', 'kmeans_cluster'
	LANGUAGE C WINDOW CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;
CREATE FUNCTION kmeans_cluster(vec double precision[], k integer, options jsonb)
	RETURNS integer AS 'MODULE_PATHNAME', 'kmeans_cluster'
	LANGUAGE C WINDOW CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;
