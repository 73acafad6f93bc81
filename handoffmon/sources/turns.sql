-- handoffmon turn-log aggregation (the SQL `handoffmon refit --source turns.*` runs in DuckDB).
-- Input: a table `turns` (conversation_id, depth, model, prefix_model, rule, verdict; one row
-- per checked turn and rule) and a table `handoffmon_buckets` (lo, hi, label) with one row per
-- depth bucket (hi NULL for the open last bucket). Each `-- name:` block is one statement.

-- name: rows
-- Every row with its depth bucket and whether it is a clean same-author turn: the turn's
-- prefix is its own author and every earlier turn of the conversation was written by the
-- conversation's first model (depth before the first turn by another model, or after an
-- unknown or foreign prefix). `arg_min` is DuckDB's; MIN_BY in Snowflake/Spark.
CREATE OR REPLACE TEMP VIEW handoffmon_rows AS
WITH first AS (
    SELECT conversation_id, arg_min(model, depth) AS m1
    FROM turns GROUP BY conversation_id
), brk AS (
    SELECT t.conversation_id, min(t.depth) AS f
    FROM turns t JOIN first USING (conversation_id)
    WHERE t.model <> first.m1 OR t.prefix_model NOT IN ('none', first.m1)
    GROUP BY t.conversation_id
)
SELECT t.conversation_id, t.depth, t.model, t.prefix_model, t.rule, t.verdict,
       b.label AS depth_bucket,
       (t.prefix_model = t.model AND t.depth < coalesce(brk.f, 2147483647)) AS clean,
       t.verdict IN ('pass', 'fail') AS checked
FROM turns t
LEFT JOIN brk USING (conversation_id)
JOIN handoffmon_buckets b ON t.depth >= b.lo AND (b.hi IS NULL OR t.depth <= b.hi);

-- name: checks
SELECT rule, model, prefix_model, depth_bucket, verdict, count(*) AS n
FROM handoffmon_rows GROUP BY ALL;

-- name: baseline_checks
SELECT rule, model, prefix_model, depth_bucket, verdict, count(*) AS n
FROM handoffmon_rows WHERE clean GROUP BY ALL;

-- name: depth_sums
-- Σ depth of checked turns per cell and bucket; on the diagonal only clean turns.
SELECT rule, model, prefix_model, depth_bucket, sum(depth) AS n
FROM handoffmon_rows WHERE checked AND (clean OR prefix_model <> model) GROUP BY ALL;

-- name: cluster_sums
-- Per cell, over conversations c with y_c passes in n_c checks: G, Σy², Σyn, Σn²; per rule
-- and pooled over rules (rule 'all': a conversation's checks of every rule together).
WITH used AS (
    SELECT * FROM handoffmon_rows WHERE checked AND (clean OR prefix_model <> model)
), per AS (
    SELECT rule, model, prefix_model, conversation_id,
           count(*) FILTER (WHERE verdict = 'pass') AS y, count(*) AS n
    FROM used GROUP BY ALL
    UNION ALL
    SELECT 'all' AS rule, model, prefix_model, conversation_id,
           count(*) FILTER (WHERE verdict = 'pass') AS y, count(*) AS n
    FROM used GROUP BY ALL
)
SELECT rule, model, prefix_model, count(*) AS conversations,
       sum(y * y) AS y2, sum(y * n) AS yn, sum(n * n) AS n2
FROM per GROUP BY ALL;

-- name: transitions
-- Consecutive pass/fail checks of one rule in one conversation, keyed by the later turn.
WITH seq AS (
    SELECT rule, model, prefix_model, verdict,
           lag(verdict) OVER (PARTITION BY conversation_id, rule ORDER BY depth) AS from_verdict
    FROM handoffmon_rows WHERE checked
)
SELECT rule, model,
       CASE WHEN prefix_model = 'unknown' THEN 'unknown'
            WHEN prefix_model IN ('none', model) THEN 'false' ELSE 'true' END AS handoff,
       from_verdict, verdict AS to_verdict, count(*) AS n
FROM seq WHERE from_verdict IS NOT NULL GROUP BY ALL;

-- name: turns
SELECT model, prefix_model, depth_bucket,
       CASE WHEN prefix_model = 'unknown' THEN 'unknown'
            WHEN prefix_model IN ('none', model) THEN 'false' ELSE 'true' END AS handoff,
       count(*) AS n
FROM (SELECT DISTINCT conversation_id, depth, model, prefix_model, depth_bucket FROM handoffmon_rows)
GROUP BY ALL;

-- name: session_lengths
SELECT depth, count(*) AS n
FROM (SELECT conversation_id, max(depth) AS depth FROM handoffmon_rows GROUP BY conversation_id)
GROUP BY ALL;
