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

