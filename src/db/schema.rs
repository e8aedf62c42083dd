//! Schema migrations, append-only, keyed by `PRAGMA user_version`: migration N brings the
//! database from version N-1 to N. Never edit a shipped migration; add the next one.
//!
//! Times are whole seconds since the Unix epoch (UTC). Partial indexes keep every hot query
//! (claim, queue, tick) proportional to the number of *live* rows, not to history.

pub const MIGRATIONS: &[&str] = &[
    // 1: the tables of design §10.
    r#"
CREATE TABLE tasks (
    id                  INTEGER PRIMARY KEY,
    work_item           TEXT NOT NULL UNIQUE,   -- `SHOP-7`, or its tombstone `SHOP-7#cancelled-12`
    base_work_item      TEXT NOT NULL,          -- always `SHOP-7`
    repo                TEXT NOT NULL,
    title               TEXT NOT NULL,
    description         TEXT NOT NULL DEFAULT '',
    stage               TEXT NOT NULL,
    track               TEXT NOT NULL DEFAULT 'feature',
    branch              TEXT NOT NULL,
    labels              TEXT NOT NULL DEFAULT '[]',   -- JSON array of strings
    dev_retries         INTEGER NOT NULL DEFAULT 0,
    stage_entered_at    INTEGER NOT NULL,
    entry_marker        TEXT,                   -- blob id of the verdict artifact / branch head at stage entry
    paused_at           INTEGER,
    paused_reason       TEXT,
    paused_by           TEXT,
    pause_before        TEXT,                   -- breakpoint stage
    approved_at         INTEGER,
    deploy_confirmed_at INTEGER,
    blocked_at          INTEGER,
    blocked_reason      TEXT,
    held_at             INTEGER,
    held_reason         TEXT,
    cancel_requested_at INTEGER,
    cancelled_at        INTEGER,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
);
CREATE INDEX tasks_base ON tasks(base_work_item, id);
CREATE INDEX tasks_active ON tasks(repo, id) WHERE stage NOT IN ('done', 'cancelled');

CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY,
    task_id          INTEGER NOT NULL REFERENCES tasks(id),
    role             TEXT NOT NULL,
    stage            TEXT NOT NULL,
    repo             TEXT NOT NULL,
    status           TEXT NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL DEFAULT 3,
    available_at     INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    started_at       INTEGER,
    finished_at      INTEGER,
    supervisor_pid   INTEGER,
    supervisor_start INTEGER,
    supervisor_boot  TEXT,
    agent_pgid       INTEGER,
    agent_start      INTEGER,
    exit_code        INTEGER,
    error            TEXT,
    prompt           TEXT NOT NULL DEFAULT ''
);
CREATE INDEX jobs_live ON jobs(status, id) WHERE status IN ('queued', 'running');
CREATE INDEX jobs_task ON jobs(task_id, id);
CREATE INDEX jobs_finished ON jobs(finished_at, status) WHERE finished_at IS NOT NULL;

CREATE TABLE job_deps (
    task_id    INTEGER NOT NULL REFERENCES tasks(id),
    depends_on INTEGER NOT NULL REFERENCES tasks(id),
    PRIMARY KEY (task_id, depends_on)
) WITHOUT ROWID;

CREATE TABLE transitions (
    id                 INTEGER PRIMARY KEY,
    task_id            INTEGER NOT NULL REFERENCES tasks(id),
    from_stage         TEXT NOT NULL,
    to_stage           TEXT NOT NULL,
    actor              TEXT NOT NULL,
    outcome            TEXT NOT NULL,
    reason             TEXT NOT NULL DEFAULT '',
    at                 INTEGER NOT NULL,
    overridden_verdict TEXT,
    artifact_sha256    TEXT
);
CREATE INDEX transitions_task ON transitions(task_id, id);
CREATE INDEX transitions_override ON transitions(at) WHERE outcome = 'override';

