//! The records: versions, decisions, installations, agents, events and the intent journal,
//! behind one interface ([`Records`] and its transaction [`Tx`]), kept in the store's SQLite file
//! or in a PostgreSQL database a fleet of hosts shares ([`fleet`](super::fleet)).
//!
//! Every statement is plain SQL both run unchanged apart from the placeholder spelling (`?`
//! here, rewritten to `$n` for PostgreSQL): no `AUTOINCREMENT`, no `INSERT OR REPLACE`, no
//! `rowid`, every integer column `BIGINT`; sequence numbers are taken as `MAX(seq) + 1` inside
//! the writing transaction, and write transactions serialise: SQLite's `BEGIN IMMEDIATE`, and on
//! PostgreSQL a transaction-level advisory lock taken first in each (migrations too, so two
//! hosts migrating at once apply each step once). SQLite runs in WAL mode with a busy timeout,
//! so a reader never blocks a writer; PostgreSQL reads run in one `REPEATABLE READ` snapshot.
//!
//! What describes one machine is kept per host (the `host` column): which versions are in its
//! store (`host_versions`), its agents, their installations and its intents. A [`Tx`] reads and
//! writes those for its own host only; the `fleet_*` reads look across hosts.
//!
//! This module never touches the filesystem beyond the database file, and never stores a
//! secret: callers hand it URLs already stripped of userinfo, and the PostgreSQL password is
//! only in the connection settings.

use std::cell::RefCell;
use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};
use serde::Serialize;
use serde_json::Value;

use super::fleet::{HostChoice, Location, PgHost, PgLocation, Tls};
use super::{Error, Kind};

/// One schema step: SQL, or a rewrite of the data done in Rust (in the same transaction).
enum Step {
    Sql(&'static str),
    /// URL user information an older version recorded is removed ([`super::scrub`]).
    Scrub,
    /// Per event, the agent it is about and the index that agent took the version from
    /// ([`Tx::fill_event_sources`] for the rows recorded before).
    EventSources,
}

/// The schema versions, in order; `migrate` applies the ones a database has not seen. Migration
/// 3 takes the migrating host's name, store id and the time (`{host}`, `{store_id}`, `{now}`):
/// what a single-host database held becomes that host's.
const MIGRATIONS: &[Step] = &[
    // 1: the first schema.
    Step::Sql("CREATE TABLE versions (
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
    CREATE TABLE intents (seq BIGINT PRIMARY KEY, payload TEXT NOT NULL, created_at TEXT NOT NULL);"),
    // 2: `list` and `status` read every version; this index holds all they select, so they
    // never read the large provenance column (10,000 versions: the index, not 20 MB of rows).
    Step::Sql("CREATE INDEX versions_listed ON versions (skill, seq, digest, state, stored, decided_by, change_kind, created_at, withdrawn_reason);"),
    // 3: a fleet. Hosts, bound to their store's id; what a host has in its store (and which
    // agents its install asked for); agents, installations and intents per host; the host an
    // event happened on.
    Step::Sql("CREATE TABLE hosts (
        name TEXT PRIMARY KEY,
        store_id TEXT NOT NULL UNIQUE,
        first_seen TEXT NOT NULL,
        last_sync TEXT
    );
    INSERT INTO hosts (name, store_id, first_seen) VALUES ('{host}', '{store_id}', '{now}');
    CREATE TABLE host_versions (
        host TEXT NOT NULL,
        digest TEXT NOT NULL,
        agents TEXT NOT NULL,
        PRIMARY KEY (host, digest)
    );
    INSERT INTO host_versions (host, digest, agents) SELECT '{host}', digest, agents FROM versions WHERE stored = 1;
    DROP INDEX versions_listed;
    ALTER TABLE versions DROP COLUMN stored;
    CREATE INDEX versions_listed ON versions (skill, seq, digest, state, decided_by, change_kind, created_at, withdrawn_reason);
    CREATE TABLE agents3 (host TEXT NOT NULL, name TEXT NOT NULL, dir TEXT NOT NULL, PRIMARY KEY (host, name));
    INSERT INTO agents3 (host, name, dir) SELECT '{host}', name, dir FROM agents;
    DROP TABLE agents;
    ALTER TABLE agents3 RENAME TO agents;
    CREATE TABLE installs3 (
        host TEXT NOT NULL,
        agent TEXT NOT NULL,
        skill TEXT NOT NULL,
        digest TEXT NOT NULL,
        PRIMARY KEY (host, agent, skill)
    );
    INSERT INTO installs3 (host, agent, skill, digest) SELECT '{host}', agent, skill, digest FROM installs;
    DROP TABLE installs;
    ALTER TABLE installs3 RENAME TO installs;
    CREATE INDEX installs_by_digest ON installs (digest);
    CREATE TABLE intents3 (
        host TEXT NOT NULL,
        seq BIGINT NOT NULL,
        payload TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (host, seq)
    );
    INSERT INTO intents3 (host, seq, payload, created_at) SELECT '{host}', seq, payload, created_at FROM intents;
    DROP TABLE intents;
    ALTER TABLE intents3 RENAME TO intents;
    ALTER TABLE events ADD COLUMN host TEXT;"),
    // 4: the records' own random id (`{records_id}`): a store is bound to the records it is
    // used with (`STORE/records-id`), so it is never used with records that do not know its
    // trees. Per host, the index a version was installed from on that host (`update` re-reads
    // this host's index, not the one another host chose).
    Step::Sql("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
    INSERT INTO meta (name, value) VALUES ('records_id', '{records_id}');
    ALTER TABLE host_versions ADD COLUMN index_url TEXT;"),
    // 5: URL user information an older version recorded (a password cut short by `/`, `?` or
    // `#` in a typed URL, a reason typed with a URL's password) is removed, as it is removed
    // on input today ([`super::scrub`]).
    Step::Scrub,
    // 6: per installation, the index its agent's skill is taken from (`update` re-reads that
    // one, per agent: two publishers' skills of one name on one host never feed each other's
    // agents). Empty: a local file. NULL (rows from before, approvals): the index this host
    // installed the digest from.
    Step::Sql("ALTER TABLE installs ADD COLUMN index_url TEXT;
    UPDATE installs SET index_url = (SELECT hv.index_url FROM host_versions hv WHERE hv.host = installs.host AND hv.digest = installs.digest);"),
    // 7: per event, the agent it is about and the index that agent took the version from (an
    // intake's `installed`/`updated`: the index it read), so `provenance` shows index URL ->
    // version -> agent for every event, and a link found again (`verify`, `sync`) or a host
    // coming back takes the index its agent took the version from, not its host's.
    Step::EventSources,
];

/// Migration 7's columns.
const EVENT_SOURCE_COLUMNS: &str =
    "ALTER TABLE events ADD COLUMN agent TEXT; ALTER TABLE events ADD COLUMN index_url TEXT;";

/// The events about one agent (their detail starts `agent NAME:`, after `KIND: ` for an
/// `activated` one): what migration 7 fills for rows recorded before it.
const AGENT_EVENT_KINDS: &[&str] = &[
    "activated",
    "rolled_back",
    "moved_by_withdrawal",
    "switch_failed",
    "link_found",
];

/// The agent an event recorded before migration 7 is about, read from its detail (`agent
/// NAME: ...` or `KIND: agent NAME: ...`); `None` when it names none.
fn agent_of_detail(detail: &str) -> Option<&str> {
    let rest = detail
        .strip_prefix("agent ")
        .or_else(|| detail.split_once(": agent ").map(|(_, r)| r))?;
    let name = rest.split_once(':')?.0;
    super::agents::check_agent_name(name).ok()?;
    Some(name)
}

/// The PostgreSQL advisory lock every write transaction (and migration) takes first: writes
/// from every host serialise as SQLite's `BEGIN IMMEDIATE` makes them on one.
const PG_WRITE_LOCK: i64 = 0x736b_696c_6c62_6f78; // "skillbox"

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
    /// Its tree is in this host's store (false once garbage-collected, for a policy denial, or
    /// when only other hosts have it).
    pub stored: bool,
    /// Its tree is in this host's `quarantine/` (`withdraw --local`): what `list` and
    /// `provenance` show, from the store itself (the records never say; they show such a
    /// version as not `stored`, since no agent can load it).
    pub quarantined: bool,
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
    /// The agents this host's install asked for (activated on approval).
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
    /// As [`Version::quarantined`].
    pub quarantined: bool,
    pub decided_by: String,
    pub change: String,
    pub seq: i64,
    pub created_at: String,
    pub withdrawn_reason: Option<String>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Install {
    pub agent: String,
    pub skill: String,
    pub digest: String,
    /// The index this agent's skill is taken from (`update` re-reads it): the one the install
    /// or update that put it on this skill read; empty for a local file; `None` when not known
    /// per agent (recorded before, or activated by an approval): see [`Tx::source_of`].
    #[serde(default)]
    pub index_url: Option<String>,
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
    /// The host it happened on (none for events recorded before hosts were).
    pub host: Option<String>,
    /// The agent it is about (activated, rolled_back, moved_by_withdrawal, switch_failed,
    /// link_found); none for an event about the version itself.
    pub agent: Option<String>,
    /// The index the agent took the version from (for an intake's `installed`/`updated`: the
    /// index it read); `""`: a local file; none: not known.
    pub index_url: Option<String>,
}

/// What one event is about besides its version: an agent and the index it took the version
/// from ([`Event::agent`], [`Event::index_url`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct About<'a> {
    pub agent: Option<&'a str>,
    pub index_url: Option<&'a str>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Intent {
    pub seq: i64,
    pub payload: Value,
    pub created_at: String,
}

/// A host of the fleet as the records know it.
#[derive(Debug, Clone, Serialize)]
pub struct HostRow {
    pub name: String,
    pub first_seen: String,
    /// The last `skillbox sync` on that host (none yet: never).
    pub last_sync: Option<String>,
}

/// What the records say of one host's last signs of life (RFC 3339 UTC times).
#[derive(Debug, Clone)]
pub struct HostActivity {
    pub store_id: String,
    pub first_seen: String,
    pub last_sync: Option<String>,
    /// Its newest event (any command of it that recorded something).
    pub last_event: Option<String>,
}

/// Everything the records held for one host, as `forget-host` removed it: kept whole in the
/// `host_forgotten` event, so the same store coming back (the host was only unreachable) is
/// given its rows back when it registers again ([`Records::register`]).
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct HostSnapshot {
    pub host: String,
    pub store_id: String,
    pub first_seen: String,
    pub last_sync: Option<String>,
    /// Its agents: name, directory.
    pub agents: Vec<(String, String)>,
    pub installs: Vec<Install>,
    /// Its store's versions: digest, the agents its install asked for (JSON), index URL.
    pub versions: Vec<(String, String, Option<String>)>,
    /// Its unfinished steps: sequence number, payload (JSON), created at.
    pub intents: Vec<(i64, String, String)>,
}

/// One installation anywhere in the fleet.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FleetInstall {
    pub host: String,
    pub agent: String,
    pub skill: String,
    pub digest: String,
}

/// One value in or out of a statement: the types the schema uses.
#[derive(Debug, Clone, PartialEq)]
enum Cell {
    Null,
    Int(i64),
    Text(String),
}

impl From<&str> for Cell {
    fn from(s: &str) -> Self {
        Cell::Text(s.to_owned())
    }
}

impl From<&String> for Cell {
    fn from(s: &String) -> Self {
        Cell::Text(s.clone())
    }
}

impl From<String> for Cell {
    fn from(s: String) -> Self {
        Cell::Text(s)
    }
}

impl From<i64> for Cell {
    fn from(i: i64) -> Self {
        Cell::Int(i)
    }
}

impl<T: Into<Cell>> From<Option<T>> for Cell {
    fn from(o: Option<T>) -> Self {
        o.map_or(Cell::Null, Into::into)
    }
}

impl rusqlite::ToSql for Cell {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value as V};
        Ok(match self {
            Cell::Null => ToSqlOutput::Owned(V::Null),
            Cell::Int(i) => ToSqlOutput::Owned(V::Integer(*i)),
            Cell::Text(s) => ToSqlOutput::Borrowed(rusqlite::types::ValueRef::Text(s.as_bytes())),
        })
    }
}

