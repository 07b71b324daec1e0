-- kmeans_gpu_sharded 0.2: kmeans_fit_sharded over PL/Proxy clusters.
-- CREATE EXTENSION kmeans_gpu_sharded runs it, on the coordinator only; the
-- shards need kmeans_gpu, whose kmeans_shard_* functions these call (found
-- on the search_path of the role the cluster's user mapping names).
\echo Use "CREATE EXTENSION kmeans_gpu_sharded" to load this file. \quit

-- PL/Proxy takes the cluster's name from a function of the arguments.
CREATE FUNCTION kmeans_sharded_cluster(cluster_name text) RETURNS text
	LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
	AS $$ SELECT cluster_name $$;

-- One call on the shards each: CLUSTER names the cluster, SPLIT and RUN ON
-- send each partition its own number (parts holds 0 .. N-1), in parallel.
CREATE FUNCTION kmeans_sharded_load(cluster_name text, parts integer[], fit_id bigint,
	source text, column_name text, weight_column text, metric text, storage text,
	fingerprints bigint[],
	OUT part integer, OUT n_rows bigint, OUT n_skipped bigint, OUT dim integer,
	OUT fingerprint bigint, OUT weight_positive boolean, OUT ms double precision,
	OUT reloaded boolean)
RETURNS SETOF record AS $$
	CLUSTER @extschema@.kmeans_sharded_cluster(cluster_name);
	SPLIT parts;
	RUN ON parts;
	SELECT * FROM kmeans_shard_load(parts, fit_id, source, column_name, weight_column,
		metric, storage, fingerprints);
$$ LANGUAGE plproxy;

CREATE FUNCTION kmeans_sharded_step(cluster_name text, parts integer[], fit_id bigint,
	source text, column_name text, weight_column text, metric text, storage text,
	fingerprints bigint[],
	previous real[], centroids real[],
	OUT part integer, OUT partial kmeans_partial, OUT moved bigint,
	OUT ms double precision, OUT reloaded boolean)
RETURNS SETOF record AS $$
	CLUSTER @extschema@.kmeans_sharded_cluster(cluster_name);
	SPLIT parts;
	RUN ON parts;
	SELECT * FROM kmeans_shard_step(parts, fit_id, source, column_name, weight_column,
		metric, storage, fingerprints, previous, centroids);
$$ LANGUAGE plproxy;

CREATE FUNCTION kmeans_sharded_draw(cluster_name text, parts integer[], fit_id bigint,
	source text, column_name text, weight_column text, metric text, storage text,
	fingerprints bigint[],
	seed bigint, run integer, candidates real[], stream bigint, use_cost boolean, m integer,
	OUT part integer, OUT keys double precision[], OUT hashes bigint[],
	OUT weights real[], OUT rows real[], OUT ms double precision, OUT reloaded boolean)
RETURNS SETOF record AS $$
	CLUSTER @extschema@.kmeans_sharded_cluster(cluster_name);
	SPLIT parts;
	RUN ON parts;
	SELECT * FROM kmeans_shard_draw(parts, fit_id, source, column_name, weight_column,
		metric, storage, fingerprints, seed, run, candidates, stream, use_cost, m);
$$ LANGUAGE plproxy;

CREATE FUNCTION kmeans_sharded_weigh(cluster_name text, parts integer[], fit_id bigint,
	source text, column_name text, weight_column text, metric text, storage text,
	fingerprints bigint[],
	seed bigint, run integer, candidates real[],
	OUT part integer, OUT terms double precision[], OUT nterms integer[],
	OUT ms double precision, OUT reloaded boolean)
RETURNS SETOF record AS $$
	CLUSTER @extschema@.kmeans_sharded_cluster(cluster_name);
	SPLIT parts;
	RUN ON parts;
	SELECT * FROM kmeans_shard_weigh(parts, fit_id, source, column_name, weight_column,
		metric, storage, fingerprints, seed, run, candidates);
$$ LANGUAGE plproxy;

CREATE FUNCTION kmeans_sharded_end(cluster_name text, parts integer[], fit_id bigint,
	OUT part integer, OUT freed bigint)
RETURNS SETOF record AS $$
	CLUSTER @extschema@.kmeans_sharded_cluster(cluster_name);
	SPLIT parts;
	RUN ON parts;
	SELECT * FROM kmeans_shard_end(parts, fit_id);
$$ LANGUAGE plproxy;

-- What each shard's backend of this session holds (for tests and monitoring).
CREATE FUNCTION kmeans_sharded_status(cluster_name text, parts integer[],
	OUT part integer, OUT fit_id bigint, OUT n_rows bigint, OUT bytes bigint)
RETURNS SETOF record AS $$
	CLUSTER @extschema@.kmeans_sharded_cluster(cluster_name);
	SPLIT parts;
	RUN ON parts;
	SELECT * FROM kmeans_shard_status(parts);
$$ LANGUAGE plproxy;

-- The sharded fit: kmeans_fit's options and defaults, but k-means|| seeding.
CREATE FUNCTION kmeans_fit_sharded(
	cluster_name text,
	source text,
	column_name text,
	k integer,
	max_iter integer DEFAULT 300,
	tol double precision DEFAULT 1e-4,
	init text DEFAULT 'k-means||',
	init_centroids real[] DEFAULT NULL,
	metric text DEFAULT 'l2',
	seed bigint DEFAULT NULL,
	n_init integer DEFAULT 1,
	weight_column text DEFAULT NULL,
	engine text DEFAULT NULL,
	chain_length integer DEFAULT 200,
	storage text DEFAULT 'float32')
	RETURNS kmeans_model AS '$libdir/kmeans_gpu', 'kmeans_fit_sharded'
	LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
