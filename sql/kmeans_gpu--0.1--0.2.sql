-- kmeans_gpu 0.1 -> 0.2.  ALTER EXTENSION kmeans_gpu UPDATE runs it; CREATE
-- EXTENSION runs kmeans_gpu--0.1.sql and then this.  While 0.2 is unreleased
-- its changes are added here, each under its heading; once 0.2 is released
-- this file is frozen and 0.2 -> 0.3 starts a new one.
--
-- Models stored under 0.1 must keep working: kmeans_model only ever gains
-- attributes at its end (ALTER TYPE ... ADD ATTRIBUTE), which stored values
-- read as NULL, and the C code takes NULL there for the 0.1 behaviour.
\echo Use "ALTER EXTENSION kmeans_gpu UPDATE TO '0.2'" to load this file. \quit

-- == Input: integer and numeric arrays ==

-- kmeans, kmeans_cluster and kmeans_assign also take smallint[], integer[],
-- bigint[] and numeric[] vectors, each value converted as a cast to real
-- converts it (kmeans_fit casts any column with a cast to real[]).  Without
-- these, `SELECT kmeans(v, 2) FROM t` on an integer[] column is ambiguous
-- between the real[] and float8[] forms.

-- smallint[]
CREATE FUNCTION kmeans_accum(internal, smallint[], integer)
	RETURNS internal AS 'MODULE_PATHNAME', 'kmeans_accum'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION kmeans_accum(internal, smallint[], integer, jsonb)
	RETURNS internal AS 'MODULE_PATHNAME', 'kmeans_accum'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE AGGREGATE kmeans(vec smallint[], k integer) (
	SFUNC = kmeans_accum, STYPE = internal,
	FINALFUNC = kmeans_final, FINALFUNC_MODIFY = READ_ONLY,
	COMBINEFUNC = kmeans_combine,
	SERIALFUNC = kmeans_serialize, DESERIALFUNC = kmeans_deserialize,
	PARALLEL = SAFE
);
CREATE AGGREGATE kmeans(vec smallint[], k integer, options jsonb) (
	SFUNC = kmeans_accum, STYPE = internal,
	FINALFUNC = kmeans_final, FINALFUNC_MODIFY = READ_ONLY,
	COMBINEFUNC = kmeans_combine,
	SERIALFUNC = kmeans_serialize, DESERIALFUNC = kmeans_deserialize,
	PARALLEL = SAFE
);
CREATE FUNCTION kmeans_cluster(vec smallint[], k integer)
	RETURNS integer AS 'MODULE_PATHNAME', 'kmeans_cluster'
	LANGUAGE C WINDOW CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;
CREATE FUNCTION kmeans_cluster(vec smallint[], k integer, options jsonb)
	RETURNS integer AS 'MODULE_PATHNAME', 'kmeans_cluster'
	LANGUAGE C WINDOW CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;
CREATE FUNCTION kmeans_assign(model kmeans_model, vec smallint[])
	RETURNS integer AS 'MODULE_PATHNAME', 'kmeans_assign'
	LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;

-- integer[]
CREATE FUNCTION kmeans_accum(internal, integer[], integer)
	RETURNS internal AS 'MODULE_PATHNAME', 'kmeans_accum'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION kmeans_accum(internal, integer[], integer, jsonb)
	RETURNS internal AS 'MODULE_PATHNAME', 'kmeans_accum'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE AGGREGATE kmeans(vec integer[], k integer) (
	SFUNC = kmeans_accum, STYPE = internal,
	FINALFUNC = kmeans_final, FINALFUNC_MODIFY = READ_ONLY,
	COMBINEFUNC = kmeans_combine,
	SERIALFUNC = kmeans_serialize, DESERIALFUNC = kmeans_deserialize,
	PARALLEL = SAFE
);
CREATE AGGREGATE kmeans(vec integer[], k integer, options jsonb) (
	SFUNC = kmeans_accum, STYPE = internal,
	FINALFUNC = kmeans_final, FINALFUNC_MODIFY = READ_ONLY,
	COMBINEFUNC = kmeans_combine,
	SERIALFUNC = kmeans_serialize, DESERIALFUNC = kmeans_deserialize,
	PARALLEL = SAFE
);
CREATE FUNCTION kmeans_cluster(vec integer[], k integer)
	RETURNS integer AS 'MODULE_PATHNAME', 'kmeans_cluster'
	LANGUAGE C WINDOW CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;