/// `[c1, c2, ...]` as statement arguments.
macro_rules! args {
    ($($x:expr),* $(,)?) => { &[$(Cell::from($x)),*][..] };
}

/// One result row.
struct Row(Vec<Cell>);

/// The index of a row `(host_versions.index_url, versions.provenance)`: the host's own record,
/// else the one in the version's provenance (recorded before hosts kept their own); an empty
/// one is none.
fn index_of_row(r: Row) -> Result<Option<String>, Error> {
    let url = match r.opt_text(0)? {
        Some(u) => Some(u),
        None => serde_json::from_str::<Value>(&r.text(1)?)
            .map_err(json_err)?
            .get("index_url")
            .and_then(Value::as_str)
            .map(str::to_owned),
    };
    Ok(url.filter(|u| !u.is_empty()))
}

impl Row {
    fn cell(&self, i: usize) -> Result<&Cell, Error> {
        self.0
            .get(i)
            .ok_or_else(|| Error::new(Kind::Operational, format!("records: no column {i}")))
    }

    fn text(&self, i: usize) -> Result<String, Error> {
        match self.cell(i)? {
            Cell::Text(s) => Ok(s.clone()),
            other => Err(corrupt(i, other)),
        }
    }

    fn opt_text(&self, i: usize) -> Result<Option<String>, Error> {
        match self.cell(i)? {
            Cell::Null => Ok(None),
            Cell::Text(s) => Ok(Some(s.clone())),
            other => Err(corrupt(i, other)),
        }
    }

    fn int(&self, i: usize) -> Result<i64, Error> {
        match self.cell(i)? {
            Cell::Int(n) => Ok(*n),
            other => Err(corrupt(i, other)),
        }
    }

    fn opt_int(&self, i: usize) -> Result<Option<i64>, Error> {
        match self.cell(i)? {
            Cell::Null => Ok(None),
            Cell::Int(n) => Ok(Some(*n)),
            other => Err(corrupt(i, other)),
        }
    }
}

fn corrupt(i: usize, c: &Cell) -> Error {
    Error::new(
        Kind::Operational,
        format!("corrupt records: column {i} holds {c:?}, not the type the schema says"),
    )
}

fn sqlite_row(r: &rusqlite::Row<'_>, n: usize) -> rusqlite::Result<Row> {
    use rusqlite::types::ValueRef;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        out.push(match r.get_ref(i)? {
            ValueRef::Null => Cell::Null,
            ValueRef::Integer(v) => Cell::Int(v),
            ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Real(_) | ValueRef::Blob(_) => {
                return Err(rusqlite::Error::InvalidColumnType(
                    i,
                    "value".into(),
                    rusqlite::types::Type::Blob,
                ));
            }
        });
    }
    Ok(Row(out))
}

fn pg_row(r: &postgres::Row) -> Result<Row, Error> {
    use postgres::types::Type;
    let mut out = Vec::with_capacity(r.len());
    for (i, col) in r.columns().iter().enumerate() {
        let ty = col.type_();
        let cell = if *ty == Type::INT8 {
            r.try_get::<_, Option<i64>>(i).map(|v| v.map(Cell::Int))
        } else if *ty == Type::INT4 {
            r.try_get::<_, Option<i32>>(i)
                .map(|v| v.map(|n| Cell::Int(n.into())))
        } else if *ty == Type::INT2 {
            r.try_get::<_, Option<i16>>(i)
                .map(|v| v.map(|n| Cell::Int(n.into())))
        } else if *ty == Type::BOOL {
            r.try_get::<_, Option<bool>>(i)
                .map(|v| v.map(|b| Cell::Int(b.into())))
        } else {
            r.try_get::<_, Option<String>>(i).map(|v| v.map(Cell::Text))
        };
        out.push(cell.map_err(pg_err)?.unwrap_or(Cell::Null));
    }
    Ok(Row(out))
}

/// `?` placeholders as PostgreSQL's `$1, $2, ...` (none of our statements has a `?` in a string
/// literal, but quoted text is skipped all the same).
fn pg_sql(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut n = 0;
    let mut quoted = false;
    for c in sql.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                out.push(c);
            }
            '?' if !quoted => {
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            }
            _ => out.push(c),
        }
    }
    out
}

fn pg_args(args: &[Cell]) -> Vec<Box<dyn postgres::types::ToSql + Sync>> {
    args.iter()
        .map(|c| -> Box<dyn postgres::types::ToSql + Sync> {
            match c {
                Cell::Null => Box::new(Option::<String>::None),
                Cell::Int(i) => Box::new(*i),
                Cell::Text(s) => Box::new(s.clone()),
            }
        })
        .collect()
}

fn pg_err(e: postgres::Error) -> Error {
    let lost = pg_lost(&e);
    let msg = pg_text(&e);
    if lost {
        // Rewritten by [`Records::read`] and [`Records::write`] with where the records are
        // and what to do ([`lost_at`]).
        return Error::new(Kind::Operational, format!("{LOST_MARK}{msg}"));
    }
    Error::new(
        Kind::Operational,
        format!("records (postgres): {msg}{}", privilege_advice(&e)),
    )
}

/// What to do when the server refused the records' role a privilege (SQLSTATE 42501): the
/// first command on a new database makes skillbox's tables, so the role must be let create
/// them in the schema (since PostgreSQL 15 only the database's owner may, by default); every
/// command reads and writes them. The role is not named: messages never show a URL's userinfo.
fn privilege_advice(e: &postgres::Error) -> String {
    let Some(db) = e.as_db_error() else {
        return String::new();
    };
    if db.code() != &postgres::error::SqlState::INSUFFICIENT_PRIVILEGE {
        return String::new();
    }
    let schema = db
        .message()
        .strip_prefix("permission denied for schema ")
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
    match schema {
        Some(schema) => format!(
            "; the role the records URL logs in as may not create tables in schema {schema}, and the first command on a new database makes skillbox's: its owner (or a superuser) grants it with `GRANT CREATE ON SCHEMA {schema} TO <role>`, or runs that first command itself; this command wrote nothing"
        ),
        None => "; the role the records URL logs in as lacks a privilege on skillbox's tables: the role that made them (or a superuser) grants it with `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA <schema> TO <role>`".to_owned(),
    }
}

/// Whether `e` says the session is gone: the connection closed, an I/O error on its socket,
/// the server shutting down or ending the session (SQLSTATE class 08, 57P01 to 57P03, 25P03).
/// A command then cannot go on with the records, whatever step it was at.
fn pg_lost(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        return code.code().starts_with("08")
            || [
                SqlState::ADMIN_SHUTDOWN,
                SqlState::CRASH_SHUTDOWN,
                SqlState::CANNOT_CONNECT_NOW,
                SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
            ]
            .contains(code);
    }
    std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

/// The text of a PostgreSQL error: the server's own message (e.g. "password authentication
/// failed for user ...") or the client's with its I/O cause; neither holds the password, and
/// callers scrub connection errors of it too.
fn pg_text(e: &postgres::Error) -> String {
    let mut msg = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => e.to_string(),
    };
    if let Some(src) = std::error::Error::source(e)
        && e.as_db_error().is_none()
    {
        let s = src.to_string();
        if !msg.contains(&s) {
            msg = format!("{msg}: {s}");
        }
    }
    msg
}

/// How [`pg_err`] starts the message of a session that is gone.
const LOST_MARK: &str = "records (postgres): connection lost: ";

/// How the message of records whose connection was lost while a command ran starts (the CLI's
/// `withdraw` then names `--local`, as for records it cannot reach at all).
pub const LOST: &str = "lost the connection to the records at ";

/// What to do once the connection was lost mid-command. Every step of a command is journaled
/// (an intent committed before its filesystem step), so what the lost session had not
/// committed is not recorded, and the next command finishes or undoes what this one left.
const LOST_TODO: &str = "the server stopped, restarted or cannot be reached; what this command had not committed is not recorded: run the command again once the server answers (it first finishes or undoes what this one left on this host)";

/// `e` as said of the records at `location` when [`pg_err`] marked it as a session that is
/// gone; any other error unchanged.
fn lost_at(mut e: Error, location: &str) -> Error {
    if let Some(rest) = e.message.strip_prefix(LOST_MARK) {
        e.message = format!("{LOST}{location}: {rest}; {LOST_TODO}");
    }
    e
}

/// The refusal of records a newer skillbox migrated to schema `have`.
fn newer_schema(location: &str, have: usize) -> Error {
    Error::new(
        Kind::Operational,
        format!(
            "the records at {location} use schema version {have}, {NEWER} (up to {}): a newer skillbox upgraded them; use a newer skillbox on this host (this one wrote nothing)",
            MIGRATIONS.len()
        ),
    )
}

/// The refusal of a database that is not skillbox's records.
fn not_ours(location: &str, what: &str) -> Error {
    Error::new(
        Kind::Usage,
        format!(
            "the database at {location} is not skillbox's records: {what}; nothing was written. Give --records a database of skillbox's own (an empty one: CREATE DATABASE), or the fleet's registry"
        ),
    )
}

/// How long a PostgreSQL write waits for the fleet's write lock before it fails, unless
/// `SKILLBOX_RECORDS_LOCK_TIMEOUT` (whole seconds) says otherwise: write transactions hold it
/// for milliseconds, so a wait this long means a writer is stuck.
const PG_LOCK_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a PostgreSQL session may sit idle inside a transaction before the server ends it
/// (and releases the write lock it may hold): a stopped or hung skillbox cannot block the
/// fleet's writes for longer.
const PG_IDLE_IN_TRANSACTION: Duration = Duration::from_secs(60);

/// The records' own id, which stores are bound to (from schema 4 on).
const RECORDS_ID: &str = "SELECT value FROM meta WHERE name = 'records_id'";

/// What [`Records::peek`] saw of the records before anything was written to them.
#[derive(Debug)]
pub struct Peeked {
    /// Skillbox's `schema_version` is there (the records of some skillbox, of any schema).
    pub schema: bool,
    /// Their own id (from schema 4 on), which stores are bound to.
    pub id: Option<String>,
}

/// The records of one store, for one host.
pub struct Records {
    conn: Backend,
    host: String,
    location: String,
    /// The database was created by this open (every migration applied now).
    created: bool,
    /// How long a write waits for the fleet's write lock (PostgreSQL).
    lock_timeout: Duration,
}

enum Backend {
    Sqlite(Connection),
    Postgres(Box<postgres::Client>),
}
fn db_err(e: rusqlite::Error) -> Error {
    let kind = match &e {
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(
                f.code,
                rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen
            ) =>
        {
            return Error::new(Kind::Operational, format!("records: {e} ({READ_ONLY})"));
        }
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(
                f.code,
                rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt
            ) =>
        {
            return Error::new(
                Kind::Operational,
                format!("records: {e}: {CORRUPT}; restore it from a backup or move the store away"),
            );
        }
        rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::DiskFull => {
            return Error::new(
                Kind::Operational,
                format!("records: {e}: {FULL}; free space there"),
            );
        }
        _ => Kind::Operational,
    };
    Error::new(kind, format!("records: {e}"))
}

/// Said of records.db when its filesystem has no room for a write (`SQLITE_FULL`).
const FULL: &str = "the filesystem holding the store's records.db is full";
/// Said of a records.db that takes no write (a read-only filesystem, an immutable file).
const READ_ONLY: &str = "is the store on a read-only filesystem?";
/// Said of a records.db SQLite cannot read as a database.
const CORRUPT: &str = "the store's records.db is corrupt";
/// Said of records a newer skillbox migrated past what this one knows.
const NEWER: &str = "newer than this skillbox knows";

/// Whether `e` says the records could not be used at all (out of reach, corrupt, read-only, or
/// on a full filesystem): `withdraw` then names `withdraw --local`, which contains a version
/// on this host without them (it needs only a rename in the store).
pub fn records_unusable(e: &Error) -> bool {
    e.message.starts_with(UNREACHABLE)
        || e.message.starts_with(LOST)
        || [FULL, CORRUPT, READ_ONLY, NEWER]
            .iter()
            .any(|m| e.message.contains(m))
}

fn json_err(e: serde_json::Error) -> Error {
    Error::new(Kind::Operational, format!("corrupt records: {e}"))
}

/// How the message of records that cannot be reached starts (the CLI's `withdraw` then names
/// `--local`).
pub const UNREACHABLE: &str = "cannot open the records at ";

