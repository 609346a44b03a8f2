//! The records: versions, decisions, installations, agents, events and the intent journal,
//! behind one interface ([`Records`] and its transaction [`Tx`]).
//!
//! Every statement is plain SQL that PostgreSQL runs unchanged apart from the placeholder
//! spelling (`?` here, `$n` there): no `AUTOINCREMENT`, no `INSERT OR REPLACE`, no `rowid`;
//! sequence numbers are taken as `MAX(seq) + 1` inside the writing transaction, which the store
//! lock already serialises. SQLite runs in WAL mode with a busy timeout, so a reader never
//! blocks a writer and a second writer waits instead of failing.
//!
//! This module never touches the filesystem beyond the database file, and never stores a
//! secret: callers hand it URLs already stripped of userinfo.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::Serialize;
use serde_json::Value;

use super::{Error, Kind};

/// The schema versions, in order; `migrate` applies the ones a database has not seen.
const MIGRATIONS: &[&str] = &[
    // 1: the first schema.
    "CREATE TABLE versions (
        digest TEXT PRIMARY KEY,
        skill TEXT NOT NULL,
        state TEXT NOT NULL,
        stored INTEGER NOT NULL,
        decided_by TEXT NOT NULL,
        rule TEXT,
        findings TEXT NOT NULL,
        change_kind TEXT NOT NULL,
        review_sha256 TEXT NOT NULL,
        review_summary TEXT NOT NULL,
        agents TEXT NOT NULL,
        provenance TEXT NOT NULL,
        withdrawn_reason TEXT,
        seq BIGINT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE INDEX versions_by_skill ON versions (skill, seq);
    CREATE TABLE agents (name TEXT PRIMARY KEY, dir TEXT NOT NULL);
    CREATE TABLE installs (
        agent TEXT NOT NULL,
        skill TEXT NOT NULL,
        digest TEXT NOT NULL,
        PRIMARY KEY (agent, skill)
    );
    CREATE INDEX installs_by_digest ON installs (digest);
    CREATE TABLE events (
        seq BIGINT PRIMARY KEY,
        time TEXT NOT NULL,
        skill TEXT NOT NULL,
        digest TEXT,
        kind TEXT NOT NULL,
        actor TEXT NOT NULL,
        detail TEXT NOT NULL
    );
    CREATE INDEX events_by_digest ON events (digest, seq);
    CREATE TABLE intents (seq BIGINT PRIMARY KEY, payload TEXT NOT NULL, created_at TEXT NOT NULL);",
    // 2: `list` and `status` read every version; this index holds all they select, so they
    // never read the large provenance column (10,000 versions: the index, not 20 MB of rows).
    "CREATE INDEX versions_listed ON versions (skill, seq, digest, state, stored, decided_by, change_kind, created_at, withdrawn_reason);",
];

/// Where a version stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Verified and in the store, waiting for a person's decision; never activated.
    Pending,
    Approved,
    Denied,
    /// Can never be activated again.
    Withdrawn,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Approved => "approved",
            State::Denied => "denied",
            State::Withdrawn => "withdrawn",
        }
    }

    fn parse(s: &str) -> Result<Self, Error> {
        Ok(match s {
            "pending" => State::Pending,
            "approved" => State::Approved,
            "denied" => State::Denied,
            "withdrawn" => State::Withdrawn,
            other => {
                return Err(Error::new(
                    Kind::Operational,
                    format!("corrupt records: unknown version state {other:?}"),
                ));
            }
        })
    }
}

/// One version of a skill.
#[derive(Debug, Clone, Serialize)]
pub struct Version {
    pub digest: String,
    pub skill: String,
    pub state: State,
    /// Its tree is in the store (false once garbage-collected, or for a policy denial).
    pub stored: bool,
    /// `policy` or `person:NAME`.
    pub decided_by: String,
    /// The policy rule that approved or denied it.
    pub rule: Option<String>,
    /// What needs (or needed) a person's decision.
    pub findings: Vec<String>,
    /// `first`, `content_only` or `needs_review` against the version it updated.
    pub change: String,
    pub review_sha256: String,
    pub review_summary: String,
    /// The agents the install asked for (activated on approval).
    pub agents: Vec<String>,
    pub provenance: Value,
    pub withdrawn_reason: Option<String>,
    pub seq: i64,
    pub created_at: String,
}

