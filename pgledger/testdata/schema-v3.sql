-- A version-3 pgledger schema ("idem_v3") with three records, as pgledger wrote it
-- before version 4 (parameter fingerprints, stored values); pg_dump --inserts.
-- The migration test loads it under a schema of its own.
--
-- PostgreSQL database dump
--


-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: idem_v3; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA idem_v3;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: item_chunks; Type: TABLE; Schema: idem_v3; Owner: -
--

CREATE TABLE idem_v3.item_chunks (
    job text NOT NULL COLLATE pg_catalog."C",
    period text NOT NULL COLLATE pg_catalog."C",
    chunk bigint NOT NULL,
    n integer NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    attempt bigint DEFAULT 0 NOT NULL,
    failures integer DEFAULT 0 NOT NULL,
    owner text DEFAULT ''::text NOT NULL,
    lease_until timestamp with time zone,
    settled integer DEFAULT 0 NOT NULL,
    started integer DEFAULT 0 NOT NULL,
    doubt integer DEFAULT 0 NOT NULL,
    updated timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT item_chunks_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'running'::text, 'done'::text])))
);


--
-- Name: item_lists; Type: TABLE; Schema: idem_v3; Owner: -
--

CREATE TABLE idem_v3.item_lists (
    job text NOT NULL COLLATE pg_catalog."C",
    period text NOT NULL COLLATE pg_catalog."C",
    chunk bigint NOT NULL,
    items text[] NOT NULL
);


--
-- Name: item_set; Type: TABLE; Schema: idem_v3; Owner: -
--

CREATE TABLE idem_v3.item_set (
    job text NOT NULL COLLATE pg_catalog."C",
    period text NOT NULL COLLATE pg_catalog."C",
    item text NOT NULL COLLATE pg_catalog."C"
);


--
-- Name: item_state; Type: TABLE; Schema: idem_v3; Owner: -
--

CREATE TABLE idem_v3.item_state (
    job text NOT NULL COLLATE pg_catalog."C",
    period text NOT NULL COLLATE pg_catalog."C",
    item text NOT NULL COLLATE pg_catalog."C",
    chunk bigint DEFAULT 0 NOT NULL,
    status text NOT NULL,
    attempt bigint DEFAULT 0 NOT NULL,
    failures integer DEFAULT 0 NOT NULL,
    doubt boolean DEFAULT false NOT NULL,
    owner text DEFAULT ''::text NOT NULL,
    lease_until timestamp with time zone,
    not_before timestamp with time zone,
    last_error text DEFAULT ''::text NOT NULL,
    updated timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT item_state_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'running'::text, 'failed'::text, 'done'::text, 'unknown'::text, 'parked'::text])))
);


--
-- Name: itemsets; Type: TABLE; Schema: idem_v3; Owner: -
--

CREATE TABLE idem_v3.itemsets (
    job text NOT NULL COLLATE pg_catalog."C",
    period text NOT NULL COLLATE pg_catalog."C",
    sealed boolean DEFAULT false NOT NULL
);


--
-- Name: jobs; Type: TABLE; Schema: idem_v3; Owner: -
--

CREATE TABLE idem_v3.jobs (
    job text NOT NULL COLLATE pg_catalog."C",
    cursor text DEFAULT ''::text NOT NULL COLLATE pg_catalog."C",
    horizon text DEFAULT ''::text NOT NULL COLLATE pg_catalog."C"
);


--
-- Name: meta; Type: TABLE; Schema: idem_v3; Owner: -
--

CREATE TABLE idem_v3.meta (
    name text NOT NULL,
    value bigint NOT NULL
);


--
-- Name: runs; Type: TABLE; Schema: idem_v3; Owner: -
--

CREATE TABLE idem_v3.runs (
    job text NOT NULL COLLATE pg_catalog."C",
    period text NOT NULL COLLATE pg_catalog."C",
    status text NOT NULL,
    attempt bigint NOT NULL,
    failures integer DEFAULT 0 NOT NULL,
    owner text DEFAULT ''::text NOT NULL,
    lease_until timestamp with time zone,
    not_before timestamp with time zone,
    last_error text DEFAULT ''::text NOT NULL,
    created timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    updated timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT runs_status_check CHECK ((status = ANY (ARRAY['running'::text, 'failed'::text, 'done'::text, 'unknown'::text, 'parked'::text, 'skipped'::text])))
);


--
-- Data for Name: item_chunks; Type: TABLE DATA; Schema: idem_v3; Owner: -
--