CREATE FUNCTION kmeans_cluster(vec integer[], k integer, options jsonb)
	RETURNS integer AS 'MODULE_PATHNAME', 'kmeans_cluster'
	LANGUAGE C WINDOW CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;
CREATE FUNCTION kmeans_assign(model kmeans_model, vec integer[])
	RETURNS integer AS 'MODULE_PATHNAME', 'kmeans_assign'
	LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;

-- bigint[]
CREATE FUNCTION kmeans_accum(internal, bigint[], integer)
	RETURNS internal AS 'MODULE_PATHNAME', 'kmeans_accum'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION kmeans_accum(internal, bigint[], integer, jsonb)
	RETURNS internal AS 'MODULE_PATHNAME', 'kmeans_accum'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE AGGREGATE kmeans(vec bigint[], k integer) (
	SFUNC = kmeans_accum, STYPE = internal,
	FINALFUNC = kmeans_final, FINALFUNC_MODIFY = READ_ONLY,
	COMBINEFUNC = kmeans_combine,
	SERIALFUNC = kmeans_serialize, DESERIALFUNC = kmeans_deserialize,
	PARALLEL = SAFE
);
CREATE AGGREGATE kmeans(vec bigint[], k integer, options jsonb) (
	SFUNC = kmeans_accum, STYPE = internal,
	FINALFUNC = kmeans_final, FINALFUNC_MODIFY = READ_ONLY,
	COMBINEFUNC = kmeans_combine,
	SERIALFUNC = kmeans_serialize, DESERIALFUNC = kmeans_deserialize,
	PARALLEL = SAFE
);
CREATE FUNCTION kmeans_cluster(vec bigint[], k integer)
	RETURNS integer AS 'MODULE_PATHNAME', 'kmeans_cluster'
	LANGUAGE C WINDOW CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;
CREATE FUNCTION kmeans_cluster(vec bigint[], k integer, options jsonb)
	RETURNS integer AS 'MODULE_PATHNAME', 'kmeans_cluster'
	LANGUAGE C WINDOW CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;
CREATE FUNCTION kmeans_assign(model kmeans_model, vec bigint[])
	RETURNS integer AS 'MODULE_PATHNAME', 'kmeans_assign'
	LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;

-- numeric[]
CREATE FUNCTION kmeans_accum(internal, numeric[], integer)
	RETURNS internal AS 'MODULE_PATHNAME', 'kmeans_accum'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION kmeans_accum(internal, numeric[], integer, jsonb)
	RETURNS internal AS 'MODULE_PATHNAME', 'kmeans_accum'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE AGGREGATE kmeans(vec numeric[], k integer) (
	SFUNC = kmeans_accum, STYPE = internal,
	FINALFUNC = kmeans_final, FINALFUNC_MODIFY = READ_ONLY,
	COMBINEFUNC = kmeans_combine,
	SERIALFUNC = kmeans_serialize, DESERIALFUNC = kmeans_deserialize,
	PARALLEL = SAFE
);
CREATE AGGREGATE kmeans(vec numeric[], k integer, options jsonb) (
	SFUNC = kmeans_accum, STYPE = internal,
	FINALFUNC = kmeans_final, FINALFUNC_MODIFY = READ_ONLY,
	COMBINEFUNC = kmeans_combine,
	SERIALFUNC = kmeans_serialize, DESERIALFUNC = kmeans_deserialize,
	PARALLEL = SAFE
);
CREATE FUNCTION kmeans_cluster(vec numeric[], k integer)
	RETURNS integer AS 'MODULE_PATHNAME', 'kmeans_cluster'
	LANGUAGE C WINDOW CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;