/// A version as `list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    pub digest: String,
    pub skill: String,
    pub state: State,
    pub stored: bool,
    pub decided_by: String,
    pub change: String,
    pub seq: i64,
    pub created_at: String,
    pub withdrawn_reason: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Install {
    pub agent: String,
    pub skill: String,
    pub digest: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub seq: i64,
    pub time: String,
    pub skill: String,
    pub digest: Option<String>,
    pub kind: String,
    pub actor: String,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Intent {
    pub seq: i64,
    pub payload: Value,
    pub created_at: String,
}

/// The records of one store.
pub struct Records {
    conn: Connection,
}

fn db_err(e: rusqlite::Error) -> Error {
    let kind = match &e {
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(
                f.code,
                rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen
            ) =>
        {
            return Error::new(
                Kind::Operational,
                format!("records: {e} (is the store on a read-only filesystem?)"),
            );
        }
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(
                f.code,
                rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt
            ) =>
        {
            return Error::new(
                Kind::Operational,
                format!(
                    "records: {e}: the store's records.db is corrupt; restore it from a backup or move the store away"
                ),
            );
        }
        _ => Kind::Operational,
    };
    Error::new(kind, format!("records: {e}"))
}

fn json_err(e: serde_json::Error) -> Error {
    Error::new(Kind::Operational, format!("corrupt records: {e}"))
}

impl Records {
    /// Open (creating if needed) the database and bring its schema up to date.
    pub fn open(path: &Path) -> Result<Self, Error> {
        let conn = Connection::open(path).map_err(db_err)?;
        conn.busy_timeout(Duration::from_secs(60)).map_err(db_err)?;
        // WAL: readers see the last committed state while a writer works. NORMAL: a commit is
        // atomic and survives a killed process (the crash model the journal is built for); a
        // power loss may lose the newest commits, never consistency, and the next command's
        // recovery reconciles the filesystem with what the records kept.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(db_err)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(db_err)?;
        // Keep the WAL between commands instead of checkpointing and deleting it on every
        // close: each command is short, and SQLite checkpoints on its own as the WAL grows.
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )
        .map_err(db_err)?;
        let mut r = Records { conn };
        r.migrate()?;
        Ok(r)
    }

    fn migrate(&mut self) -> Result<(), Error> {
        // The common case, an up-to-date schema, takes no write lock.
        let current: Result<Option<i64>, _> =
            self.conn
                .query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0));
        if let Ok(Some(v)) = current
            && usize::try_from(v).is_ok_and(|v| v == MIGRATIONS.len())
        {
            return Ok(());
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db_err)?;
        tx.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
            [],
        )
        .map_err(db_err)?;
        let have: Option<i64> = tx
            .query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0))
            .map_err(db_err)?;
        let have = usize::try_from(have.unwrap_or(0)).unwrap_or(0);
        if have > MIGRATIONS.len() {
            return Err(Error::new(
                Kind::Operational,
                format!(
                    "the records use schema version {have}; this skillbox knows up to {}: use a newer skillbox",
                    MIGRATIONS.len()
                ),
            ));
        }
        for (i, m) in MIGRATIONS.iter().enumerate().skip(have) {
            tx.execute_batch(m).map_err(db_err)?;
            tx.execute(
                "INSERT INTO schema_version (version) VALUES (?)",
                params![i64::try_from(i + 1).unwrap_or(i64::MAX)],
            )
            .map_err(db_err)?;
        }
        tx.commit().map_err(db_err)
    }

    /// Run `f` in one write transaction; it commits only if `f` succeeds.
    pub fn write<T>(&mut self, f: impl FnOnce(&Tx<'_>) -> Result<T, Error>) -> Result<T, Error> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db_err)?;
        let out = f(&Tx { tx: &tx })?;
        tx.commit().map_err(db_err)?;
        Ok(out)
    }

    /// Run `f` over one consistent snapshot (a read transaction).
    pub fn read<T>(&mut self, f: impl FnOnce(&Tx<'_>) -> Result<T, Error>) -> Result<T, Error> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .map_err(db_err)?;
        let out = f(&Tx { tx: &tx })?;
        tx.finish().map_err(db_err)?;
        Ok(out)
    }
}

/// One transaction over the records.
pub struct Tx<'a> {
    tx: &'a rusqlite::Transaction<'a>,
}