--
-- Data for Name: item_lists; Type: TABLE DATA; Schema: idem_v3; Owner: -
--



--
-- Data for Name: item_set; Type: TABLE DATA; Schema: idem_v3; Owner: -
--



--
-- Data for Name: item_state; Type: TABLE DATA; Schema: idem_v3; Owner: -
--



--
-- Data for Name: itemsets; Type: TABLE DATA; Schema: idem_v3; Owner: -
--



--
-- Data for Name: jobs; Type: TABLE DATA; Schema: idem_v3; Owner: -
--



--
-- Data for Name: meta; Type: TABLE DATA; Schema: idem_v3; Owner: -
--

INSERT INTO idem_v3.meta VALUES ('schema_version', 3);


--
-- Data for Name: runs; Type: TABLE DATA; Schema: idem_v3; Owner: -
--

INSERT INTO idem_v3.runs VALUES ('daily_settle', '2026-10-26', 'done', 1, 0, 'vm:13515:4b3818cf;start=34119;boot=e8c3e7f0-9c92-4fd1-98df-7250d1bec00d;pidns=4026531836;timens=4026531834', NULL, NULL, '', '2026-12-01 08:31:58.068711+00', '2026-12-01 08:31:58.071563+00');
INSERT INTO idem_v3.runs VALUES ('daily_settle', '2026-10-27', 'done', 1, 0, 'vm:13515:4b3818cf;start=34119;boot=e8c3e7f0-9c92-4fd1-98df-7250d1bec00d;pidns=4026531836;timens=4026531834', NULL, NULL, '', '2026-12-01 08:31:58.078489+00', '2026-12-01 08:31:58.07876+00');
INSERT INTO idem_v3.runs VALUES ('daily_settle', '2026-10-28', 'failed', 1, 1, 'vm:13515:4b3818cf;start=34119;boot=e8c3e7f0-9c92-4fd1-98df-7250d1bec00d;pidns=4026531836;timens=4026531834', NULL, '2026-12-01 09:31:58.081239+00', 'bank closed', '2026-12-01 08:31:58.080632+00', '2026-12-01 08:31:58.081239+00');


--
-- Name: item_chunks item_chunks_pkey; Type: CONSTRAINT; Schema: idem_v3; Owner: -
--

ALTER TABLE ONLY idem_v3.item_chunks
    ADD CONSTRAINT item_chunks_pkey PRIMARY KEY (job, period, chunk);


--
-- Name: item_lists item_lists_pkey; Type: CONSTRAINT; Schema: idem_v3; Owner: -
--

ALTER TABLE ONLY idem_v3.item_lists
    ADD CONSTRAINT item_lists_pkey PRIMARY KEY (job, period, chunk);


--
-- Name: item_set item_set_pkey; Type: CONSTRAINT; Schema: idem_v3; Owner: -
--

ALTER TABLE ONLY idem_v3.item_set
    ADD CONSTRAINT item_set_pkey PRIMARY KEY (job, period, item);


--
-- Name: item_state item_state_pkey; Type: CONSTRAINT; Schema: idem_v3; Owner: -
--

ALTER TABLE ONLY idem_v3.item_state
    ADD CONSTRAINT item_state_pkey PRIMARY KEY (job, period, item);


--
-- Name: itemsets itemsets_pkey; Type: CONSTRAINT; Schema: idem_v3; Owner: -
--

ALTER TABLE ONLY idem_v3.itemsets
    ADD CONSTRAINT itemsets_pkey PRIMARY KEY (job, period);


--
-- Name: jobs jobs_pkey; Type: CONSTRAINT; Schema: idem_v3; Owner: -
--

ALTER TABLE ONLY idem_v3.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (job);


--
-- Name: meta meta_pkey; Type: CONSTRAINT; Schema: idem_v3; Owner: -
--

ALTER TABLE ONLY idem_v3.meta
    ADD CONSTRAINT meta_pkey PRIMARY KEY (name);


--
-- Name: runs runs_pkey; Type: CONSTRAINT; Schema: idem_v3; Owner: -
--

ALTER TABLE ONLY idem_v3.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (job, period);


--
-- Name: item_chunks_by_status; Type: INDEX; Schema: idem_v3; Owner: -
--

CREATE INDEX item_chunks_by_status ON idem_v3.item_chunks USING btree (job, period, status, chunk);


--
-- Name: item_state_by_status; Type: INDEX; Schema: idem_v3; Owner: -
--

CREATE INDEX item_state_by_status ON idem_v3.item_state USING btree (job, period, status, updated);


--
-- PostgreSQL database dump complete
--