CREATE FUNCTION kmeans_cluster(vec numeric[], k integer, options jsonb)
	RETURNS integer AS 'MODULE_PATHNAME', 'kmeans_cluster'
	LANGUAGE C WINDOW CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;
CREATE FUNCTION kmeans_assign(model kmeans_model, vec numeric[])
	RETURNS integer AS 'MODULE_PATHNAME', 'kmeans_assign'
	LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;

-- == Many servers: partial steps, merging, k-means|| ==

-- What one part of the rows contributes to one Lloyd step for a model's
-- centroids: per-cluster rows, exact sums of weights, of rows and of costs,
-- and the rows farthest from their centroids for re-seeding (partial.c).
CREATE TYPE kmeans_partial;
CREATE FUNCTION kmeans_partial_in(cstring) RETURNS kmeans_partial
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION kmeans_partial_out(kmeans_partial) RETURNS cstring
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION kmeans_partial_recv(internal) RETURNS kmeans_partial
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION kmeans_partial_send(kmeans_partial) RETURNS bytea
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE TYPE kmeans_partial (
	INPUT = kmeans_partial_in,
	OUTPUT = kmeans_partial_out,
	RECEIVE = kmeans_partial_recv,
	SEND = kmeans_partial_send,
	INTERNALLENGTH = VARIABLE,
	ALIGNMENT = double,
	STORAGE = extended
);

-- kmeans_partial(vec, model): the map step over any query.
CREATE FUNCTION kmeans_partial_accum(internal, real[], kmeans_model)
	RETURNS internal AS 'MODULE_PATHNAME', 'kmeans_partial_accum'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION kmeans_partial_accum(internal, double precision[], kmeans_model)
	RETURNS internal AS 'MODULE_PATHNAME', 'kmeans_partial_accum'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION kmeans_partial_combine(internal, internal)
	RETURNS internal AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION kmeans_partial_serialize(internal)
	RETURNS bytea AS 'MODULE_PATHNAME'
	LANGUAGE C STRICT PARALLEL SAFE;
CREATE FUNCTION kmeans_partial_deserialize(bytea, internal)
	RETURNS internal AS 'MODULE_PATHNAME'
	LANGUAGE C STRICT PARALLEL SAFE;
CREATE FUNCTION kmeans_partial_final(internal)
	RETURNS kmeans_partial AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE AGGREGATE kmeans_partial(vec real[], model kmeans_model) (
	SFUNC = kmeans_partial_accum,
	STYPE = internal,
	COMBINEFUNC = kmeans_partial_combine,
	SERIALFUNC = kmeans_partial_serialize,
	DESERIALFUNC = kmeans_partial_deserialize,
	FINALFUNC = kmeans_partial_final,
	FINALFUNC_MODIFY = READ_WRITE,
	PARALLEL = SAFE
);
CREATE AGGREGATE kmeans_partial(vec double precision[], model kmeans_model) (
	SFUNC = kmeans_partial_accum,
	STYPE = internal,
	COMBINEFUNC = kmeans_partial_combine,
	SERIALFUNC = kmeans_partial_serialize,
	DESERIALFUNC = kmeans_partial_deserialize,
	FINALFUNC = kmeans_partial_final,
	FINALFUNC_MODIFY = READ_WRITE,
	PARALLEL = SAFE
);

-- kmeans_merge(partial): partials of the same model added, exactly.
CREATE FUNCTION kmeans_merge_accum(internal, kmeans_partial)
	RETURNS internal AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION kmeans_merge_combine(internal, internal)
	RETURNS internal AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION kmeans_merge_serialize(internal)
	RETURNS bytea AS 'MODULE_PATHNAME'
	LANGUAGE C STRICT PARALLEL SAFE;
CREATE FUNCTION kmeans_merge_deserialize(bytea, internal)
	RETURNS internal AS 'MODULE_PATHNAME'
	LANGUAGE C STRICT PARALLEL SAFE;