/// Connect to PostgreSQL. Errors never hold the password: the message is the server's or the
/// socket's, scrubbed of the password all the same.
fn pg_connect(
    p: &PgLocation,
    host: &str,
    lock_timeout: Duration,
) -> Result<postgres::Client, Error> {
    let mut cfg = postgres::Config::new();
    // The host's name in application_name: an operator (and a write that timed out waiting for
    // the lock) can tell which host holds the fleet's write lock (pg_stat_activity). Session
    // settings: a lock wait ends after `lock_timeout`, a transaction left idle is ended by the
    // server, and TCP keepalives notice a peer that vanished.
    cfg.user(&p.user)
        .dbname(&p.dbname)
        .application_name(&format!("skillbox@{host}"))
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(60))
        .keepalives_interval(Duration::from_secs(10))
        .keepalives_retries(6)
        .connect_timeout(Duration::from_secs(10));
    match &p.host {
        PgHost::Tcp { host, port } => {
            cfg.host(host).port(*port);
        }
        PgHost::Socket { dir, port } => {
            cfg.host_path(dir).port(*port);
        }
    }
    if let Some(pw) = &p.password {
        cfg.password(pw.expose());
    }
    let shown = Location::Postgres(p.clone()).display();
    let connected = match &p.tls {
        None => cfg.connect(postgres::NoTls),
        Some(tls) => {
            // verify-full: never fall back to plain text, check the chain and the host name.
            cfg.ssl_mode(postgres::config::SslMode::Require);
            cfg.connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(
                tls,
            )?))
        }
    };
    let unreachable = |e: postgres::Error| {
        let mut text = format!("records (postgres): {}", pg_text(&e));
        // Security: the server's and the client's messages never quote a password, but one
        // found there all the same is scrubbed (as every message is masked of URL userinfo).
        if let Some(pw) = p.password.as_ref().filter(|pw| !pw.is_empty()) {
            text = text.replace(pw.expose(), "[password]");
        }
        let todo = connect_advice(&e, p);
        Error::new(
            Kind::Operational,
            format!("{UNREACHABLE}{shown}: {text}; {todo}"),
        )
    };
    let mut client = connected.map_err(unreachable)?;
    // Set once connected rather than as startup options, which a connection pooler may refuse.
    client
        .batch_execute(&format!(
            "SET lock_timeout = {}; SET idle_in_transaction_session_timeout = {}",
            lock_timeout.as_millis(),
            PG_IDLE_IN_TRANSACTION.as_millis()
        ))
        .map_err(unreachable)?;
    Ok(client)
}

/// What to do about a connection the server did not give: check the credentials (and where
/// the password came from, never the password), create the database, wait for the server, or
/// make it reachable.
fn connect_advice(e: &postgres::Error, p: &PgLocation) -> String {
    use postgres::error::SqlState;
    let code = e.code();
    if code == Some(&SqlState::INVALID_PASSWORD)
        || code == Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION)
    {
        let from = match p.password_from {
            Some(from) => format!("the password came from {from}"),
            None => "no password was given".to_owned(),
        };
        return format!(
            "the server refused this user or its password ({from}): check the user in the records URL and the password (--records-password-file FILE, else the URL's, else PGPASSWORD), and that the server's pg_hba.conf lets this user in from this host; nothing was recorded"
        );
    }
    if code == Some(&SqlState::INVALID_CATALOG_NAME) {
        return "the server has no such database: check the database in the records URL, or create it for skillbox (CREATE DATABASE); nothing was recorded".to_owned();
    }
    if code == Some(&SqlState::CANNOT_CONNECT_NOW) || code == Some(&SqlState::TOO_MANY_CONNECTIONS)
    {
        return "the server is starting, stopping or full: run the command again in a moment; nothing was recorded".to_owned();
    }
    if code.is_none() && pg_text(e).contains("password missing") {
        return "the server asks for a password and none was given: --records-password-file FILE (mode 0600), or PGPASSWORD; nothing was recorded".to_owned();
    }
    if code.is_none() && pg_text(e).starts_with("error performing TLS handshake") {
        return "the TLS handshake failed: check the server's certificate (its chain against --records-ca-file, else Mozilla's roots, and its name against the host in the records URL); nothing was recorded".to_owned();
    }
    if code.is_none() && pg_lost(e) {
        return "is the PostgreSQL server running and listening there? check the host and port in the records URL and the network to it, then run the command again; nothing was recorded".to_owned();
    }
    "nothing was recorded; run the command again once the cause is fixed".to_owned()
}

/// The rustls client settings for the server: the fetcher's (ring, TLS 1.2 and 1.3, Mozilla's
/// roots or exactly the CA file's), with PostgreSQL's ALPN protocol name.
fn tls_config(tls: &Tls) -> Result<rustls::ClientConfig, Error> {
    let trust = match &tls.ca_file {
        Some(f) => crate::fetch::tls::Trust::from_ca_file(f),
        None => Ok(crate::fetch::tls::Trust::WebPki),
    };
    let config = trust.and_then(|t| t.client_config()).map_err(|e| {
        Error::new(
            Kind::Usage,
            format!(
                "--records-ca-file: {}",
                e.to_string().replace("--ca-file", "the CA file")
            ),
        )
    })?;
    let mut config = (*config).clone();
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(config)
}

/// `SKILLBOX_RECORDS_LOCK_TIMEOUT`: whole seconds a write waits for the fleet's write lock.
fn lock_timeout() -> Result<Duration, Error> {
    match std::env::var("SKILLBOX_RECORDS_LOCK_TIMEOUT") {
        Err(_) => Ok(PG_LOCK_TIMEOUT),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) if (1..=3600).contains(&n) => Ok(Duration::from_secs(n)),
            _ => Err(Error::new(
                Kind::Usage,
                "SKILLBOX_RECORDS_LOCK_TIMEOUT: whole seconds, 1 to 3600",
            )),
        },
    }
}

impl Records {
    /// Open the records at `location` (`sqlite_path` for the SQLite default), bring the schema
    /// up to date, and bind this store (`store_id`) to its host name.
    pub fn open_at(
        location: &Location,
        sqlite_path: &Path,
        host: &HostChoice,
        store_id: &str,
    ) -> Result<Self, Error> {
        let mut r = Self::open_unregistered(location, sqlite_path, host, store_id)?;
        r.register(host, store_id)?;
        Ok(r)
    }

    /// Open the records and bring the schema up to date, without binding a host name to the
    /// store yet ([`Records::register`] does): the store first checks they are its records.
    pub fn open_unregistered(
        location: &Location,
        sqlite_path: &Path,
        host: &HostChoice,
        store_id: &str,
    ) -> Result<Self, Error> {
        let mut r = Self::connect(location, sqlite_path, host)?;
        r.migrate(store_id)?;
        Ok(r)
    }

    /// The records as they are, before [`Records::open_unregistered`] would write to them:
    /// whether they hold skillbox's schema at all, and their id. A store that can tell from
    /// this that they are not its records refuses them with nothing written: an empty database
    /// given by mistake is left empty, not given skillbox's schema only to be refused after.
    pub fn peek(
        location: &Location,
        sqlite_path: &Path,
        host: &HostChoice,
    ) -> Result<(Self, Peeked), Error> {
        let mut r = Self::connect(location, sqlite_path, host)?;
        let peeked = r.read(|tx| {
            let tables = tx.table_names()?;
            let has = |t: &str| tables.iter().any(|n| n == t);
            let id = if has("meta") {
                tx.one_text(RECORDS_ID, &[])?
            } else {
                None
            };
            Ok(Peeked {
                schema: has("schema_version"),
                id,
            })
        })?;
        Ok((r, peeked))
    }

    /// After [`Records::peek`]: bring the schema up to date, as [`Records::open_unregistered`].
    pub fn migrated(mut self, store_id: &str) -> Result<Self, Error> {
        self.migrate(store_id)?;
        Ok(self)
    }

    /// A connection to the records, as they are (no schema made or brought up to date).
    fn connect(location: &Location, sqlite_path: &Path, host: &HostChoice) -> Result<Self, Error> {
        let lock_timeout = match location {
            Location::Sqlite => PG_LOCK_TIMEOUT,
            Location::Postgres(_) => lock_timeout()?,
        };
        let conn = match location {
            Location::Sqlite => Backend::Sqlite(open_sqlite(sqlite_path)?),
            Location::Postgres(p) => {
                Backend::Postgres(Box::new(pg_connect(p, &host.name, lock_timeout)?))
            }
        };
        Ok(Records {
            conn,
            host: host.name.clone(),
            location: location.display(),
            created: false,
            lock_timeout,
        })
    }

    /// Whether this open created the records (a database no command had used).
    pub fn just_created(&self) -> bool {
        self.created
    }

    /// The records' own random id, which stores are bound to.
    pub fn records_id(&mut self) -> Result<String, Error> {
        self.read(|tx| {
            tx.one_text(RECORDS_ID, &[])?
                .ok_or_else(|| Error::new(Kind::Operational, "corrupt records: no records id"))
        })
    }

    /// The digests the records know in the store `store_id` (under whatever host name it is
    /// bound to): stored versions, and promotions an interrupted command left. None when the
    /// records do not know that store.
    pub fn stored_by_store(&mut self, store_id: &str) -> Result<Vec<String>, Error> {
        self.read(|tx| {
            let mut out = tx
                .rows(
                    "SELECT hv.digest FROM host_versions hv JOIN hosts h ON h.name = hv.host WHERE h.store_id = ?",
                    args![store_id],
                )?
                .iter()
                .map(|r| r.text(0))
                .collect::<Result<Vec<_>, _>>()?;
            for r in tx.rows(
                "SELECT i.payload FROM intents i JOIN hosts h ON h.name = i.host WHERE h.store_id = ?",
                args![store_id],
            )? {
                let payload: Value = serde_json::from_str(&r.text(0)?).map_err(json_err)?;
                if let Some(d) = payload.get("digest").and_then(Value::as_str) {
                    out.push(d.to_owned());
                }
            }
            Ok(out)
        })
    }

    /// This host's name, as the records know it.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The records are a database a fleet shares (PostgreSQL), not a store's own records.db.
    pub fn is_shared(&self) -> bool {
        matches!(self.conn, Backend::Postgres(_))
    }

    /// Where the records are, printable (never a password).
    pub fn location(&self) -> &str {
        &self.location
    }

