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


-- == More rows than one GPU holds: devices, storage ==


-- == k-medoids, scores and choosing k ==