CREATE FUNCTION kmeans_merge_final(internal)
	RETURNS kmeans_partial AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE AGGREGATE kmeans_merge(partial kmeans_partial) (
	SFUNC = kmeans_merge_accum,
	STYPE = internal,
	COMBINEFUNC = kmeans_merge_combine,
	SERIALFUNC = kmeans_merge_serialize,
	DESERIALFUNC = kmeans_merge_deserialize,
	FINALFUNC = kmeans_merge_final,
	PARALLEL = SAFE
);

-- kmeans_step(model, partial): the next model, as one Lloyd step makes it.
CREATE FUNCTION kmeans_step(model kmeans_model, partial kmeans_partial)
	RETURNS kmeans_model AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT IMMUTABLE PARALLEL SAFE;

-- The shard side of kmeans_fit_sharded (shard.c): each shard runs these for
-- the coordinator, through the PL/Proxy functions of kmeans_gpu_sharded.
-- parts holds the one partition number PL/Proxy sends each shard.
CREATE FUNCTION kmeans_shard_load(parts integer[], fit_id bigint, source text,
	column_name text, weight_column text, metric text, storage text,
	fingerprints bigint[],
	OUT part integer, OUT n_rows bigint, OUT n_skipped bigint, OUT dim integer,
	OUT fingerprint bigint, OUT weight_positive boolean, OUT ms double precision,
	OUT reloaded boolean)
	RETURNS SETOF record AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION kmeans_shard_step(parts integer[], fit_id bigint, source text,
	column_name text, weight_column text, metric text, storage text,
	fingerprints bigint[],
	previous real[], centroids real[],
	OUT part integer, OUT partial kmeans_partial, OUT moved bigint,
	OUT ms double precision, OUT reloaded boolean)
	RETURNS SETOF record AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION kmeans_shard_draw(parts integer[], fit_id bigint, source text,
	column_name text, weight_column text, metric text, storage text,
	fingerprints bigint[],
	seed bigint, run integer, candidates real[], stream bigint, use_cost boolean,
	m integer,
	OUT part integer, OUT keys double precision[], OUT hashes bigint[],
	OUT weights real[], OUT rows real[], OUT ms double precision, OUT reloaded boolean)
	RETURNS SETOF record AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION kmeans_shard_weigh(parts integer[], fit_id bigint, source text,
	column_name text, weight_column text, metric text, storage text,
	fingerprints bigint[],
	seed bigint, run integer, candidates real[],
	OUT part integer, OUT terms double precision[], OUT nterms integer[],
	OUT ms double precision, OUT reloaded boolean)
	RETURNS SETOF record AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION kmeans_shard_end(parts integer[], fit_id bigint,
	OUT part integer, OUT freed bigint)
	RETURNS SETOF record AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION kmeans_shard_status(parts integer[],
	OUT part integer, OUT fit_id bigint, OUT n_rows bigint, OUT bytes bigint)
	RETURNS SETOF record AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;


-- == More rows than one GPU holds: devices, storage ==

-- The model records how its rows were kept: 'float32', 'float16' or
-- 'bfloat16' (kmeans_fit's storage option, which also joins its DROP and
-- CREATE below).  Models stored under 0.1 read NULL here, which means
-- float32, what 0.1 did.
ALTER TYPE kmeans_model ADD ATTRIBUTE storage text;

-- The devices and the memory a split fit of n rows would take, one row
-- per logical device of kmeans_gpu.devices and mode ('in memory', 'out of
-- core'), from the GPU engine's own plan (gpu_plan.c).  With
-- kmeans_gpu.gpu_memory_limit set it plans for that budget, also on a
-- machine without a GPU.
CREATE FUNCTION kmeans_gpu_plan(n bigint, dim integer, k integer,
	metric text DEFAULT 'l2', storage text DEFAULT 'float32', weighted boolean DEFAULT false,
	OUT mode text, OUT device integer, OUT ordinal integer, OUT rows bigint,
	OUT device_bytes bigint, OUT budget bigint, OUT chunk_rows bigint,
	OUT pinned_bytes bigint, OUT fits boolean)
	RETURNS SETOF record AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;


-- == k-medoids, scores and choosing k ==

-- afk-mc2 seeding for k-means: its chain length is an option of kmeans_fit;
-- so is storage (see "More rows than one GPU holds" above).
DROP FUNCTION kmeans_fit(regclass, text, integer, integer, double precision, text, real[],
						 text, bigint, integer, text, text);
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
	engine text DEFAULT NULL,
	chain_length integer DEFAULT 200,
	storage text DEFAULT 'float32')
	RETURNS kmeans_model AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;