    fn migrate(&mut self, store_id: &str) -> Result<(), Error> {
        // The common case, an up-to-date schema, takes no write lock. The records' own id is
        // read with it: a `schema_version` table of another program's, without skillbox's
        // `meta`, goes on to the write below, which looks closer and refuses it.
        let fresh = self.read(|tx| {
            let rows = tx.rows("SELECT MAX(version) FROM schema_version", &[])?;
            let v = rows.first().map(|r| r.opt_int(0)).transpose()?.flatten();
            tx.rows(RECORDS_ID, &[])?;
            Ok(v)
        });
        if let Ok(Some(v)) = fresh {
            match usize::try_from(v) {
                Ok(v) if v == MIGRATIONS.len() => return self.compact_after_scrub(),
                // Refused before anything is written or locked: an older skillbox (this one)
                // must not write records a newer one migrated (its rows may mean more than it
                // knows).
                Ok(v) if v > MIGRATIONS.len() => return Err(newer_schema(&self.location, v)),
                _ => {}
            }
        }
        // Security: these are substituted into SQL text, so each is checked to be of a charset
        // that cannot end a string literal (a host name, a hex id, an RFC 3339 time).
        let host = self.host.clone();
        super::fleet::check_host_name(&host).map_err(|e| Error::new(Kind::Usage, e))?;
        let safe = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b':' | b'.' | b'+'))
        };
        let now = super::now();
        let records_id = super::store::random_id()?;
        if !safe(store_id) || !safe(&now) {
            return Err(Error::new(
                Kind::Operational,
                "corrupt store: the store id is not hex",
            ));
        }
        // Security: the scrub rewrites rows that held a password; SQLite zeroes what it frees
        // (the old cells, pages left free) only with secure_delete, for this transaction.
        if let Backend::Sqlite(c) = &self.conn {
            c.pragma_update(None, "secure_delete", "ON")
                .map_err(db_err)?;
        }
        let location = self.location.clone();
        let migrated = self.write(|tx| {
            // Security: skillbox's schema goes only into a database that holds nothing else,
            // and migrations only into skillbox's own records: a database of another program
            // given by mistake (or a typo naming one) is refused before anything is written,
            // never filled with skillbox's tables or altered by its migrations.
            tx.check_ours(&location)?;
            tx.exec(
                "CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)",
                &[],
            )?;
            let have = tx.rows("SELECT MAX(version) FROM schema_version", &[])?;
            let have = have.first().map(|r| r.opt_int(0)).transpose()?.flatten();
            let have = usize::try_from(have.unwrap_or(0)).unwrap_or(0);
            if have > MIGRATIONS.len() {
                return Err(newer_schema(&location, have));
            }
            for (i, m) in MIGRATIONS.iter().enumerate().skip(have) {
                match m {
                    Step::Sql(m) => {
                        let sql = m
                            .replace("{host}", &host)
                            .replace("{store_id}", store_id)
                            .replace("{now}", &now)
                            .replace("{records_id}", &records_id);
                        tx.batch(&sql)?;
                    }
                    // A database made now holds nothing to scrub.
                    Step::Scrub if have == 0 => {}
                    Step::Scrub => tx.scrub_urls()?,
                    Step::EventSources => {
                        tx.batch(EVENT_SOURCE_COLUMNS)?;
                        if have > 0 {
                            tx.fill_event_sources()?;
                        }
                    }
                }
                tx.exec(
                    "INSERT INTO schema_version (version) VALUES (?)",
                    args![i64::try_from(i + 1).unwrap_or(i64::MAX)],
                )?;
            }
            if have == 0 {
                // A database made now holds no host yet (migration 3 made the migrating one
                // its host, for what a single-host database held): `register` binds this
                // store's once the store has accepted these records as its own.
                tx.exec("DELETE FROM hosts", &[])?;
            }
            Ok(have == 0)
        });
        if let Backend::Sqlite(c) = &self.conn {
            c.pragma_update(None, "secure_delete", "OFF")
                .map_err(db_err)?;
        }
        self.created = migrated?;
        self.compact_after_scrub()
    }

    /// SQLite: after the scrub (migration 5), what it replaced may still be in the file: in
    /// pages and parts of pages an older version freed before secure_delete was on, and in the
    /// write-ahead log, which keeps the frames older commands wrote until it is reset. So the
    /// file is rebuilt from its live rows (`VACUUM`) and the log checkpointed and truncated to
    /// nothing; the scrub's transaction left a `compact` mark in `meta`, removed only once both
    /// are done, so a command killed in between, or a reader that kept the log from being
    /// truncated, leaves it to the next open. A failure here is not the command's: the rows
    /// are already clean, and the next open tries again. PostgreSQL keeps the old row versions
    /// until the server vacuums (docs/lifecycle.md says what to do).
    fn compact_after_scrub(&mut self) -> Result<(), Error> {
        let Backend::Sqlite(c) = &self.conn else {
            return Ok(());
        };
        let marked = c
            .query_row(
                "SELECT COUNT(*) FROM meta WHERE name = 'compact'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map_err(db_err)?;
        if marked == 0 {
            return Ok(());
        }
        let done = c.execute_batch("VACUUM").and_then(|()| {
            c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                r.get::<_, i64>(0)
            })
        });
        if let Ok(0) = done {
            c.execute("DELETE FROM meta WHERE name = 'compact'", [])
                .map_err(db_err)?;
        }
        Ok(())
    }

    /// Bind this store to its host name: a name already bound to another store is refused (two
    /// machines acting as one host would replay each other's journal and share a store view);
    /// a store already bound under another name keeps that name unless `--host` said otherwise.
    pub fn register(&mut self, host: &HostChoice, store_id: &str) -> Result<(), Error> {
        let lookup = |tx: &Tx<'_>| -> Result<(Option<String>, Option<String>), Error> {
            let by_id = tx
                .rows("SELECT name FROM hosts WHERE store_id = ?", args![store_id])?
                .first()
                .map(|r| r.text(0))
                .transpose()?;
            let by_name = tx
                .rows(
                    "SELECT store_id FROM hosts WHERE name = ?",
                    args![&host.name],
                )?
                .first()
                .map(|r| r.text(0))
                .transpose()?;
            Ok((by_id, by_name))
        };
        let decide = |by_id: Option<String>,
                      by_name: Option<String>|
         -> Result<Option<String>, Error> {
            match (by_id, by_name) {
                (Some(n), _) if n == host.name => Ok(Some(n)),
                (Some(n), _) if !host.explicit => Ok(Some(n)),
                (Some(n), _) => Err(Error::new(
                    Kind::Usage,
                    format!(
                        "this store is host {n} in the records; --host {} names another host (give --host {n}, or another store)",
                        host.name
                    ),
                )),
                (None, Some(_)) => Err(Error::new(
                    Kind::Usage,
                    format!(
                        "host name {} is already in the records for another store (another machine, or a store made anew); give this store its own --host NAME",
                        host.name
                    ),
                )),
                (None, None) => Ok(None),
            }
        };
        let (by_id, by_name) = self.read(lookup)?;
        if let Some(name) = decide(by_id, by_name)? {
            self.host = name;
            return self.name_session(&host.name);
        }
        let now = super::now();
        let name = self.write(|tx| {
            let (by_id, by_name) = lookup(tx)?;
            if let Some(name) = decide(by_id, by_name)? {
                return Ok(name);
            }
            tx.exec(
                "INSERT INTO hosts (name, store_id, first_seen) VALUES (?, ?, ?)",
                args![&host.name, store_id, &now],
            )?;
            // A store `forget-host` removed from the records, back: its rows as they were
            // forgotten, in the transaction that registers it, so no command on any host sees it
            // registered without the agents it still runs (a withdrawn version among them).
            tx.restore_forgotten(&host.name, store_id, &now)?;
            Ok(host.name.clone())
        })?;
        self.host = name;
        self.name_session(&host.name)
    }

    /// Name this PostgreSQL session after the host the records bound this store to, when that
    /// differs from the name it connected under (`asked`): a store keeps its name.
    fn name_session(&mut self, asked: &str) -> Result<(), Error> {
        if self.host == asked {
            return Ok(());
        }
        if let Backend::Postgres(c) = &mut self.conn {
            c.execute(
                "SELECT set_config('application_name', $1, false)",
                &[&format!("skillbox@{}", self.host)],
            )
            .map_err(|e| lost_at(pg_err(e), &self.location))?;
        }
        Ok(())
    }

    /// Run `f` in one write transaction; it commits only if `f` succeeds. Write transactions
    /// serialise, on one host and across the fleet.
    pub fn write<T>(&mut self, f: impl FnOnce(&Tx<'_>) -> Result<T, Error>) -> Result<T, Error> {
        let host = self.host.as_str();
        match &mut self.conn {
            Backend::Sqlite(c) => {
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(db_err)?;
                let out = f(&Tx {
                    conn: TxConn::Sqlite(&tx),
                    host,
                })?;
                tx.commit().map_err(db_err)?;
                Ok(out)
            }
            Backend::Postgres(c) => {
                // A session that went away (the server stopped or restarted mid-command) is
                // said as such, with what to do, on whichever statement found it.
                let location = self.location.as_str();
                let mut tx = c.transaction().map_err(|e| lost_at(pg_err(e), location))?;
                // The sequence numbers (MAX(seq) + 1) and the migrations rely on one writer at
                // a time, as SQLite's BEGIN IMMEDIATE gives: taken first, held to commit. The
                // wait ends after the session's lock_timeout, naming who holds the lock.
                if let Err(e) = tx.execute("SELECT pg_advisory_xact_lock($1)", &[&PG_WRITE_LOCK]) {
                    let timed_out =
                        e.code() == Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE);
                    drop(tx);
                    if timed_out {
                        return Err(lock_held(c, self.lock_timeout));
                    }
                    return Err(lost_at(pg_err(e), location));
                }
                in_pg(tx, host, f).map_err(|e| lost_at(e, location))
            }
        }
    }

    /// Run `f` over one consistent snapshot (a read transaction).
    pub fn read<T>(&mut self, f: impl FnOnce(&Tx<'_>) -> Result<T, Error>) -> Result<T, Error> {
        let host = self.host.as_str();
        match &mut self.conn {
            Backend::Sqlite(c) => {
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Deferred)
                    .map_err(db_err)?;
                let out = f(&Tx {
                    conn: TxConn::Sqlite(&tx),
                    host,
                })?;
                tx.finish().map_err(db_err)?;
                Ok(out)
            }
            Backend::Postgres(c) => {
                let location = self.location.as_str();
                let tx = c
                    .build_transaction()
                    .isolation_level(postgres::IsolationLevel::RepeatableRead)
                    .read_only(true)
                    .start()
                    .map_err(|e| lost_at(pg_err(e), location))?;
                in_pg(tx, host, f).map_err(|e| lost_at(e, location))
            }
        }
    }
}

/// The error of a write that waited `waited` for the fleet's write lock: who holds it, when
/// the server lets this role see it (`pg_stat_activity`; a skillbox session is named
/// `skillbox@HOST`).
fn lock_held(c: &mut postgres::Client, waited: Duration) -> Error {
    // An advisory lock on one bigint key: its high half in classid, its low half in objid. The
    // key is the same in every database, so the holder is looked for in this one only: another
    // registry on the same server holds its own (a CI run named a session of another test's
    // database as the holder).
    let key = PG_WRITE_LOCK as u64;
    let (high, low) = ((key >> 32) as i64, (key & 0xffff_ffff) as i64);
    let holder = c
        .query(
            "SELECT COALESCE(a.application_name, ''), COALESCE(host(a.client_addr), 'a local socket'), a.pid, COALESCE(EXTRACT(EPOCH FROM now() - a.xact_start)::bigint, -1)
             FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
             WHERE l.locktype = 'advisory' AND l.granted AND l.classid::bigint = $1 AND l.objid::bigint = $2 AND l.objsubid = 1
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[&high, &low],
        )
        .ok()
        .and_then(|rows| rows.into_iter().next())
        .map(|r| {
            let app: String = r.get(0);
            let from: String = r.get(1);
            let pid: i32 = r.get(2);
            let secs: i64 = r.get(3);
            let who = if app.is_empty() {
                "a session without an application name".to_owned()
            } else {
                app.escape_default().to_string()
            };
            let since = if secs >= 0 {
                format!(", in a transaction for {secs} s")
            } else {
                String::new()
            };
            format!("{who} (server pid {pid}, from {from}{since})")
        })
        .unwrap_or_else(|| "a session this role cannot see".into());
    Error::new(
        Kind::Operational,
        format!(
            "the fleet's write lock is held by {holder}; waited {} s (SKILLBOX_RECORDS_LOCK_TIMEOUT): nothing was recorded; try again, or end that session (pg_terminate_backend)",
            waited.as_secs()
        ),
    )
}

/// Run `f` in PostgreSQL transaction `tx`, committing it only if `f` succeeds (dropped
/// uncommitted, it rolls back).
fn in_pg<T>(
    tx: postgres::Transaction<'_>,
    host: &str,
    f: impl FnOnce(&Tx<'_>) -> Result<T, Error>,
) -> Result<T, Error> {
    let t = Tx {
        conn: TxConn::Postgres(RefCell::new(tx)),
        host,
    };
    let out = f(&t)?;
    if let TxConn::Postgres(tx) = t.conn {
        tx.into_inner().commit().map_err(pg_err)?;
    }
    Ok(out)
}

fn open_sqlite(path: &Path) -> Result<Connection, Error> {
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
    Ok(conn)
}

/// One transaction over the records, for one host.
pub struct Tx<'a> {
    conn: TxConn<'a>,
    host: &'a str,
}

enum TxConn<'a> {
    Sqlite(&'a rusqlite::Transaction<'a>),
    /// The sync client needs `&mut` for every statement; a transaction is used by one thread.
    Postgres(RefCell<postgres::Transaction<'a>>),
}