CREATE TABLE agent_runs (
    id                 INTEGER PRIMARY KEY,
    job_id             INTEGER NOT NULL REFERENCES jobs(id),
    task_id            INTEGER NOT NULL REFERENCES tasks(id),
    role               TEXT NOT NULL,
    model              TEXT,
    effort             TEXT,
    started_at         INTEGER NOT NULL,
    finished_at        INTEGER,
    duration_ms        INTEGER,
    exit_code          INTEGER,
    input_tokens       INTEGER,
    output_tokens      INTEGER,
    cache_read_tokens  INTEGER,
    cache_write_tokens INTEGER,
    cost_usd           REAL,
    session_id         TEXT
);
CREATE INDEX agent_runs_task ON agent_runs(task_id);
CREATE INDEX agent_runs_job ON agent_runs(job_id);

CREATE TABLE events (
    id          INTEGER PRIMARY KEY,
    source      TEXT NOT NULL,
    event       TEXT NOT NULL DEFAULT '',
    delivery_id TEXT NOT NULL,
    received_at INTEGER NOT NULL,
    headers     TEXT NOT NULL DEFAULT '{}',
    body        BLOB NOT NULL,
    outcome     TEXT NOT NULL,
    reason      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX events_delivery ON events(source, delivery_id);
CREATE INDEX events_outcome ON events(outcome, id);

CREATE TABLE ci_status (
    repo       TEXT NOT NULL,
    sha        TEXT NOT NULL,
    context    TEXT NOT NULL,
    state      TEXT NOT NULL,
    detail     TEXT NOT NULL DEFAULT '',
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (repo, sha, context)
) WITHOUT ROWID;

CREATE TABLE repo_freeze (
    repo      TEXT PRIMARY KEY,
    reason    TEXT NOT NULL,
    frozen_by TEXT NOT NULL,
    frozen_at INTEGER NOT NULL
);

CREATE TABLE transition_lease (
    task_id     INTEGER PRIMARY KEY REFERENCES tasks(id),
    owner_kind  TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    start_time  INTEGER NOT NULL,
    boot_id     TEXT NOT NULL,
    stage       TEXT NOT NULL,
    acquired_at INTEGER NOT NULL
);

CREATE TABLE merge_lease (
    repo        TEXT PRIMARY KEY,
    task_id     INTEGER REFERENCES tasks(id),
    owner_kind  TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    start_time  INTEGER NOT NULL,
    boot_id     TEXT NOT NULL,
    acquired_at INTEGER NOT NULL
);

CREATE TABLE outbox (
    id              INTEGER PRIMARY KEY,
    kind            TEXT NOT NULL,
    target          TEXT NOT NULL,
    payload         TEXT NOT NULL,
    idem_key        TEXT NOT NULL UNIQUE,
    status          TEXT NOT NULL DEFAULT 'pending',
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    last_error      TEXT,
    result          TEXT,
    created_at      INTEGER NOT NULL,
    done_at         INTEGER
);
CREATE INDEX outbox_pending ON outbox(next_attempt_at) WHERE status = 'pending';

CREATE TABLE coverage_baseline (
    repo       TEXT PRIMARY KEY,
    percent    REAL NOT NULL,
    updated_at INTEGER NOT NULL
);

CREATE TABLE lessons (
    id      INTEGER PRIMARY KEY,
    task_id INTEGER REFERENCES tasks(id),
    kind    TEXT NOT NULL,
    detail  TEXT NOT NULL,
    at      INTEGER NOT NULL
);

-- The dispatch breaker (design §4.2 rule 6): one row, open while `open_until` is in the future.
CREATE TABLE breaker (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    open_until INTEGER NOT NULL,
    reason     TEXT NOT NULL
);
"#,
    // 2: outbound integrations (design §9): the tracker issue a task mirrors, ordered outbox
    // delivery, the tracker's state names per project (a cache), the reconciler's forge polls.
    r#"
ALTER TABLE tasks ADD COLUMN tracker_ref TEXT;   -- the tracker's issue id (Plane), when known

-- Rows sharing a `seq_key` (one tracker issue) are delivered in id order: a newer row waits
-- while an older one is still pending.
ALTER TABLE outbox ADD COLUMN seq_key TEXT;
CREATE INDEX outbox_seq ON outbox(seq_key, id) WHERE status = 'pending';
CREATE INDEX outbox_failed ON outbox(id) WHERE status = 'failed';

CREATE TABLE tracker_states (
    project    TEXT NOT NULL,
    state_id   TEXT NOT NULL,
    name       TEXT NOT NULL,
    grp        TEXT NOT NULL,                -- backlog | unstarted | started | completed | cancelled
    is_default INTEGER NOT NULL DEFAULT 0,
    position   INTEGER NOT NULL,             -- the order the tracker lists them in
    fetched_at INTEGER NOT NULL,
    PRIMARY KEY (project, state_id)
) WITHOUT ROWID;

CREATE TABLE ci_polls (
    task_id   INTEGER PRIMARY KEY REFERENCES tasks(id),
    polled_at INTEGER NOT NULL
);
"#,
    // 3: the webhook inbox (design §8): the work item a delivery acted on, the size of the body as
    // received (a rejected body is stored cut), the row a replay re-drove, and the lookup of
    // `orch ingest --replay <delivery-id>` without a source.
    r#"
ALTER TABLE events ADD COLUMN work_item TEXT;
ALTER TABLE events ADD COLUMN body_size INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN replay_of INTEGER;
CREATE INDEX events_delivery_only ON events(delivery_id, id);
"#,
    // 4: crash safety. A lease of a long-lived owner (`orch serve`) expires unless renewed, so
    // one whose release failed is reclaimed although its owner lives on; the journal is looked
    // up per task (the stage-age alert fires once per visit).
    r#"
ALTER TABLE transition_lease ADD COLUMN expires_at INTEGER;   -- NULL: held while the owner lives
ALTER TABLE merge_lease ADD COLUMN expires_at INTEGER;
CREATE INDEX lessons_task ON lessons(task_id, kind, at);
-- Who is sending a claimed row: a drainer that died mid-send frees its rows at once instead of
-- after the claim's lease.
ALTER TABLE outbox ADD COLUMN claimed_pid INTEGER;
ALTER TABLE outbox ADD COLUMN claimed_start INTEGER;
ALTER TABLE outbox ADD COLUMN claimed_boot TEXT;
"#,
    // 5: webhook replays (design §8). Every inbox row keeps the digest of its body (hex SHA-256
    // of the source, a NUL and the raw body); a body accepted in the last 7 days makes a re-sent
    // copy a duplicate under any delivery id, or none. The digest lives on the inbox row rather
    // than in a table of its own, so nothing needs pruning: older rows stay in the inbox and the
    // lookup reads only the window. Rows from before this migration have none and never match.
    r#"
ALTER TABLE events ADD COLUMN body_sha256 TEXT;
CREATE INDEX events_body ON events(source, body_sha256, received_at)
    WHERE outcome IN ('processed', 'ignored');
"#,
    // 6: the last mile (design §7). One row per release step of one visit of a stage (`visit` is
    // the history row that entered it): the security scan, the merge gate, coverage, the deploy
    // hook (`initiated` before the hook starts, its outcome after) and the merge with its proof.
    // The gates read these rows, never the reports alone, and a re-drive reads them to never
    // repeat an irreversible step. A merge lease may be held by a task across jobs.
    r#"
CREATE TABLE release_steps (
    id      INTEGER PRIMARY KEY,
    task_id INTEGER NOT NULL REFERENCES tasks(id),
    visit   INTEGER NOT NULL,
    stage   TEXT NOT NULL,
    step    TEXT NOT NULL,
    status  TEXT NOT NULL,
    sha     TEXT,
    value   REAL,
    detail  TEXT NOT NULL DEFAULT '',
    job_id  INTEGER,
    at      INTEGER NOT NULL,
    UNIQUE (task_id, visit, step)
);
CREATE INDEX release_steps_proof ON release_steps(task_id) WHERE step = 'merge' AND status = 'pass';
"#,
    // 7: the person behind an operator's gesture (`--by`, `SUDO_USER`, `USER`): the `actor`
    // column says `operator` for every person, this one says who.
    // An alert raised where no one reads the log (a supervisor writes to its job log) is
    // journaled `alert-unrelayed` until the next tick repeats it in the journal.
    r#"
ALTER TABLE transitions ADD COLUMN by_person TEXT;
CREATE INDEX lessons_unrelayed ON lessons(id) WHERE kind = 'alert-unrelayed';
"#,
    // 8: what each agent run's end was (`limit`, `outage`, `environment`, `failed`; NULL for a
    // success, and for rows from before): a job's outages are counted against its cap, and the
    // last runs across jobs say whether the provider is down (design §4.4).
    r#"
ALTER TABLE agent_runs ADD COLUMN fault TEXT;
"#,
];