-- k-medoids: medoids are rows.  For metric sqfd, medoids is k x F x dim:
-- medoid j's signature is its first medoid_features[j] features, the rest
-- is padding of zeros (weight 0, which adds nothing to a distance).
CREATE TYPE kmedoids_model AS (
	k integer,					-- number of clusters
	dim integer,				-- vector length; sqfd: values per feature (weight + coordinates)
	metric text,				-- 'l2', 'sqeuclidean', 'l1', 'cosine' or 'sqfd'
	medoids real[],				-- k x dim; sqfd: k x F x dim (see medoid_features)
	medoid_ids bigint[],		-- the medoids' ids, when an id column was given
	sizes bigint[],				-- rows per cluster
	cost double precision,		-- sum of every row's distance to its medoid
	iterations integer,			-- rounds (alternate) or passes (fasterpam)
	converged boolean,			-- stopped before max_iter
	engine text,				-- 'cpu'
	n_rows bigint,				-- rows clustered
	n_skipped bigint,			-- rows skipped because the vector was NULL
	cluster_cost double precision[],	-- cost per cluster
	method text,				-- 'alternate' or 'fasterpam'
	init text,					-- 'k-means++', 'random' or 'afk-mc2'
	seed bigint,				-- seed used
	max_iter integer,
	alpha double precision,		-- sqfd: similarity exp(-alpha d^2); NULL otherwise
	chain_length integer,		-- afk-mc2: chain length; NULL otherwise
	medoid_features integer[]	-- sqfd: features of each medoid; NULL otherwise
);

CREATE FUNCTION kmedoids_accum(internal, real[], integer)
	RETURNS internal AS 'MODULE_PATHNAME', 'kmedoids_accum'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION kmedoids_accum(internal, real[], integer, jsonb)
	RETURNS internal AS 'MODULE_PATHNAME', 'kmedoids_accum'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION kmedoids_accum(internal, double precision[], integer)
	RETURNS internal AS 'MODULE_PATHNAME', 'kmedoids_accum'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION kmedoids_accum(internal, double precision[], integer, jsonb)
	RETURNS internal AS 'MODULE_PATHNAME', 'kmedoids_accum'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION kmedoids_final(internal)
	RETURNS kmedoids_model AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;

-- No combine function: a group's rows meet in one process (a parallel plan
-- gathers them first).  real[] also takes sqfd's two-dimensional signatures.
CREATE AGGREGATE kmedoids(vec real[], k integer) (
	SFUNC = kmedoids_accum, STYPE = internal,
	FINALFUNC = kmedoids_final, FINALFUNC_MODIFY = READ_ONLY,
	PARALLEL = SAFE
);
CREATE AGGREGATE kmedoids(vec real[], k integer, options jsonb) (
	SFUNC = kmedoids_accum, STYPE = internal,
	FINALFUNC = kmedoids_final, FINALFUNC_MODIFY = READ_ONLY,
	PARALLEL = SAFE
);
CREATE AGGREGATE kmedoids(vec double precision[], k integer) (
	SFUNC = kmedoids_accum, STYPE = internal,
	FINALFUNC = kmedoids_final, FINALFUNC_MODIFY = READ_ONLY,
	PARALLEL = SAFE
);
CREATE AGGREGATE kmedoids(vec double precision[], k integer, options jsonb) (
	SFUNC = kmedoids_accum, STYPE = internal,
	FINALFUNC = kmedoids_final, FINALFUNC_MODIFY = READ_ONLY,
	PARALLEL = SAFE
);