impl Tx<'_> {
    fn rows(&self, sql: &str, args: &[Cell]) -> Result<Vec<Row>, Error> {
        match &self.conn {
            TxConn::Sqlite(tx) => {
                let mut st = tx.prepare_cached(sql).map_err(db_err)?;
                let n = st.column_count();
                let rows = st
                    .query_map(rusqlite::params_from_iter(args.iter()), |r| {
                        sqlite_row(r, n)
                    })
                    .map_err(db_err)?;
                rows.collect::<Result<_, _>>().map_err(db_err)
            }
            TxConn::Postgres(tx) => {
                let params = pg_args(args);
                let refs: Vec<&(dyn postgres::types::ToSql + Sync)> =
                    params.iter().map(|b| b.as_ref()).collect();
                let rows = tx
                    .borrow_mut()
                    .query(pg_sql(sql).as_str(), &refs)
                    .map_err(pg_err)?;
                rows.iter().map(pg_row).collect()
            }
        }
    }

    fn exec(&self, sql: &str, args: &[Cell]) -> Result<u64, Error> {
        match &self.conn {
            TxConn::Sqlite(tx) => {
                let mut st = tx.prepare_cached(sql).map_err(db_err)?;
                st.execute(rusqlite::params_from_iter(args.iter()))
                    .map(|n| n as u64)
                    .map_err(db_err)
            }
            TxConn::Postgres(tx) => {
                let params = pg_args(args);
                let refs: Vec<&(dyn postgres::types::ToSql + Sync)> =
                    params.iter().map(|b| b.as_ref()).collect();
                tx.borrow_mut()
                    .execute(pg_sql(sql).as_str(), &refs)
                    .map_err(pg_err)
            }
        }
    }

    /// Several statements without arguments (migrations).
    fn batch(&self, sql: &str) -> Result<(), Error> {
        match &self.conn {
            TxConn::Sqlite(tx) => tx.execute_batch(sql).map_err(db_err),
            TxConn::Postgres(tx) => tx.borrow_mut().batch_execute(sql).map_err(pg_err),
        }
    }

    fn one_text(&self, sql: &str, args: &[Cell]) -> Result<Option<String>, Error> {
        self.rows(sql, args)?.first().map(|r| r.text(0)).transpose()
    }

    /// This transaction's host.
    pub fn host(&self) -> &str {
        self.host
    }

    /// The tables and views where this connection's unqualified names resolve (PostgreSQL:
    /// the current schema; SQLite: the file, without its own `sqlite_` tables), by name.
    fn table_names(&self) -> Result<Vec<String>, Error> {
        let sql = match self.conn {
            TxConn::Sqlite(_) => {
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name"
            }
            TxConn::Postgres(_) => {
                "SELECT c.relname::text FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY 1"
            }
        };
        self.rows(sql, &[])?.iter().map(|r| r.text(0)).collect()
    }

    /// Refuse a database that is not skillbox's records (before a migration writes to it):
    /// one holding tables without skillbox's `schema_version`, or whose `schema_version` is
    /// not skillbox's (not whole numbers; from schema 4 on, no records id in `meta`).
    fn check_ours(&self, location: &str) -> Result<(), Error> {
        let tables = self.table_names()?;
        let has = |t: &str| tables.iter().any(|n| n == t);
        if !has("schema_version") {
            if tables.is_empty() {
                return Ok(());
            }
            let shown: Vec<String> = tables
                .iter()
                .take(3)
                .map(|t| t.escape_default().to_string())
                .collect();
            return Err(not_ours(
                location,
                &format!(
                    "it holds {} table(s) of another program ({}{}) and no skillbox schema",
                    tables.len(),
                    shown.join(", "),
                    if tables.len() > 3 { ", ..." } else { "" }
                ),
            ));
        }
        let other = || not_ours(location, "its schema_version table is not skillbox's");
        let rows = self
            .rows("SELECT MAX(version) FROM schema_version", &[])
            .map_err(|_| other())?;
        let have = match rows.first().map(|r| r.cell(0)).transpose()? {
            Some(Cell::Int(n)) => *n,
            None | Some(Cell::Null) => 0,
            Some(Cell::Text(_)) => return Err(other()),
        };
        // Schema 1 made `versions`; schema 4 the records' id, which every store is bound to.
        let ours = match have {
            0 => tables.len() == 1,
            1..=3 => has("versions"),
            _ => {
                has("versions")
                    && has("meta")
                    && self.one_text(RECORDS_ID, &[]).ok().flatten().is_some()
            }
        };
        if ours { Ok(()) } else { Err(other()) }
    }
}
impl Tx<'_> {
    /// Migration 5 ([`super::scrub`]): every recorded URL and reason as it is recorded today.
    /// The index URLs typed at install (each host's, and each version's provenance) are read
    /// first, so the user information of one the typed-URL rule refuses is also removed from
    /// the URLs resolved against it. On SQLite a `compact` mark asks the open to rebuild the
    /// file once this commits ([`Records::compact_after_scrub`]).
    fn scrub_urls(&self) -> Result<(), Error> {
        let mut secrets = super::scrub::Secrets::default();
        let index_urls = self.rows(
            "SELECT host, digest, index_url FROM host_versions WHERE index_url IS NOT NULL",
            &[],
        )?;
        for r in &index_urls {
            secrets.learn(&r.text(2)?);
        }
        let mut versions = Vec::new();
        for r in self.rows(
            "SELECT digest, provenance, withdrawn_reason FROM versions",
            &[],
        )? {
            let prov: Value = serde_json::from_str(&r.text(1)?).map_err(json_err)?;
            secrets.learn_json(&prov);
            versions.push((r.text(0)?, prov, r.opt_text(2)?));
        }
        for r in &index_urls {
            if let Some(url) = super::scrub::url(&r.text(2)?, &secrets) {
                self.exec(
                    "UPDATE host_versions SET index_url = ? WHERE host = ? AND digest = ?",
                    args![url, r.text(0)?, r.text(1)?],
                )?;
            }
        }
        for (digest, mut prov, reason) in versions {
            let changed = super::scrub::json(&mut prov, &secrets);
            let reason = reason.and_then(|r| super::scrub::reason(&r, &secrets));
            if changed || reason.is_some() {
                self.exec(
                    "UPDATE versions SET provenance = ?, withdrawn_reason = COALESCE(?, withdrawn_reason) WHERE digest = ?",
                    args![prov.to_string(), reason, digest],
                )?;
            }
        }
        // The detail of a person's denial or a withdrawal is the reason given.
        for r in self.rows(
            "SELECT seq, detail FROM events WHERE kind IN ('denied', 'withdrawn')",
            &[],
        )? {
            if let Some(detail) = super::scrub::reason(&r.text(1)?, &secrets) {
                self.exec(
                    "UPDATE events SET detail = ? WHERE seq = ?",
                    args![detail, r.int(0)?],
                )?;
            }
        }
        if matches!(self.conn, TxConn::Sqlite(_)) {
            self.exec(
                "INSERT INTO meta (name, value) VALUES ('compact', 'pending')",
                &[],
            )?;
        }
        Ok(())
    }
}

/// The columns of a version, with `stored` and `agents` as this host sees them.
const VERSION_SELECT: &str = "SELECT v.digest, v.skill, v.state, CASE WHEN hv.digest IS NULL THEN 0 ELSE 1 END, v.decided_by, v.rule, v.findings, v.change_kind, v.review_sha256, v.review_summary, COALESCE(hv.agents, v.agents), v.provenance, v.withdrawn_reason, v.seq, v.created_at FROM versions v LEFT JOIN host_versions hv ON hv.digest = v.digest AND hv.host = ?";

const INSERT_COLUMNS: &str = "digest, skill, state, decided_by, rule, findings, change_kind, review_sha256, review_summary, agents, provenance, withdrawn_reason, seq, created_at";

fn decode_version(r: &Row) -> Result<Version, Error> {
    Ok(Version {
        digest: r.text(0)?,
        skill: r.text(1)?,
        state: State::parse(&r.text(2)?)?,
        stored: r.int(3)? != 0,
        quarantined: false,
        decided_by: r.text(4)?,
        rule: r.opt_text(5)?,
        findings: serde_json::from_str(&r.text(6)?).map_err(json_err)?,
        change: r.text(7)?,
        review_sha256: r.text(8)?,
        review_summary: r.text(9)?,
        agents: serde_json::from_str(&r.text(10)?).map_err(json_err)?,
        provenance: serde_json::from_str(&r.text(11)?).map_err(json_err)?,
        withdrawn_reason: r.opt_text(12)?,
        seq: r.int(13)?,
        created_at: r.text(14)?,
    })
}

fn decode_install(r: &Row) -> Result<Install, Error> {
    Ok(Install {
        agent: r.text(0)?,
        skill: r.text(1)?,
        digest: r.text(2)?,
        index_url: r.opt_text(3)?,
    })
}

fn decode_fleet_install(r: &Row) -> Result<FleetInstall, Error> {
    Ok(FleetInstall {
        host: r.text(0)?,
        agent: r.text(1)?,
        skill: r.text(2)?,
        digest: r.text(3)?,
    })
}