const VERSION_COLUMNS: &str = "digest, skill, state, stored, decided_by, rule, findings, change_kind, review_sha256, review_summary, agents, provenance, withdrawn_reason, seq, created_at";

/// A `versions` row as stored, before its JSON columns are decoded.
struct RawVersion {
    digest: String,
    skill: String,
    state: String,
    stored: i64,
    decided_by: String,
    rule: Option<String>,
    findings: String,
    change: String,
    review_sha256: String,
    review_summary: String,
    agents: String,
    provenance: String,
    withdrawn_reason: Option<String>,
    seq: i64,
    created_at: String,
}

fn raw_version(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawVersion> {
    Ok(RawVersion {
        digest: r.get(0)?,
        skill: r.get(1)?,
        state: r.get(2)?,
        stored: r.get(3)?,
        decided_by: r.get(4)?,
        rule: r.get(5)?,
        findings: r.get(6)?,
        change: r.get(7)?,
        review_sha256: r.get(8)?,
        review_summary: r.get(9)?,
        agents: r.get(10)?,
        provenance: r.get(11)?,
        withdrawn_reason: r.get(12)?,
        seq: r.get(13)?,
        created_at: r.get(14)?,
    })
}

impl RawVersion {
    fn decode(self) -> Result<Version, Error> {
        Ok(Version {
            state: State::parse(&self.state)?,
            findings: serde_json::from_str(&self.findings).map_err(json_err)?,
            agents: serde_json::from_str(&self.agents).map_err(json_err)?,
            provenance: serde_json::from_str(&self.provenance).map_err(json_err)?,
            digest: self.digest,
            skill: self.skill,
            stored: self.stored != 0,
            decided_by: self.decided_by,
            rule: self.rule,
            change: self.change,
            review_sha256: self.review_sha256,
            review_summary: self.review_summary,
            withdrawn_reason: self.withdrawn_reason,
            seq: self.seq,
            created_at: self.created_at,
        })
    }
}

impl Tx<'_> {
    fn next_seq(&self, table: &str) -> Result<i64, Error> {
        let sql = format!("SELECT COALESCE(MAX(seq), 0) + 1 FROM {table}");
        self.tx.query_row(&sql, [], |r| r.get(0)).map_err(db_err)
    }

    fn versions_where(
        &self,
        clause: &str,
        args: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<Version>, Error> {
        let sql = format!("SELECT {VERSION_COLUMNS} FROM versions {clause}");
        let mut st = self.tx.prepare_cached(&sql).map_err(db_err)?;
        let rows = st.query_map(args, raw_version).map_err(db_err)?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row.map_err(db_err)?.decode()?);
        }
        Ok(out)
    }

    pub fn version(&self, digest: &str) -> Result<Option<Version>, Error> {
        Ok(self
            .versions_where("WHERE digest = ?", &[&digest])?
            .into_iter()
            .next())
    }

    /// Versions of one skill whose digest starts with `prefix` (a full digest is its own prefix).
    pub fn versions_matching(&self, skill: &str, prefix: &str) -> Result<Vec<Version>, Error> {
        // A range over the primary key (hex sorts below 'g'), so the index answers it.
        let upper = format!("{prefix}g");
        let mut found = self.versions_where(
            "WHERE digest >= ? AND digest < ? ORDER BY seq",
            &[&prefix, &upper],
        )?;
        found.retain(|v| v.skill == skill);
        Ok(found)
    }

    /// Every version of `skill`, oldest first.
    pub fn versions_of(&self, skill: &str) -> Result<Vec<Version>, Error> {
        self.versions_where("WHERE skill = ? ORDER BY seq", &[&skill])
    }

    pub fn all_versions(&self) -> Result<Vec<Version>, Error> {
        self.versions_where("ORDER BY skill, seq", &[])
    }

    /// The newest approved, stored version of `skill` older than `before` (by store order).
    pub fn previous_approved(&self, skill: &str, before: i64) -> Result<Option<Version>, Error> {
        Ok(self
            .versions_where(
                "WHERE skill = ? AND state = 'approved' AND stored = 1 AND seq < ? ORDER BY seq DESC LIMIT 1",
                &[&skill, &before],
            )?
            .into_iter()
            .next())
    }

    /// The digest of the newest version of `skill`.
    pub fn latest_digest(&self, skill: &str) -> Result<Option<String>, Error> {
        self.tx
            .query_row(
                "SELECT digest FROM versions WHERE skill = ? ORDER BY seq DESC LIMIT 1",
                params![skill],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_err)
    }

    /// Digests of every version whose tree is in the store.
    pub fn stored_digests(&self) -> Result<Vec<String>, Error> {
        let mut st = self
            .tx
            .prepare_cached("SELECT digest FROM versions WHERE stored = 1")
            .map_err(db_err)?;
        let rows = st.query_map([], |r| r.get(0)).map_err(db_err)?;
        rows.collect::<Result<_, _>>().map_err(db_err)
    }

    /// Every version without its JSON columns (what `list` shows), by skill then store order.
    pub fn version_list(&self) -> Result<Vec<Listed>, Error> {
        let mut st = self
            .tx
            .prepare_cached(
                "SELECT digest, skill, state, stored, decided_by, change_kind, seq, created_at, withdrawn_reason FROM versions ORDER BY skill, seq",
            )
            .map_err(db_err)?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    Listed {
                        digest: r.get(0)?,
                        skill: r.get(1)?,
                        state: State::Pending,
                        stored: r.get::<_, i64>(3)? != 0,
                        decided_by: r.get(4)?,
                        change: r.get(5)?,
                        seq: r.get(6)?,
                        created_at: r.get(7)?,
                        withdrawn_reason: r.get(8)?,
                    },
                    r.get::<_, String>(2)?,
                ))
            })
            .map_err(db_err)?;
        let mut out = Vec::new();
        for row in rows {
            let (mut l, state) = row.map_err(db_err)?;
            l.state = State::parse(&state)?;
            out.push(l);
        }
        Ok(out)
    }

    pub fn insert_version(&self, v: &Version) -> Result<i64, Error> {
        let seq = self.next_seq("versions")?;
        let j = |x: &dyn erased::Ser| x.to_json();
        self.tx
            .execute(
                &format!("INSERT INTO versions ({VERSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                params![
                    v.digest,
                    v.skill,
                    v.state.as_str(),
                    i64::from(v.stored),
                    v.decided_by,
                    v.rule,
                    j(&v.findings)?,
                    v.change,
                    v.review_sha256,
                    v.review_summary,
                    j(&v.agents)?,
                    j(&v.provenance)?,
                    v.withdrawn_reason,
                    seq,
                    v.created_at,
                ],
            )
            .map_err(db_err)?;
        Ok(seq)
    }

    /// Insert `v`, or, for a digest already recorded (collected, or denied by an earlier
    /// policy), record the new intake's decision over the old one; history stays in events.
    pub fn upsert_version(&self, v: &Version) -> Result<(), Error> {
        if self.version(&v.digest)?.is_none() {
            return self.insert_version(v).map(|_| ());
        }
        self.tx
            .execute(
                "UPDATE versions SET state = ?, stored = ?, decided_by = ?, rule = ?, findings = ?, change_kind = ?, agents = ? WHERE digest = ?",
                params![
                    v.state.as_str(),
                    i64::from(v.stored),
                    v.decided_by,
                    v.rule,
                    erased::Ser::to_json(&v.findings)?,
                    v.change,
                    erased::Ser::to_json(&v.agents)?,
                    v.digest,
                ],
            )
            .map_err(db_err)?;
        Ok(())
    }

    pub fn set_state(
        &self,
        digest: &str,
        state: State,
        decided_by: &str,
        rule: Option<&str>,
    ) -> Result<(), Error> {
        self.tx
            .execute(
                "UPDATE versions SET state = ?, decided_by = ?, rule = ? WHERE digest = ?",
                params![state.as_str(), decided_by, rule, digest],
            )
            .map_err(db_err)?;
        Ok(())
    }

    pub fn withdraw(&self, digest: &str, reason: &str) -> Result<(), Error> {
        self.tx
            .execute(
                "UPDATE versions SET state = 'withdrawn', withdrawn_reason = ? WHERE digest = ?",
                params![reason, digest],
            )
            .map_err(db_err)?;
        Ok(())
    }

    pub fn set_stored(&self, digest: &str, stored: bool) -> Result<(), Error> {
        self.tx
            .execute(
                "UPDATE versions SET stored = ? WHERE digest = ?",
                params![i64::from(stored), digest],
            )
            .map_err(db_err)?;
        Ok(())
    }

    // ------------------------------------------------------------ agents

    pub fn agent_dir(&self, name: &str) -> Result<Option<String>, Error> {
        self.tx
            .query_row(
                "SELECT dir FROM agents WHERE name = ?",
                params![name],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_err)
    }

    pub fn agents(&self) -> Result<Vec<(String, String)>, Error> {
        let mut st = self
            .tx
            .prepare_cached("SELECT name, dir FROM agents ORDER BY name")
            .map_err(db_err)?;
        let rows = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(db_err)?;
        rows.collect::<Result<_, _>>().map_err(db_err)
    }

    pub fn add_agent(&self, name: &str, dir: &str) -> Result<(), Error> {
        self.tx
            .execute(
                "INSERT INTO agents (name, dir) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
                params![name, dir],
            )
            .map_err(db_err)?;
        Ok(())
    }

    // ------------------------------------------------------------ installs

    fn installs_where(
        &self,
        clause: &str,
        args: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<Install>, Error> {
        let sql = format!("SELECT agent, skill, digest FROM installs {clause}");
        let mut st = self.tx.prepare_cached(&sql).map_err(db_err)?;
        let rows = st
            .query_map(args, |r| {
                Ok(Install {
                    agent: r.get(0)?,
                    skill: r.get(1)?,
                    digest: r.get(2)?,
                })
            })
            .map_err(db_err)?;
        rows.collect::<Result<_, _>>().map_err(db_err)
    }

    pub fn installs(&self) -> Result<Vec<Install>, Error> {
        self.installs_where("ORDER BY skill, agent", &[])
    }

    pub fn installs_of(&self, skill: &str) -> Result<Vec<Install>, Error> {
        self.installs_where("WHERE skill = ? ORDER BY agent", &[&skill])
    }

    pub fn installs_using(&self, digest: &str) -> Result<Vec<Install>, Error> {
        self.installs_where("WHERE digest = ? ORDER BY agent", &[&digest])
    }

    pub fn install(&self, agent: &str, skill: &str) -> Result<Option<String>, Error> {
        self.tx
            .query_row(
                "SELECT digest FROM installs WHERE agent = ? AND skill = ?",
                params![agent, skill],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_err)
    }

    /// Point `agent`'s `skill` at `digest`, or remove the installation (`None`).
    pub fn set_install(&self, agent: &str, skill: &str, digest: Option<&str>) -> Result<(), Error> {
        match digest {
            Some(d) => self.tx.execute(
                "INSERT INTO installs (agent, skill, digest) VALUES (?, ?, ?)
                 ON CONFLICT (agent, skill) DO UPDATE SET digest = excluded.digest",
                params![agent, skill, d],
            ),
            None => self.tx.execute(
                "DELETE FROM installs WHERE agent = ? AND skill = ?",
                params![agent, skill],
            ),
        }
        .map_err(db_err)?;
        Ok(())
    }

    // ------------------------------------------------------------ events

    pub fn event(
        &self,
        time: &str,
        skill: &str,
        digest: Option<&str>,
        kind: &str,
        actor: &str,
        detail: &str,
    ) -> Result<(), Error> {
        let seq = self.next_seq("events")?;
        self.tx
            .execute(
                "INSERT INTO events (seq, time, skill, digest, kind, actor, detail) VALUES (?, ?, ?, ?, ?, ?, ?)",
                params![seq, time, skill, digest, kind, actor, detail],
            )
            .map_err(db_err)?;
        Ok(())
    }

    /// The events of one version of `skill`, oldest first.
    pub fn events_of(&self, skill: &str, digest: &str) -> Result<Vec<Event>, Error> {
        let mut st = self
            .tx
            .prepare_cached(
                "SELECT seq, time, skill, digest, kind, actor, detail FROM events WHERE digest = ? AND skill = ? ORDER BY seq",
            )
            .map_err(db_err)?;
        let rows = st
            .query_map(params![digest, skill], |r| {
                Ok(Event {
                    seq: r.get(0)?,
                    time: r.get(1)?,
                    skill: r.get(2)?,
                    digest: r.get(3)?,
                    kind: r.get(4)?,
                    actor: r.get(5)?,
                    detail: r.get(6)?,
                })
            })
            .map_err(db_err)?;
        rows.collect::<Result<_, _>>().map_err(db_err)
    }

    // ------------------------------------------------------------ intents

    pub fn add_intent(&self, payload: &Value, time: &str) -> Result<i64, Error> {
        let seq = self.next_seq("intents")?;
        self.tx
            .execute(
                "INSERT INTO intents (seq, payload, created_at) VALUES (?, ?, ?)",
                params![seq, payload.to_string(), time],
            )
            .map_err(db_err)?;
        Ok(seq)
    }

    pub fn intents(&self) -> Result<Vec<Intent>, Error> {
        let mut st = self
            .tx
            .prepare_cached("SELECT seq, payload, created_at FROM intents ORDER BY seq")
            .map_err(db_err)?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .map_err(db_err)?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, payload, created_at) = row.map_err(db_err)?;
            out.push(Intent {
                seq,
                payload: serde_json::from_str(&payload).map_err(json_err)?,
                created_at,
            });
        }
        Ok(out)
    }

    pub fn remove_intent(&self, seq: i64) -> Result<(), Error> {
        self.tx
            .execute("DELETE FROM intents WHERE seq = ?", params![seq])
            .map_err(db_err)?;
        Ok(())
    }
}

