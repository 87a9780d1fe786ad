"""SQLite schema and its migrations, applied in order of schema version (``user_version``)."""

from __future__ import annotations

SCHEMA_VERSION = 1

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
}