impl Tx<'_> {
    fn next_seq(&self, table: &str) -> Result<i64, Error> {
        let sql = format!("SELECT COALESCE(MAX(seq), 0) + 1 FROM {table}");
        self.rows(&sql, &[])?
            .first()
            .map(|r| r.int(0))
            .transpose()?
            .ok_or_else(|| Error::new(Kind::Operational, "records: no sequence number"))
    }

    fn versions_where(&self, clause: &str, more: &[Cell]) -> Result<Vec<Version>, Error> {
        let sql = format!("{VERSION_SELECT} {clause}");
        let mut a = vec![Cell::from(self.host)];
        a.extend_from_slice(more);
        self.rows(&sql, &a)?.iter().map(decode_version).collect()
    }

    pub fn version(&self, digest: &str) -> Result<Option<Version>, Error> {
        Ok(self
            .versions_where("WHERE v.digest = ?", args![digest])?
            .into_iter()
            .next())
    }

    /// Versions of one skill whose digest starts with `prefix` (a full digest is its own prefix).
    pub fn versions_matching(&self, skill: &str, prefix: &str) -> Result<Vec<Version>, Error> {
        // A range over the primary key (hex sorts below 'g'), so the index answers it; the
        // prefix is checked again here, whatever the database's collation.
        let upper = format!("{prefix}g");
        let mut found = self.versions_where(
            "WHERE v.digest >= ? AND v.digest < ? ORDER BY v.seq",
            args![prefix, upper],
        )?;
        found.retain(|v| v.skill == skill && v.digest.starts_with(prefix));
        Ok(found)
    }

    /// Every version of `skill`, oldest first.
    pub fn versions_of(&self, skill: &str) -> Result<Vec<Version>, Error> {
        self.versions_where("WHERE v.skill = ? ORDER BY v.seq", args![skill])
    }

    pub fn all_versions(&self) -> Result<Vec<Version>, Error> {
        self.versions_where("ORDER BY v.skill, v.seq", &[])
    }

    /// The newest approved version of `skill` in this host's store older than `before`.
    pub fn previous_approved(&self, skill: &str, before: i64) -> Result<Option<Version>, Error> {
        Ok(self
            .versions_where(
                "WHERE v.skill = ? AND v.state = 'approved' AND hv.digest IS NOT NULL AND v.seq < ? ORDER BY v.seq DESC LIMIT 1",
                args![skill, before],
            )?
            .into_iter()
            .next())
    }

    /// The digest of the newest version of `skill`.
    pub fn latest_digest(&self, skill: &str) -> Result<Option<String>, Error> {
        self.one_text(
            "SELECT digest FROM versions WHERE skill = ? ORDER BY seq DESC LIMIT 1",
            args![skill],
        )
    }

    /// Digests of every version whose tree is in this host's store.
    pub fn stored_digests(&self) -> Result<Vec<String>, Error> {
        self.rows(
            "SELECT digest FROM host_versions WHERE host = ?",
            args![self.host],
        )?
        .iter()
        .map(|r| r.text(0))
        .collect()
    }

    /// Every version without its JSON columns (what `list` shows), by skill then store order.
    pub fn version_list(&self) -> Result<Vec<Listed>, Error> {
        self.rows(
            "SELECT v.digest, v.skill, v.state, CASE WHEN hv.digest IS NULL THEN 0 ELSE 1 END, v.decided_by, v.change_kind, v.seq, v.created_at, v.withdrawn_reason FROM versions v LEFT JOIN host_versions hv ON hv.digest = v.digest AND hv.host = ? ORDER BY v.skill, v.seq",
            args![self.host],
        )?
        .iter()
        .map(|r| {
            Ok(Listed {
                digest: r.text(0)?,
                skill: r.text(1)?,
                state: State::parse(&r.text(2)?)?,
                stored: r.int(3)? != 0,
                quarantined: false,
                decided_by: r.text(4)?,
                change: r.text(5)?,
                seq: r.int(6)?,
                created_at: r.text(7)?,
                withdrawn_reason: r.opt_text(8)?,
            })
        })
        .collect()
    }

    pub fn insert_version(&self, v: &Version) -> Result<i64, Error> {
        let seq = self.next_seq("versions")?;
        let j = |x: &dyn erased::Ser| x.to_json();
        self.exec(
            &format!(
                "INSERT INTO versions ({INSERT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ),
            args![
                &v.digest,
                &v.skill,
                v.state.as_str(),
                &v.decided_by,
                v.rule.as_ref(),
                j(&v.findings)?,
                &v.change,
                &v.review_sha256,
                &v.review_summary,
                j(&v.agents)?,
                j(&v.provenance)?,
                v.withdrawn_reason.as_ref(),
                seq,
                &v.created_at,
            ],
        )?;
        self.set_host_version(&v.digest, v.stored.then_some(&v.agents[..]))?;
        Ok(seq)
    }

    /// Insert `v` when `seen` (the record as read in this same transaction) is none, or record
    /// the new intake's decision over `seen` (a collected version, an earlier policy's denial);
    /// history stays in events. The update is conditional on the record still holding `seen`'s
    /// decision and not being withdrawn, so it can never overwrite a decision it did not read.
    pub fn upsert_version(&self, v: &Version, seen: Option<&Version>) -> Result<(), Error> {
        let Some(seen) = seen else {
            return self.insert_version(v).map(|_| ());
        };
        let n = self.exec(
            "UPDATE versions SET state = ?, decided_by = ?, rule = ?, findings = ?, change_kind = ?, agents = ? WHERE digest = ? AND state = ? AND decided_by = ? AND state <> 'withdrawn'",
            args![
                v.state.as_str(),
                &v.decided_by,
                v.rule.as_ref(),
                erased::Ser::to_json(&v.findings)?,
                &v.change,
                erased::Ser::to_json(&v.agents)?,
                &v.digest,
                seen.state.as_str(),
                &seen.decided_by,
            ],
        )?;
        if n != 1 {
            return Err(self.changed(&v.digest, seen));
        }
        self.set_host_version(&v.digest, v.stored.then_some(&v.agents[..]))
    }

    /// Change a version's decision from `seen` (the record as read in this same transaction)
    /// to `state`. Security: conditional on the record still holding `seen`'s decision and not
    /// being withdrawn, so no write leaves `withdrawn` or lands on a decision (a person's denial,
    /// another host's) made after the caller decided.
    pub fn set_state(
        &self,
        seen: &Version,
        state: State,
        decided_by: &str,
        rule: Option<&str>,
    ) -> Result<(), Error> {
        let n = self.exec(
            "UPDATE versions SET state = ?, decided_by = ?, rule = ? WHERE digest = ? AND state = ? AND decided_by = ? AND state <> 'withdrawn'",
            args![
                state.as_str(),
                decided_by,
                rule,
                &seen.digest,
                seen.state.as_str(),
                &seen.decided_by
            ],
        )?;
        if n != 1 {
            return Err(self.changed(&seen.digest, seen));
        }
        Ok(())
    }

    /// The error of a conditional write that found the record changed: what it holds now.
    fn changed(&self, digest: &str, seen: &Version) -> Error {
        let now = match self.version(digest) {
            Ok(Some(v)) => v,
            Ok(None) => {
                return Error::new(
                    Kind::Operational,
                    format!(
                        "{}@{digest} vanished from the records; nothing was recorded",
                        seen.skill
                    ),
                );
            }
            Err(e) => return e,
        };
        let kind = match now.state {
            State::Withdrawn => Kind::Withdrawn,
            State::Denied => Kind::Denied,
            State::Pending => Kind::NeedsApproval,
            State::Approved => Kind::Operational,
        };
        Error::new(
            kind,
            format!(
                "{}@{digest} changed in the records since it was read: it was {} by {}, it is now {} by {}{}; nothing was recorded",
                seen.skill,
                seen.state.as_str(),
                seen.decided_by,
                now.state.as_str(),
                now.decided_by,
                now.withdrawn_reason
                    .as_deref()
                    .map(|r| format!(" (withdrawn: {r})"))
                    .unwrap_or_default()
            ),
        )
    }

    /// The review a person's decision covers (the one on the host they decided on).
    pub fn set_review(&self, digest: &str, sha256: &str, summary: &str) -> Result<(), Error> {
        self.exec(
            "UPDATE versions SET review_sha256 = ?, review_summary = ? WHERE digest = ?",
            args![sha256, summary, digest],
        )?;
        Ok(())
    }

    /// Withdraw `digest` with `reason`, unless it is withdrawn already: true when this call
    /// withdrew it, false when a withdrawal stands (it is kept, reason and all). Conditional in
    /// the statement itself, not on the caller's earlier read: two hosts that both read the
    /// version as not withdrawn and then withdraw it at once leave the first withdrawal
    /// standing, its reason, who and host never written over by the second.
    pub fn withdraw(&self, digest: &str, reason: &str) -> Result<bool, Error> {
        let n = self.exec(
            "UPDATE versions SET state = 'withdrawn', withdrawn_reason = ? WHERE digest = ? AND state <> 'withdrawn'",
            args![reason, digest],
        )?;
        Ok(n == 1)
    }

    /// Whether this host's store holds the version's tree.
    pub fn set_stored(&self, digest: &str, stored: bool) -> Result<(), Error> {
        if stored {
            self.exec(
                "INSERT INTO host_versions (host, digest, agents) VALUES (?, ?, '[]') ON CONFLICT (host, digest) DO NOTHING",
                args![self.host, digest],
            )?;
            return Ok(());
        }
        self.set_host_version(digest, None)
    }

    /// Record the version in this host's store with the agents its install asked for, or (None)
    /// out of it.
    pub fn set_host_version(&self, digest: &str, agents: Option<&[String]>) -> Result<(), Error> {
        match agents {
            Some(a) => self.exec(
                "INSERT INTO host_versions (host, digest, agents) VALUES (?, ?, ?)
                 ON CONFLICT (host, digest) DO UPDATE SET agents = excluded.agents",
                args![self.host, digest, erased::Ser::to_json(&a)?],
            ),
            None => self.exec(
                "DELETE FROM host_versions WHERE host = ? AND digest = ?",
                args![self.host, digest],
            ),
        }?;
        Ok(())
    }

    /// The index this host installed `digest` from (none: a local file).
    pub fn set_index_url(&self, digest: &str, url: Option<&str>) -> Result<(), Error> {
        self.exec(
            "UPDATE host_versions SET index_url = ? WHERE host = ? AND digest = ?",
            args![url, self.host, digest],
        )?;
        Ok(())
    }

    /// The index this host last installed a version of `skill` from: the newest version in this
    /// host's store with one (a version recorded before hosts kept their own: its provenance).
    pub fn host_index_url(&self, skill: &str) -> Result<Option<String>, Error> {
        for r in self.rows(
            "SELECT hv.index_url, v.provenance FROM host_versions hv JOIN versions v ON v.digest = hv.digest WHERE hv.host = ? AND v.skill = ? ORDER BY v.seq DESC",
            args![self.host, skill],
        )? {
            if let Some(u) = index_of_row(r)? {
                return Ok(Some(u));
            }
        }
        Ok(None)
    }

    // ------------------------------------------------------------ hosts

    pub fn hosts(&self) -> Result<Vec<HostRow>, Error> {
        self.rows(
            "SELECT name, first_seen, last_sync FROM hosts ORDER BY name",
            &[],
        )?
        .iter()
        .map(|r| {
            Ok(HostRow {
                name: r.text(0)?,
                first_seen: r.text(1)?,
                last_sync: r.opt_text(2)?,
            })
        })
        .collect()
    }

    /// A host's store id, when it was first seen, its last sync, and the time of its newest
    /// event: what says whether it is still at work.
    pub fn host_activity(&self, name: &str) -> Result<Option<HostActivity>, Error> {
        let Some(r) = self
            .rows(
                "SELECT store_id, first_seen, last_sync FROM hosts WHERE name = ?",
                args![name],
            )?
            .into_iter()
            .next()
        else {
            return Ok(None);
        };
        let last_event = self
            .rows("SELECT MAX(time) FROM events WHERE host = ?", args![name])?
            .first()
            .map(|e| e.opt_text(0))
            .transpose()?
            .flatten();
        Ok(Some(HostActivity {
            store_id: r.text(0)?,
            first_seen: r.text(1)?,
            last_sync: r.opt_text(2)?,
            last_event,
        }))
    }

    /// Remove every row the records keep for host `name` (its agents, their installations, the
    /// versions in its store, its unfinished steps, its hosts row) and return them. Events stay:
    /// they are the fleet's history.
    pub fn forget_host(&self, name: &str) -> Result<Option<HostSnapshot>, Error> {
        let Some(HostActivity {
            store_id,
            first_seen,
            last_sync,
            ..
        }) = self.host_activity(name)?
        else {
            return Ok(None);
        };
        let agents = self
            .rows(
                "SELECT name, dir FROM agents WHERE host = ? ORDER BY name",
                args![name],
            )?
            .iter()
            .map(|r| Ok((r.text(0)?, r.text(1)?)))
            .collect::<Result<Vec<_>, Error>>()?;
        let installs = self
            .rows(
                "SELECT agent, skill, digest, index_url FROM installs WHERE host = ? ORDER BY agent, skill",
                args![name],
            )?
            .iter()
            .map(decode_install)
            .collect::<Result<Vec<_>, Error>>()?;
        let versions = self
            .rows(
                "SELECT digest, agents, index_url FROM host_versions WHERE host = ? ORDER BY digest",
                args![name],
            )?
            .iter()
            .map(|r| Ok((r.text(0)?, r.text(1)?, r.opt_text(2)?)))
            .collect::<Result<Vec<_>, Error>>()?;
        let intents = self
            .rows(
                "SELECT seq, payload, created_at FROM intents WHERE host = ? ORDER BY seq",
                args![name],
            )?
            .iter()
            .map(|r| Ok((r.int(0)?, r.text(1)?, r.text(2)?)))
            .collect::<Result<Vec<_>, Error>>()?;
        for table in ["installs", "agents", "host_versions", "intents"] {
            self.exec(&format!("DELETE FROM {table} WHERE host = ?"), args![name])?;
        }
        self.exec("DELETE FROM hosts WHERE name = ?", args![name])?;
        Ok(Some(HostSnapshot {
            host: name.to_owned(),
            store_id,
            first_seen,
            last_sync,
            agents,
            installs,
            versions,
            intents,
        }))
    }

    /// When `store_id` was forgotten (the newest `host_forgotten` snapshot of it) and holds no
    /// rows now, give this host (`name`, the name it registers under) its rows back, with a
    /// `host_returned` event. Called in the transaction that registers the store again.
    fn restore_forgotten(&self, name: &str, store_id: &str, time: &str) -> Result<(), Error> {
        let mut found = None;
        for r in self.rows(
            "SELECT detail FROM events WHERE kind = 'host_forgotten' AND digest IS NULL ORDER BY seq DESC",
            &[],
        )? {
            let Ok(detail) = serde_json::from_str::<Value>(&r.text(0)?) else {
                continue;
            };
            let Some(snap) = detail
                .get("snapshot")
                .and_then(|s| serde_json::from_value::<HostSnapshot>(s.clone()).ok())
            else {
                continue;
            };
            if snap.store_id == store_id {
                found = Some(snap);
                break;
            }
        }
        let Some(snap) = found else {
            return Ok(());
        };
        for (agent, dir) in &snap.agents {
            self.exec(
                "INSERT INTO agents (host, name, dir) VALUES (?, ?, ?) ON CONFLICT (host, name) DO NOTHING",
                args![name, agent, dir],
            )?;
        }
        for (digest, agents, url) in &snap.versions {
            self.exec(
                "INSERT INTO host_versions (host, digest, agents, index_url) VALUES (?, ?, ?, ?) ON CONFLICT (host, digest) DO NOTHING",
                args![name, digest, agents, url.as_ref()],
            )?;
        }
        for i in &snap.installs {
            // An installation without an index of its own (recorded before schema 6, or taken
            // by an older skillbox's snapshot) takes the one its agent's events name (they
            // stay, under the name it was forgotten as), else its host's, as before.
            let index = match &i.index_url {
                Some(u) => Some(u.clone()),
                None => self.index_in_events(&snap.host, &i.agent, &i.digest)?,
            };
            self.exec(
                "INSERT INTO installs (host, agent, skill, digest, index_url) VALUES (?, ?, ?, ?, ?) ON CONFLICT (host, agent, skill) DO NOTHING",
                args![name, &i.agent, &i.skill, &i.digest, index],
            )?;
        }
        for (seq, payload, created) in &snap.intents {
            self.exec(
                "INSERT INTO intents (host, seq, payload, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (host, seq) DO NOTHING",
                args![name, *seq, payload, created],
            )?;
        }
        let seq = self.next_seq("events")?;
        let detail = format!(
            "host {name} is back (its store was forgotten as host {}): its {} agent(s), {} installation(s) and {} stored version(s) are recorded again",
            snap.host,
            snap.agents.len(),
            snap.installs.len(),
            snap.versions.len()
        );
        self.exec(
            "INSERT INTO events (seq, time, skill, digest, kind, actor, detail, host) VALUES (?, ?, '', NULL, 'host_returned', 'skillbox', ?, ?)",
            args![seq, time, detail, name],
        )?;
        Ok(())
    }

    /// Note that this host applied the fleet's decisions at `time`.
    pub fn set_last_sync(&self, time: &str) -> Result<(), Error> {
        self.exec(
            "UPDATE hosts SET last_sync = ? WHERE name = ?",
            args![time, self.host],
        )?;
        Ok(())
    }

    // ------------------------------------------------------------ agents

    pub fn agent_dir(&self, name: &str) -> Result<Option<String>, Error> {
        self.one_text(
            "SELECT dir FROM agents WHERE host = ? AND name = ?",
            args![self.host, name],
        )
    }

    pub fn agents(&self) -> Result<Vec<(String, String)>, Error> {
        self.rows(
            "SELECT name, dir FROM agents WHERE host = ? ORDER BY name",
            args![self.host],
        )?
        .iter()
        .map(|r| Ok((r.text(0)?, r.text(1)?)))
        .collect()
    }

    pub fn add_agent(&self, name: &str, dir: &str) -> Result<(), Error> {
        self.exec(
            "INSERT INTO agents (host, name, dir) VALUES (?, ?, ?) ON CONFLICT (host, name) DO NOTHING",
            args![self.host, name, dir],
        )?;
        Ok(())
    }

    // ------------------------------------------------------------ installs

    fn installs_where(&self, clause: &str, more: &[Cell]) -> Result<Vec<Install>, Error> {
        let sql =
            format!("SELECT agent, skill, digest, index_url FROM installs WHERE host = ? {clause}");
        let mut a = vec![Cell::from(self.host)];
        a.extend_from_slice(more);
        self.rows(&sql, &a)?.iter().map(decode_install).collect()
    }

    /// This host's installations.
    pub fn installs(&self) -> Result<Vec<Install>, Error> {
        self.installs_where("ORDER BY skill, agent", &[])
    }

    pub fn installs_of(&self, skill: &str) -> Result<Vec<Install>, Error> {
        self.installs_where("AND skill = ? ORDER BY agent", args![skill])
    }

    pub fn installs_using(&self, digest: &str) -> Result<Vec<Install>, Error> {
        self.installs_where("AND digest = ? ORDER BY agent", args![digest])
    }

    /// Every host's installations of `digest`, by host then agent.
    pub fn fleet_installs_using(&self, digest: &str) -> Result<Vec<FleetInstall>, Error> {
        self.rows(
            "SELECT host, agent, skill, digest FROM installs WHERE digest = ? ORDER BY host, agent",
            args![digest],
        )?
        .iter()
        .map(decode_fleet_install)
        .collect()
    }

    /// Every host's installations of `digest` with the index each is taken from (its own
    /// record, else the index that host installed the digest from; empty: a local file or not
    /// known), by host then agent.
    pub fn fleet_sources_of(&self, digest: &str) -> Result<Vec<(String, String, String)>, Error> {
        self.rows(
            "SELECT i.host, i.agent, COALESCE(i.index_url, hv.index_url, '') FROM installs i LEFT JOIN host_versions hv ON hv.host = i.host AND hv.digest = i.digest WHERE i.digest = ? ORDER BY i.host, i.agent",
            args![digest],
        )?
        .iter()
        .map(|r| Ok((r.text(0)?, r.text(1)?, r.text(2)?)))
        .collect()
    }

    /// Every installation, on any host, of a withdrawn version: what containment waits for.
    pub fn fleet_installs_of_withdrawn(&self) -> Result<Vec<FleetInstall>, Error> {
        self.rows(
            "SELECT i.host, i.agent, i.skill, i.digest FROM installs i JOIN versions v ON v.digest = i.digest WHERE v.state = 'withdrawn' ORDER BY i.skill, i.digest, i.host, i.agent",
            &[],
        )?
        .iter()
        .map(decode_fleet_install)
        .collect()
    }

    pub fn install(&self, agent: &str, skill: &str) -> Result<Option<String>, Error> {
        self.one_text(
            "SELECT digest FROM installs WHERE host = ? AND agent = ? AND skill = ?",
            args![self.host, agent, skill],
        )
    }

    /// Point `agent`'s `skill` at `digest`, or remove the installation (`None`).
    pub fn set_install(&self, agent: &str, skill: &str, digest: Option<&str>) -> Result<(), Error> {
        match digest {
            Some(d) => self.exec(
                "INSERT INTO installs (host, agent, skill, digest) VALUES (?, ?, ?, ?)
                 ON CONFLICT (host, agent, skill) DO UPDATE SET digest = excluded.digest",
                args![self.host, agent, skill, d],
            ),
            None => self.exec(
                "DELETE FROM installs WHERE host = ? AND agent = ? AND skill = ?",
                args![self.host, agent, skill],
            ),
        }?;
        Ok(())
    }

    /// Record the index `agent`'s `skill` is taken from on this host (`""`: a local file).
    /// Kept by every later move that is not an intake (rollback, a withdrawal's move).
    pub fn set_install_source(&self, agent: &str, skill: &str, url: &str) -> Result<(), Error> {
        self.set_install_index(agent, skill, Some(url))
    }

    /// The index `install` is taken from (`None`: a local file, or nothing known): its own
    /// record, else the index this host installed its digest from, else its version's
    /// provenance (a version recorded before hosts kept their own).
    pub fn source_of(&self, install: &Install) -> Result<Option<String>, Error> {
        Ok(self.index_of(install)?.filter(|u| !u.is_empty()))
    }

    /// [`Tx::source_of`], a local file told apart: `Some("")` is a local file, `None` not
    /// known. What an event about the agent records.
    pub fn index_of(&self, install: &Install) -> Result<Option<String>, Error> {
        if let Some(u) = &install.index_url {
            return Ok(Some(u.clone()));
        }
        let rows = self.rows(
            "SELECT hv.index_url, v.provenance FROM host_versions hv JOIN versions v ON v.digest = hv.digest WHERE hv.host = ? AND hv.digest = ?",
            args![self.host, &install.digest],
        )?;
        let Some(r) = rows.into_iter().next() else {
            return Ok(None);
        };
        match r.opt_text(0)? {
            Some(u) => Ok(Some(u)),
            None => index_of_row(r),
        }
    }

    /// This host's installation of `skill` for `agent`, with the index it is taken from.
    pub fn install_row(&self, agent: &str, skill: &str) -> Result<Option<Install>, Error> {
        Ok(self
            .installs_where("AND agent = ? AND skill = ?", args![agent, skill])?
            .into_iter()
            .next())
    }

    /// The index `agent`'s installation of `skill` is taken from now ([`Tx::index_of`]); none
    /// without an installation.
    pub fn index_of_agent(&self, agent: &str, skill: &str) -> Result<Option<String>, Error> {
        match self.install_row(agent, skill)? {
            Some(i) => self.index_of(&i),
            None => Ok(None),
        }
    }

    /// Set (`Some`, `""` for a local file) or clear (`None`: its host's index applies, as
    /// [`Tx::source_of`] reads it) the index of `agent`'s installation of `skill`.
    pub fn set_install_index(
        &self,
        agent: &str,
        skill: &str,
        url: Option<&str>,
    ) -> Result<(), Error> {
        self.exec(
            "UPDATE installs SET index_url = ? WHERE host = ? AND agent = ? AND skill = ?",
            args![url, self.host, agent, skill],
        )?;
        Ok(())
    }

    // ------------------------------------------------------------ events

    /// Record an event of this host about a version (or none).
    pub fn event(
        &self,
        time: &str,
        skill: &str,
        digest: Option<&str>,
        kind: &str,
        actor: &str,
        detail: &str,
    ) -> Result<(), Error> {
        self.event_about(time, skill, digest, kind, actor, detail, About::default())
    }

    /// Record an event of this host about an agent (and the index it took the version from),
    /// or about an intake's index.
    #[allow(clippy::too_many_arguments)]
    pub fn event_about(
        &self,
        time: &str,
        skill: &str,
        digest: Option<&str>,
        kind: &str,
        actor: &str,
        detail: &str,
        about: About<'_>,
    ) -> Result<(), Error> {
        let seq = self.next_seq("events")?;
        self.exec(
            "INSERT INTO events (seq, time, skill, digest, kind, actor, detail, host, agent, index_url) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            args![
                seq,
                time,
                skill,
                digest,
                kind,
                actor,
                detail,
                self.host,
                about.agent,
                about.index_url
            ],
        )?;
        Ok(())
    }

    /// The index `agent` of host `host` took `digest` from, as the newest event recording its
    /// arrival on it says (`activated`, `link_found`: recorded with the index since schema 7);
    /// `None` when no such event names one. What a link found again, or a host coming back,
    /// takes before its host's index ([`Tx::source_of`]).
    pub fn index_in_events(
        &self,
        host: &str,
        agent: &str,
        digest: &str,
    ) -> Result<Option<String>, Error> {
        self.rows(
            "SELECT index_url FROM events WHERE host = ? AND agent = ? AND digest = ? AND kind IN ('activated', 'link_found') AND index_url IS NOT NULL ORDER BY seq DESC",
            args![host, agent, digest],
        )?
        .into_iter()
        .next()
        .map(|r| r.text(0))
        .transpose()
    }

    /// Migration 7, for the events recorded before it: each event about one agent names that
    /// agent (read from its detail) and, while that agent's installation is still on the
    /// version, the index the installation records (schema 6 kept one per agent). Otherwise
    /// none: not known. The index its host last installed the version from is not taken: it
    /// may be another agent's (a mirror), and a link found again trusts what an event names
    /// ([`Tx::index_in_events`]). An intake's `installed`/`updated` names none either (the
    /// version's provenance keeps the index of the first).
    fn fill_event_sources(&self) -> Result<(), Error> {
        let kinds = AGENT_EVENT_KINDS
            .iter()
            .map(|k| format!("'{k}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let rows = self.rows(
            &format!(
                "SELECT seq, detail, host, digest FROM events WHERE kind IN ({kinds}) AND digest IS NOT NULL"
            ),
            &[],
        )?;
        for r in rows {
            let (seq, detail) = (r.int(0)?, r.text(1)?);
            let Some(agent) = agent_of_detail(&detail) else {
                continue;
            };
            let index = match (r.opt_text(2)?, r.opt_text(3)?) {
                (Some(host), Some(digest)) => self
                    .rows(
                        "SELECT index_url FROM installs WHERE host = ? AND agent = ? AND digest = ?",
                        args![&host, agent, &digest],
                    )?
                    .into_iter()
                    .next()
                    .map(|r| r.opt_text(0))
                    .transpose()?
                    .flatten(),
                _ => None,
            };
            self.exec(
                "UPDATE events SET agent = ?, index_url = ? WHERE seq = ?",
                args![agent, index, seq],
            )?;
        }
        Ok(())
    }

    /// The events of one version of `skill`, oldest first, from every host.
    pub fn events_of(&self, skill: &str, digest: &str) -> Result<Vec<Event>, Error> {
        self.rows(
            "SELECT seq, time, skill, digest, kind, actor, detail, host, agent, index_url FROM events WHERE digest = ? AND skill = ? ORDER BY seq",
            args![digest, skill],
        )?
        .iter()
        .map(|r| {
            Ok(Event {
                seq: r.int(0)?,
                time: r.text(1)?,
                skill: r.text(2)?,
                digest: r.opt_text(3)?,
                kind: r.text(4)?,
                actor: r.text(5)?,
                detail: r.text(6)?,
                host: r.opt_text(7)?,
                agent: r.opt_text(8)?,
                index_url: r.opt_text(9)?,
            })
        })
        .collect()
    }

    // ------------------------------------------------------------ intents

    pub fn add_intent(&self, payload: &Value, time: &str) -> Result<i64, Error> {
        let seq = self.next_seq("intents")?;
        self.exec(
            "INSERT INTO intents (host, seq, payload, created_at) VALUES (?, ?, ?, ?)",
            args![self.host, seq, payload.to_string(), time],
        )?;
        Ok(seq)
    }

    /// This host's intents: only it can finish the filesystem steps they describe.
    pub fn intents(&self) -> Result<Vec<Intent>, Error> {
        self.rows(
            "SELECT seq, payload, created_at FROM intents WHERE host = ? ORDER BY seq",
            args![self.host],
        )?
        .iter()
        .map(|r| {
            Ok(Intent {
                seq: r.int(0)?,
                payload: serde_json::from_str(&r.text(1)?).map_err(json_err)?,
                created_at: r.text(2)?,
            })
        })
        .collect()
    }

    /// Every host's unfinished intents, with the host that wrote each: `status` on any host
    /// counts the switches another host still has to make off a withdrawn version.
    pub fn fleet_intents(&self) -> Result<Vec<(String, Intent)>, Error> {
        self.rows(
            "SELECT host, seq, payload, created_at FROM intents ORDER BY host, seq",
            &[],
        )?
        .iter()
        .map(|r| {
            Ok((
                r.text(0)?,
                Intent {
                    seq: r.int(1)?,
                    payload: serde_json::from_str(&r.text(2)?).map_err(json_err)?,
                    created_at: r.text(3)?,
                },
            ))
        })
        .collect()
    }

    pub fn remove_intent(&self, seq: i64) -> Result<(), Error> {
        self.exec(
            "DELETE FROM intents WHERE host = ? AND seq = ?",
            args![self.host, seq],
        )?;
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
pub(crate) mod tests {
    use super::*;

    fn host(name: &str) -> HostChoice {
        HostChoice {
            name: name.into(),
            explicit: true,
        }
    }

    fn open(path: &Path, name: &str) -> Result<Records, Error> {
        Records::open_at(
            &Location::Sqlite,
            path,
            &host(name),
            "0123456789abcdef0123456789abcdef",
        )
    }

    fn sqlite(r: &Records) -> &Connection {
        match &r.conn {
            Backend::Sqlite(c) => c,
            Backend::Postgres(_) => panic!("not sqlite"),
        }
    }

    #[test]
    fn migrations_apply_once_in_order_and_a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("records.db");
        let mut r = open(&path, "h1").unwrap_or_else(|e| panic!("{e}"));
        let versions: Vec<i64> = sqlite(&r)
            .prepare("SELECT version FROM schema_version ORDER BY version")
            .and_then(|mut s| s.query_map([], |row| row.get(0))?.collect())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(versions, [1, 2, 3, 4, 5, 6, 7]);
        r.write(|tx| tx.add_agent("a", "/x"))
            .unwrap_or_else(|e| panic!("{e}"));
        drop(r);
        // Reopening applies nothing again and keeps the data.
        let mut r = open(&path, "h1").unwrap_or_else(|e| panic!("{e}"));
        let dir_of = r
            .read(|tx| tx.agent_dir("a"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(dir_of.as_deref(), Some("/x"));
        sqlite(&r)
            .execute("INSERT INTO schema_version (version) VALUES (99)", [])
            .unwrap_or_else(|e| panic!("{e}"));
        drop(r);
        let e = open(&path, "h1")
            .err()
            .map(|e| e.message)
            .unwrap_or_default();
        assert!(e.contains("schema version 99"), "{e}");
    }

    /// A records.db made by the schema before hosts (migrations 1 and 2, as main wrote it)
    /// migrates forward: everything it held becomes this host's, and keeps working.
    #[test]
    fn a_single_host_database_migrates_to_hosts() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("records.db");
        {
            let c = Connection::open(&path).unwrap_or_else(|e| panic!("{e}"));
            c.execute_batch(
                "CREATE TABLE schema_version (version INTEGER NOT NULL);
                 INSERT INTO schema_version (version) VALUES (1), (2);",
            )
            .unwrap_or_else(|e| panic!("{e}"));
            for step in &MIGRATIONS[..2] {
                let Step::Sql(sql) = step else {
                    panic!("migrations 1 and 2 are SQL")
                };
                c.execute_batch(sql).unwrap_or_else(|e| panic!("{e}"));
            }
            c.execute_batch(
                "INSERT INTO versions VALUES ('sha256:aa', 'demo', 'approved', 1, 'policy', 'r', '[]', 'first', 'sha256:r1', 's', '[\"alpha\"]', '{}', NULL, 1, 't1');
                 INSERT INTO versions VALUES ('sha256:bb', 'demo', 'approved', 0, 'person:al', NULL, '[]', 'content_only', 'sha256:r2', 's', '[]', '{}', NULL, 2, 't2');
                 INSERT INTO agents VALUES ('alpha', '/agents/alpha');
                 INSERT INTO installs VALUES ('alpha', 'demo', 'sha256:aa');
                 INSERT INTO events VALUES (1, 't1', 'demo', 'sha256:aa', 'installed', 'skillbox', 'change: first');
                 INSERT INTO intents VALUES (7, '{\"op\":\"links\",\"skill\":\"demo\",\"changes\":[]}', 't3');",
            )
            .unwrap_or_else(|e| panic!("{e}"));
        }
        let mut r = open(&path, "old-host").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.host(), "old-host");
        let (a, b, agents, installs, events, intents, hosts) = r
            .read(|tx| {
                Ok((
                    tx.version("sha256:aa")?,
                    tx.version("sha256:bb")?,
                    tx.agents()?,
                    tx.installs()?,
                    tx.events_of("demo", "sha256:aa")?,
                    tx.intents()?,
                    tx.hosts()?,
                ))
            })
            .unwrap_or_else(|e| panic!("{e}"));
        let a = a.unwrap_or_else(|| panic!("version aa"));
        assert!(a.stored);
        assert_eq!(a.agents, ["alpha"]);
        assert!(!b.unwrap_or_else(|| panic!("version bb")).stored);
        assert_eq!(agents, [("alpha".to_owned(), "/agents/alpha".to_owned())]);
        assert_eq!(installs.len(), 1);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].host, None);
        assert_eq!(intents.len(), 1);
        assert_eq!(intents[0].seq, 7);
        assert_eq!(hosts.len(), 1);
        assert_eq!(hosts[0].name, "old-host");
        // It keeps working: new rows take the next sequence numbers, per host.
        r.write(|tx| {
            tx.event("t4", "demo", Some("sha256:aa"), "activated", "x", "y")?;
            tx.remove_intent(7)?;
            tx.set_stored("sha256:bb", true)
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let (events, stored) = r
            .read(|tx| Ok((tx.events_of("demo", "sha256:aa")?, tx.stored_digests()?)))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(events[1].seq, 2);
        assert_eq!(events[1].host.as_deref(), Some("old-host"));
        assert_eq!(stored.len(), 2);
        // Another host name for the same store is refused; the system hostname yields.
        drop(r);
        let e = open(&path, "new-name").err().map(|e| e.message);
        assert!(
            e.as_deref()
                .is_some_and(|m| m.contains("this store is host old-host")),
            "{e:?}"
        );
        let r = Records::open_at(
            &Location::Sqlite,
            &path,
            &HostChoice {
                name: "renamed-machine".into(),
                explicit: false,
            },
            "0123456789abcdef0123456789abcdef",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.host(), "old-host");
    }

    pub(crate) fn version(digest: &str, state: State, decided_by: &str) -> Version {
        Version {
            digest: digest.into(),
            skill: "demo".into(),
            state,
            stored: true,
            quarantined: false,
            decided_by: decided_by.into(),
            rule: None,
            findings: Vec::new(),
            change: "first".into(),
            review_sha256: "sha256:r".into(),
            review_summary: "s".into(),
            agents: vec!["alpha".into()],
            provenance: serde_json::json!({}),
            withdrawn_reason: None,
            seq: 0,
            created_at: "t".into(),
        }
    }

    fn read_version(r: &mut Records, digest: &str) -> Version {
        r.read(|tx| tx.version(digest))
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("no version {digest}"))
    }

    /// Two handles on one records file, as two hosts (or two commands) are: a decision read by
    /// one before the other withdrew the version, or a person denied it, is never written over
    /// the newer decision (the write is conditional on the record it read).
    #[test]
    fn a_decision_read_before_a_withdrawal_or_a_denial_is_not_written_over_it() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("records.db");
        let mut one = open(&path, "h1").unwrap_or_else(|e| panic!("{e}"));
        let mut two = open(&path, "h1").unwrap_or_else(|e| panic!("{e}"));
        for d in ["sha256:aa", "sha256:bb"] {
            one.write(|tx| tx.insert_version(&version(d, State::Pending, "policy")))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        // Read by one; withdrawn through the other; then one approves (approve's write).
        let seen = read_version(&mut one, "sha256:aa");
        two.write(|tx| tx.withdraw("sha256:aa", "exfiltrates"))
            .unwrap_or_else(|e| panic!("{e}"));
        let e = one
            .write(|tx| tx.set_state(&seen, State::Approved, "person:al", None))
            .err()
            .unwrap_or_else(|| panic!("approved over a withdrawal"));
        assert_eq!(e.kind, Kind::Withdrawn, "{e}");
        assert!(e.message.contains("nothing was recorded"), "{e}");
        // An intake's write (upsert) from the same stale copy is refused too.
        let approved = version("sha256:aa", State::Approved, "policy");
        let e = one
            .write(|tx| tx.upsert_version(&approved, Some(&seen)))
            .err()
            .unwrap_or_else(|| panic!("re-recorded over a withdrawal"));
        assert_eq!(e.kind, Kind::Withdrawn, "{e}");
        let now = read_version(&mut one, "sha256:aa");
        assert_eq!(now.state, State::Withdrawn);
        assert_eq!(now.decided_by, "policy");
        // A person's denial through the other handle stands against a policy's approval.
        let seen = read_version(&mut one, "sha256:bb");
        let bb = read_version(&mut two, "sha256:bb");
        two.write(|tx| tx.set_state(&bb, State::Denied, "person:bo", None))
            .unwrap_or_else(|e| panic!("{e}"));
        let e = one
            .write(|tx| {
                tx.upsert_version(
                    &version("sha256:bb", State::Approved, "policy"),
                    Some(&seen),
                )
            })
            .err()
            .unwrap_or_else(|| panic!("a policy overwrote a person's denial"));
        assert_eq!(e.kind, Kind::Denied, "{e}");
        let now = read_version(&mut one, "sha256:bb");
        assert_eq!(
            (now.state, now.decided_by.as_str()),
            (State::Denied, "person:bo")
        );
        // Read in the same transaction, the write goes through.
        one.write(|tx| {
            let fresh = tx.version("sha256:bb")?.unwrap_or_else(|| panic!("bb"));
            tx.set_state(&fresh, State::Approved, "person:al", None)
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read_version(&mut two, "sha256:bb").state, State::Approved);
    }

    #[test]
    fn placeholders_become_numbered_outside_quotes() {
        assert_eq!(
            pg_sql("SELECT a FROM t WHERE b = ? AND c = '?' AND d IN (?, ?)"),
            "SELECT a FROM t WHERE b = $1 AND c = '?' AND d IN ($2, $3)"
        );
    }
}