CREATE FUNCTION kmedoids_fit(
	source regclass,
	column_name text,
	k integer,
	metric text DEFAULT 'l2',
	max_iter integer DEFAULT 100,
	init text DEFAULT 'k-means++',
	seed bigint DEFAULT NULL,
	id_column text DEFAULT NULL,
	method text DEFAULT 'alternate',
	engine text DEFAULT NULL,
	alpha double precision DEFAULT 1.0,
	chain_length integer DEFAULT 200)
	RETURNS kmedoids_model AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;

CREATE FUNCTION kmedoids_assign(model kmedoids_model, vec real[])
	RETURNS integer AS 'MODULE_PATHNAME', 'kmedoids_assign'
	LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;
CREATE FUNCTION kmedoids_assign(model kmedoids_model, vec double precision[])
	RETURNS integer AS 'MODULE_PATHNAME', 'kmedoids_assign'
	LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;

CREATE FUNCTION kmedoids_labels(model kmedoids_model, source regclass,
	column_name text, id_column text,
	OUT id bigint, OUT cluster_id integer, OUT distance double precision)
	RETURNS SETOF record AS 'MODULE_PATHNAME'
	LANGUAGE C CALLED ON NULL INPUT STABLE PARALLEL RESTRICTED;

-- Judging a clustering: one function name, one version per model type.
CREATE FUNCTION kmeans_score(model kmeans_model, source regclass, column_name text,
	sample integer DEFAULT 10000, seed bigint DEFAULT NULL,
	OUT inertia double precision, OUT silhouette double precision,
	OUT davies_bouldin double precision, OUT calinski_harabasz double precision,
	OUT n_scored bigint)
	RETURNS record AS 'MODULE_PATHNAME', 'kmeans_score'
	LANGUAGE C CALLED ON NULL INPUT STABLE PARALLEL RESTRICTED;
CREATE FUNCTION kmeans_score(model kmedoids_model, source regclass, column_name text,
	sample integer DEFAULT 10000, seed bigint DEFAULT NULL,
	OUT inertia double precision, OUT silhouette double precision,
	OUT davies_bouldin double precision, OUT calinski_harabasz double precision,
	OUT n_scored bigint)
	RETURNS record AS 'MODULE_PATHNAME', 'kmedoids_score'
	LANGUAGE C CALLED ON NULL INPUT STABLE PARALLEL RESTRICTED;

-- Choosing k: one read of the table, a k-means model per k with its scores.
CREATE FUNCTION kmeans_sweep(
	source regclass,
	column_name text,
	ks integer[],
	max_iter integer DEFAULT 300,
	tol double precision DEFAULT 1e-4,
	init text DEFAULT 'k-means++',
	metric text DEFAULT 'l2',
	seed bigint DEFAULT NULL,
	n_init integer DEFAULT 1,
	weight_column text DEFAULT NULL,
	engine text DEFAULT NULL,
	sample integer DEFAULT 10000,
	chain_length integer DEFAULT 200,
	OUT k integer, OUT inertia double precision, OUT silhouette double precision,
	OUT davies_bouldin double precision, OUT model kmeans_model)
	RETURNS SETOF record AS 'MODULE_PATHNAME', 'kmeans_sweep'
	LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;

-- == kmeans_fit reads large tables with parallel workers ==

-- Called only inside the query kmeans_fit runs to read a table: each
-- process of a parallel plan writes its rows into the fit's shared memory
-- (src/parallel_read.c); any other call is an ERROR.  Parallel safe, so
-- that workers may run it; volatile, so that it runs once for every row.
CREATE FUNCTION kmeans_read_row(bigint, bigint, real[], double precision)
	RETURNS boolean AS 'MODULE_PATHNAME', 'kmeans_read_row'
	LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL SAFE COST 10;
CREATE FUNCTION kmeans_read_row(bigint, bigint, double precision[], double precision)
	RETURNS boolean AS 'MODULE_PATHNAME', 'kmeans_read_row'
	LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL SAFE COST 10;
