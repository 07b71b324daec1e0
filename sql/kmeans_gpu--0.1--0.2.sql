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


-- == Many servers: partial steps, merging, k-means|| ==


-- == More rows than one GPU holds: devices, storage ==


-- == k-medoids, scores and choosing k ==

-- afk-mc2 seeding for k-means: its chain length is an option of kmeans_fit.
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
	chain_length integer DEFAULT 200)
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