mod erased {
    use super::{Error, json_err};

    /// Serialise a column value as JSON text.
    pub trait Ser {
        fn to_json(&self) -> Result<String, Error>;
    }

    impl<T: serde::Serialize> Ser for T {
        fn to_json(&self) -> Result<String, Error> {
            serde_json::to_string(self).map_err(json_err)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_apply_once_in_order_and_a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("records.db");
        let mut r = Records::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let versions: Vec<i64> = r
            .conn
            .prepare("SELECT version FROM schema_version ORDER BY version")
            .and_then(|mut s| s.query_map([], |row| row.get(0))?.collect())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(versions, [1, 2]);
        r.write(|tx| tx.add_agent("a", "/x"))
            .unwrap_or_else(|e| panic!("{e}"));
        drop(r);
        // Reopening applies nothing again and keeps the data.
        let mut r = Records::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let dir_of = r
            .read(|tx| tx.agent_dir("a"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(dir_of.as_deref(), Some("/x"));
        r.conn
            .execute("INSERT INTO schema_version (version) VALUES (99)", [])
            .unwrap_or_else(|e| panic!("{e}"));
        drop(r);
        let e = Records::open(&path)
            .err()
            .map(|e| e.message)
            .unwrap_or_default();
        assert!(e.contains("schema version 99"), "{e}");
    }
}
