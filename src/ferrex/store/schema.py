"""SQLite schema and its migrations, applied in order of schema version (``user_version``)."""

from __future__ import annotations

SCHEMA_VERSION = 5

MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );

    CREATE TABLE memories (
        id                  TEXT PRIMARY KEY,
        namespace           TEXT NOT NULL,
        type                TEXT NOT NULL CHECK (type IN ('episodic', 'semantic', 'procedural')),
        content             TEXT,
        subject             TEXT,
        predicate           TEXT,
        predicate_canonical TEXT,
        object              TEXT,
        subject_entity_id   INTEGER,
        name                TEXT,
        conditions          TEXT,
        steps               TEXT,
        version             INTEGER,
        confidence          REAL NOT NULL DEFAULT 1.0,
        source              TEXT,
        context             TEXT,
        created_at          TEXT NOT NULL,
        updated_at          TEXT NOT NULL,
        event_time          TEXT NOT NULL,
        t_valid             TEXT,
        t_invalid           TEXT,
        superseded_by       TEXT,
        last_accessed       TEXT,
        last_validated      TEXT,
        access_count        INTEGER NOT NULL DEFAULT 0,
        pinned              INTEGER NOT NULL DEFAULT 0,
        multi_valued        INTEGER NOT NULL DEFAULT 0,
        chunk_count         INTEGER NOT NULL DEFAULT 1,
        embed_model         TEXT
    );
    CREATE INDEX idx_memories_ns_type ON memories (namespace, type, created_at);
    CREATE INDEX idx_memories_ns_created ON memories (namespace, created_at);
    CREATE INDEX idx_memories_fact ON memories (namespace, subject_entity_id, predicate_canonical)
        WHERE type = 'semantic';
    CREATE INDEX idx_memories_procedure ON memories (namespace, name, version)
        WHERE type = 'procedural';
    CREATE INDEX idx_memories_source ON memories (source) WHERE source IS NOT NULL;

    CREATE TABLE entities (
        id           INTEGER PRIMARY KEY,
        namespace    TEXT NOT NULL,
        name         TEXT NOT NULL,
        display_name TEXT NOT NULL,
        entity_type  TEXT,
        embedding    BLOB,
        created_at   TEXT NOT NULL,
        updated_at   TEXT NOT NULL,
        UNIQUE (namespace, name)
    );

    CREATE TABLE entity_aliases (
        namespace  TEXT NOT NULL,
        alias      TEXT NOT NULL,
        entity_id  INTEGER NOT NULL REFERENCES entities (id) ON DELETE CASCADE,
        method     TEXT NOT NULL,
        score      REAL NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (namespace, alias)
    );
    CREATE INDEX idx_aliases_entity ON entity_aliases (entity_id);

    CREATE TABLE alias_candidates (
        namespace  TEXT NOT NULL,
        name       TEXT NOT NULL,
        entity_id  INTEGER NOT NULL REFERENCES entities (id) ON DELETE CASCADE,
        score      REAL NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (namespace, name, entity_id)
    );

    CREATE TABLE memory_entities (
        memory_id TEXT NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
        entity_id INTEGER NOT NULL REFERENCES entities (id) ON DELETE CASCADE,
        PRIMARY KEY (memory_id, entity_id)
    );
    CREATE INDEX idx_memory_entities_entity ON memory_entities (entity_id);

    -- Outbox of the dual write: a row per vector-index change not yet applied.
    CREATE TABLE journal (
        seq        INTEGER PRIMARY KEY AUTOINCREMENT,
        op         TEXT NOT NULL CHECK (op IN ('index', 'payload', 'delete')),
        memory_id  TEXT NOT NULL,
        namespace  TEXT NOT NULL,
        created_at TEXT NOT NULL
    );

    -- Audit log of every state transition (supersede, duplicate, version, forget, evict...).
    CREATE TABLE audit (
        seq       INTEGER PRIMARY KEY AUTOINCREMENT,
        at        TEXT NOT NULL,
        namespace TEXT NOT NULL,
        action    TEXT NOT NULL,
        memory_id TEXT,
        other_id  TEXT,
        detail    TEXT
    );
    CREATE INDEX idx_audit_ns_action ON audit (namespace, action, at);
    """,
    2: """
    -- Counters kept on write (by triggers, in the writing transaction) so that stats never
    -- scans: memories per namespace / type / current / pinned, and the current memories per
    -- namespace / type / confidence / hour of creation / hour of validation (staleness and
    -- review depend on those alone; core/lifecycle/attention.py counts them bucket by bucket).
    CREATE TABLE memory_counts (
        namespace TEXT NOT NULL,
        type      TEXT NOT NULL,
        current   INTEGER NOT NULL,
        pinned    INTEGER NOT NULL,
        n         INTEGER NOT NULL,
        PRIMARY KEY (namespace, type, current, pinned)
    ) WITHOUT ROWID;

    CREATE TABLE review_buckets (
        namespace      TEXT NOT NULL,
        type           TEXT NOT NULL,
        confidence     REAL NOT NULL,
        created_hour   TEXT NOT NULL,
        validated_hour TEXT NOT NULL,
        n              INTEGER NOT NULL,
        PRIMARY KEY (namespace, type, confidence, created_hour, validated_hour)
    ) WITHOUT ROWID;

    CREATE TRIGGER memories_counted_insert AFTER INSERT ON memories BEGIN
        INSERT INTO memory_counts (namespace, type, current, pinned, n)
        VALUES (NEW.namespace, NEW.type, NEW.t_invalid IS NULL, NEW.pinned, 1)
        ON CONFLICT (namespace, type, current, pinned) DO UPDATE SET n = n + 1;
    END;

    CREATE TRIGGER memories_counted_delete AFTER DELETE ON memories BEGIN
        UPDATE memory_counts SET n = n - 1 WHERE namespace = OLD.namespace
            AND type = OLD.type
            AND current = (OLD.t_invalid IS NULL)
            AND pinned = OLD.pinned;
        DELETE FROM memory_counts WHERE n <= 0
            AND namespace = OLD.namespace
            AND type = OLD.type
            AND current = (OLD.t_invalid IS NULL)
            AND pinned = OLD.pinned;
    END;

    CREATE TRIGGER memories_counted_update
    AFTER UPDATE OF t_invalid, pinned, type, namespace ON memories BEGIN
        UPDATE memory_counts SET n = n - 1 WHERE namespace = OLD.namespace
            AND type = OLD.type
            AND current = (OLD.t_invalid IS NULL)
            AND pinned = OLD.pinned;
        DELETE FROM memory_counts WHERE n <= 0
            AND namespace = OLD.namespace
            AND type = OLD.type
            AND current = (OLD.t_invalid IS NULL)
            AND pinned = OLD.pinned;
        INSERT INTO memory_counts (namespace, type, current, pinned, n)
        VALUES (NEW.namespace, NEW.type, NEW.t_invalid IS NULL, NEW.pinned, 1)
        ON CONFLICT (namespace, type, current, pinned) DO UPDATE SET n = n + 1;
    END;

    CREATE TRIGGER memories_review_insert AFTER INSERT ON memories
    WHEN NEW.t_invalid IS NULL BEGIN
        INSERT INTO review_buckets (namespace, type, confidence, created_hour, validated_hour, n)
        VALUES (NEW.namespace, NEW.type, NEW.confidence, substr(NEW.created_at, 1, 13),
                coalesce(substr(NEW.last_validated, 1, 13), ''), 1)
        ON CONFLICT (namespace, type, confidence, created_hour, validated_hour)
        DO UPDATE SET n = n + 1;
    END;

    CREATE TRIGGER memories_review_delete AFTER DELETE ON memories
    WHEN OLD.t_invalid IS NULL BEGIN
        UPDATE review_buckets SET n = n - 1 WHERE namespace = OLD.namespace
            AND type = OLD.type
            AND confidence = OLD.confidence
            AND created_hour = substr(OLD.created_at, 1, 13)
            AND validated_hour = coalesce(substr(OLD.last_validated, 1, 13), '');
        DELETE FROM review_buckets WHERE n <= 0
            AND namespace = OLD.namespace
            AND type = OLD.type
            AND confidence = OLD.confidence
            AND created_hour = substr(OLD.created_at, 1, 13)
            AND validated_hour = coalesce(substr(OLD.last_validated, 1, 13), '');
    END;

    CREATE TRIGGER memories_review_update_old
    AFTER UPDATE OF t_invalid, last_validated, confidence, created_at, type, namespace ON memories
    WHEN OLD.t_invalid IS NULL BEGIN
        UPDATE review_buckets SET n = n - 1 WHERE namespace = OLD.namespace
            AND type = OLD.type
            AND confidence = OLD.confidence
            AND created_hour = substr(OLD.created_at, 1, 13)
            AND validated_hour = coalesce(substr(OLD.last_validated, 1, 13), '');
        DELETE FROM review_buckets WHERE n <= 0
            AND namespace = OLD.namespace
            AND type = OLD.type
            AND confidence = OLD.confidence
            AND created_hour = substr(OLD.created_at, 1, 13)
            AND validated_hour = coalesce(substr(OLD.last_validated, 1, 13), '');
    END;

    CREATE TRIGGER memories_review_update_new
    AFTER UPDATE OF t_invalid, last_validated, confidence, created_at, type, namespace ON memories
    WHEN NEW.t_invalid IS NULL BEGIN
        INSERT INTO review_buckets (namespace, type, confidence, created_hour, validated_hour, n)
        VALUES (NEW.namespace, NEW.type, NEW.confidence, substr(NEW.created_at, 1, 13),
                coalesce(substr(NEW.last_validated, 1, 13), ''), 1)
        ON CONFLICT (namespace, type, confidence, created_hour, validated_hour)
        DO UPDATE SET n = n + 1;
    END;

    INSERT INTO memory_counts (namespace, type, current, pinned, n)
    SELECT namespace, type, t_invalid IS NULL, pinned, COUNT(*) FROM memories
    GROUP BY 1, 2, 3, 4;

    INSERT INTO review_buckets (namespace, type, confidence, created_hour, validated_hour, n)
    SELECT namespace, type, confidence, substr(created_at, 1, 13),
           coalesce(substr(last_validated, 1, 13), ''), COUNT(*)
    FROM memories WHERE t_invalid IS NULL GROUP BY 1, 2, 3, 4, 5;

    -- The contradiction count walks this covering index, never the table.
    CREATE INDEX idx_memories_current_single_facts
        ON memories (namespace, subject_entity_id, predicate_canonical, lower(trim(object)))
        WHERE type = 'semantic' AND t_invalid IS NULL AND multi_valued = 0
        AND subject_entity_id IS NOT NULL;
    """,
    3: """
    -- Exactly-once calls between ferrex processes: a write a peer forwards over the engine
    -- socket carries a key, recorded here with the answer in the write's own transaction; a
    -- retry of that call (its engine died before answering) gets this answer back.
    CREATE TABLE call_keys (
        key        TEXT PRIMARY KEY,
        op         TEXT NOT NULL,
        namespace  TEXT NOT NULL,
        answer     TEXT NOT NULL,
        created_at TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX idx_call_keys_created ON call_keys (created_at);
    """,
    4: """
    -- Which memories' text and which audit details were written, in order (``doctor`` scans
    -- for secrets only what changed since its last scan): recorded only once a doctor has
    -- asked for it (the meta key), and forgotten up to what a doctor has scanned. Insertion
    -- and in-place rewrites alike (a redaction, an INSERT OR REPLACE); a rowid is not a
    -- position (SQLite reuses the highest one after a delete, VACUUM may renumber them).
    CREATE TABLE text_writes (
        seq       INTEGER PRIMARY KEY AUTOINCREMENT,
        memory_id TEXT,
        audit_seq INTEGER
    );

    CREATE TRIGGER text_writes_insert AFTER INSERT ON memories
    WHEN EXISTS (SELECT 1 FROM meta WHERE key = 'text_writes') BEGIN
        INSERT INTO text_writes (memory_id) VALUES (NEW.id);
    END;

    CREATE TRIGGER text_writes_update
    AFTER UPDATE OF id, type, content, subject, predicate, object, name, conditions, steps,
        source, context ON memories
    WHEN EXISTS (SELECT 1 FROM meta WHERE key = 'text_writes') BEGIN
        INSERT INTO text_writes (memory_id) VALUES (NEW.id);
    END;

    CREATE TRIGGER text_writes_audit AFTER UPDATE OF detail ON audit
    WHEN EXISTS (SELECT 1 FROM meta WHERE key = 'text_writes') BEGIN
        INSERT INTO text_writes (audit_seq) VALUES (NEW.seq);
    END;
    """,
    5: """
    -- Which facts superseded an earlier value (recall's current-state rule; forget's
    -- predecessors): only the rows that were superseded are in it.
    CREATE INDEX idx_memories_superseded_by ON memories (superseded_by)
        WHERE superseded_by IS NOT NULL;
    """,
}
