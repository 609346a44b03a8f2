//! The lifecycle commands' command line: clap types, printing and exit codes for install,
//! review, approve, deny, update, rollback, withdraw, list, status, provenance, gc, verify and
//! sync, and the flags saying where the records are (`--records`) and which host this is.
//!
//! Everything a package wrote (names, excerpts, hosts, paths) is printed escaped; nothing here
//! decides anything: the library does, this only shows it.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde::Serialize;
use serde_json::{Value, json};

use super::fetch::{ArtifactPolicyArgs, PolicyArgs};
use super::limits::LimitFlags;
use super::sandbox::{LeadingSandboxArgs, SandboxArgs};
use skillbox::digest::Sha256Digest;
use skillbox::extract::policy::Limits;
use skillbox::lifecycle::agents::AgentArg;
use skillbox::lifecycle::fleet::{self, HostChoice, Location};
use skillbox::lifecycle::ops::{self, Fetcher, InstallReport, Intake, Source, VersionRef};
use skillbox::lifecycle::policy::{Decision, Policy};
use skillbox::lifecycle::quarantine;
use skillbox::lifecycle::store::{self, Access, Store};
use skillbox::lifecycle::{Error, Kind, redact_message};
use skillbox::reason::display_name;
use skillbox::skill::review::{Review, escape_bounded};

/// Success.
pub const EXIT_OK: u8 = 0;
/// Corrupt store, read-only filesystem, I/O, an entry in a skills directory skillbox did not
/// create.
pub const EXIT_OPERATIONAL: u8 = 1;
/// Bad flag or argument, bad policy file, a store that is not ours, records the store is not
/// bound to, an agent on another agent's directory, an agent directory reached through a link
/// another user could change.
pub const EXIT_USAGE: u8 = 2;
/// Rejected by the engine (digest mismatch, hostile archive, invalid SKILL.md).
pub const EXIT_REJECTED: u8 = 3;
/// Refused by the fetch policy (the rule is named).
pub const EXIT_REFUSED: u8 = 4;
/// Unrecognised index `$schema`.
pub const EXIT_SCHEMA: u8 = 5;
/// The version needs a person's approval (`skillbox review`, then `approve` or `deny`).
pub const EXIT_NEEDS_APPROVAL: u8 = 6;
/// Denied by the policy or by a person.
pub const EXIT_DENIED: u8 = 7;
/// Unknown skill, agent or digest, or a version not in the store.
pub const EXIT_NOT_FOUND: u8 = 8;
/// The version was withdrawn; for `status`, a withdrawn version is still on an agent (not
/// contained).
pub const EXIT_WITHDRAWN: u8 = 9;

/// The exit table every lifecycle command's `--help` ends with, its last entry (what 9 means)
/// given per command.
macro_rules! exit_codes_help {
    ($nine:literal) => {
        concat!(
            "Exit status: 0 ok, 1 operational (corrupt store, read-only filesystem, I/O, an entry skillbox did not create), 2 usage (bad flag, bad policy file, a store or an agent directory refused as given), 3 rejected by the engine, 4 refused by the fetch policy, 5 unknown index $schema, 6 needs approval, 7 denied, 8 not found, 9 ",
            $nine,
            "."
        )
    };
}

const EXIT_CODES_HELP: &str = exit_codes_help!("withdrawn");

/// `status`: 9 says a withdrawal is not contained yet, for a script asking just that.
const STATUS_EXIT_CODES_HELP: &str = exit_codes_help!(
    "a withdrawn version is still on an agent of some host (STILL ON; withdrawn_in_use with a non-empty still_on in --json): not contained yet; or a withdrawal made here with --local that the records lost, or that was never written (WITHDRAWAL LOST, WITHDRAWAL NOT WRITTEN); everything is printed first, --json in full"
);

fn exit_of(kind: Kind) -> u8 {
    match kind {
        Kind::Operational => EXIT_OPERATIONAL,
        Kind::Usage => EXIT_USAGE,
        Kind::Rejected => EXIT_REJECTED,
        Kind::Refused => EXIT_REFUSED,
        Kind::Schema => EXIT_SCHEMA,
        Kind::NeedsApproval => EXIT_NEEDS_APPROVAL,
        Kind::Denied => EXIT_DENIED,
        Kind::NotFound => EXIT_NOT_FOUND,
        Kind::Withdrawn => EXIT_WITHDRAWN,
    }
}

fn kind_str(kind: Kind) -> &'static str {
    match kind {
        Kind::Operational => "operational",
        Kind::Usage => "usage",
        Kind::Rejected => "rejected",
        Kind::Refused => "refused",
        Kind::Schema => "unrecognised_schema",
        Kind::NeedsApproval => "needs_approval",
        Kind::Denied => "denied",
        Kind::NotFound => "not_found",
        Kind::Withdrawn => "withdrawn",
    }
}

/// Flags every lifecycle command takes.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// The store [default: $XDG_DATA_HOME/skillbox, else ~/.local/share/skillbox; as root
    /// /var/lib/skillbox]. Created 0700; one owned by someone else, group- or world-writable,
    /// or a symlink is refused.
    #[arg(long, value_name = "DIR", env = "SKILLBOX_STORE")]
    store: Option<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Where the records are: the store's SQLite file [default], or a PostgreSQL database a
    /// fleet of hosts shares: postgres://USER@HOST:PORT/DB (or postgresql://; a Unix socket as
    /// postgres://USER@/DB?host=/DIR). A host beyond loopback is reached over TLS only
    /// (verify-full; ?sslmode=verify-full asks for it on loopback too). The password:
    /// --records-password-file, else the URL's, else PGPASSWORD; never printed. A store is
    /// bound to the records it is first used with: other records are refused.
    // Taken as text and parsed by us: clap would quote a bad value, password and all, and the
    // environment's value is never shown in --help.
    #[arg(
        long,
        value_name = "URL",
        env = "SKILLBOX_RECORDS",
        hide_env_values = true
    )]
    records: Option<String>,
    /// A file holding the PostgreSQL password (its first line; mode 0600 or stricter).
    #[arg(long, value_name = "FILE", env = "SKILLBOX_RECORDS_PASSWORD_FILE")]
    records_password_file: Option<PathBuf>,
    /// PEM trust anchors for TLS to PostgreSQL, replacing Mozilla's (a private CA).
    #[arg(long, value_name = "FILE", env = "SKILLBOX_RECORDS_CA_FILE")]
    records_ca_file: Option<PathBuf>,
    /// This host's name in shared records [default: the system hostname]: 1 to 64 letters,
    /// digits, '.', '-', '_'. The records bind it to this store.
    #[arg(long = "host", value_name = "NAME", env = "SKILLBOX_HOST")]
    host_name: Option<String>,
}

/// The install lifecycle.
#[derive(Subcommand, Debug)]
pub enum LifecycleCommand {
    /// Install a skill from a discovery index (INDEX_URL SKILL), or a local artifact
    /// (ARTIFACT --digest sha256:HEX): fetch, verify, confined extraction, review, policy,
    /// promotion into the store, activation for each --agent.
    #[command(after_help = EXIT_CODES_HELP)]
    Install(InstallArgs),
    /// Show a stored version's review (escaped) and its recorded decision.
    #[command(after_help = EXIT_CODES_HELP)]
    Review(RefArgs),
    /// Approve a pending version (a person's decision) and activate it.
    #[command(after_help = EXIT_CODES_HELP)]
    Approve(ApproveArgs),
    /// Deny a pending version; its tree leaves the store.
    #[command(after_help = EXIT_CODES_HELP)]
    Deny(DenyArgs),
    /// Re-read the index of installed skills; a new digest goes through the whole intake and is
    /// compared with the installed version (content-only changes may be approved by policy).
    #[command(after_help = EXIT_CODES_HELP)]
    Update(UpdateArgs),
    /// Move agents back to the previous approved, non-withdrawn version (or --to); a version
    /// withdrawn on this host with --local is skipped as a withdrawn one.
    #[command(after_help = EXIT_CODES_HELP)]
    Rollback(RollbackArgs),
    /// Withdraw a version: never activated again; every agent using it moves back to its
    /// previous approved version (or loses the skill); the affected agents are listed.
    #[command(after_help = EXIT_CODES_HELP)]
    Withdraw(WithdrawArgs),
    /// Skills, their versions and decisions, and the version active for each agent.
    #[command(after_help = EXIT_CODES_HELP)]
    List(CommonOnly),
    /// The store at a glance: pending and withdrawn versions, agents, interrupted steps. Exits
    /// 9 when a withdrawn version is still on an agent of any host (not contained), 0 when
    /// every withdrawn version is contained.
    #[command(after_help = STATUS_EXIT_CODES_HELP)]
    Status(CommonOnly),
    /// Where a version came from and everything that happened to it.
    #[command(after_help = EXIT_CODES_HELP)]
    Provenance(ProvenanceArgs),
    /// Remove trees no agent uses beyond the newest --keep approved ones per skill.
    #[command(after_help = EXIT_CODES_HELP)]
    Gc(GcArgs),
    /// Re-hash stored trees against their inventories and check every agent link; repair what
    /// is safe.
    #[command(after_help = EXIT_CODES_HELP)]
    Verify(CommonOnly),
    /// Apply the fleet's decisions to this host: every agent here on a version withdrawn in
    /// the shared records moves back to its previous approved version (or loses the skill).
    #[command(after_help = EXIT_CODES_HELP)]
    Sync(CommonOnly),
    /// Remove a host that is gone (decommissioned, reimaged, lost) from shared records: its
    /// agents, their installations, its store's versions and unfinished steps, so they stop
    /// counting as still on a withdrawn version. Events stay, with a host_forgotten event. Not
    /// this store's own host (exit 2), not an unknown one (exit 8), and not one seen in the
    /// records (sync, any recorded command) within the last 15 minutes unless
    /// --even-if-recent. The same store coming back gets its rows back when it registers.
    #[command(after_help = EXIT_CODES_HELP)]
    ForgetHost(ForgetHostArgs),
}

#[derive(Args, Debug)]
pub struct ForgetHostArgs {
    /// The host's name, as `status` lists it.
    #[arg(value_name = "NAME", value_parser = parse_host)]
    name: String,
    /// Why it is forgotten (recorded and shown).
    #[arg(long, value_name = "TEXT", value_parser = parse_reason)]
    reason: String,
    /// Who forgets it (recorded) [default: $USER].
    #[arg(long, value_name = "NAME", value_parser = parse_person)]
    by: Option<String>,
    /// Forget it even though it was seen in the records within the last 15 minutes (three
    /// runs of the sync timer). Dangerous: a host still alive would run its agents unseen,
    /// and a withdrawn version on it would read "contained" until it registers again.
    #[arg(long)]
    even_if_recent: bool,
    #[command(flatten)]
    common: Common,
}

fn parse_host(s: &str) -> Result<String, String> {
    skillbox::lifecycle::fleet::check_host_name(s).map(|()| s.to_owned())
}

#[derive(Args, Debug)]
pub struct CommonOnly {
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
pub struct InstallArgs {
    /// An index URL (https://HOST/.well-known/agent-skills/index.json), or a local artifact.
    source: String,
    /// The skill, as the index names it (with an index URL).
    skill: Option<String>,
    /// The artifact's digest (required with a local artifact).
    #[arg(long, value_name = "sha256:HEX")]
    digest: Option<Sha256Digest>,
    /// An agent to install for: a preset (claude-code, codex, project) or NAME=DIR (DIR is
    /// made if missing, only in a directory that exists, else exit 2). Repeatable; without one
    /// the version is only stored.
    #[arg(long = "agent", value_name = "NAME[=DIR]")]
    agents: Vec<AgentArg>,
    /// Move agents whose version of the skill was taken from another index to this index's
    /// (refused without it: another index's skill of the same name never replaces one
    /// silently).
    #[arg(long)]
    switch_index: bool,
    /// Install policy (TOML) [default: the built-in conservative policy].
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Extraction limits file (as for `extract --limits`); the limit flags override it.
    #[arg(long, value_name = "FILE")]
    limits: Option<PathBuf>,
    #[command(flatten)]
    overrides: LimitFlags,
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    fetch: PolicyArgs,
    #[command(flatten)]
    artifact_policy: ArtifactPolicyArgs,
    #[command(flatten)]
    sandbox: SandboxArgs,
}

#[derive(Args, Debug)]
pub struct RefArgs {
    /// SKILL@sha256:HEX (a unique prefix of at least 8 hex digits will do).
    version: VersionRef,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
pub struct ApproveArgs {
    /// SKILL@sha256:HEX.
    version: VersionRef,
    /// Who decides [default: $USER].
    #[arg(long, value_name = "NAME", value_parser = parse_person)]
    by: Option<String>,
    /// Agents to activate it for [default: those the install named].
    #[arg(long = "agent", value_name = "NAME[=DIR]")]
    agents: Vec<AgentArg>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
pub struct DenyArgs {
    /// SKILL@sha256:HEX.
    version: VersionRef,
    /// Who decides [default: $USER].
    #[arg(long, value_name = "NAME", value_parser = parse_person)]
    by: Option<String>,
    /// Why (recorded).
    #[arg(long, value_name = "TEXT", value_parser = parse_reason, default_value = "denied")]
    reason: String,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
pub struct UpdateArgs {
    /// Only this skill [default: every installed skill].
    #[arg(value_parser = ops::parse_skill)]
    skill: Option<String>,
    /// Only these agents (and add them).
    #[arg(long = "agent", value_name = "NAME[=DIR]")]
    agents: Vec<AgentArg>,
    /// Install policy (TOML) [default: the built-in conservative policy].
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Extraction limits file (as for `extract --limits`); the limit flags override it.
    #[arg(long, value_name = "FILE")]
    limits: Option<PathBuf>,
    #[command(flatten)]
    overrides: LimitFlags,
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    fetch: PolicyArgs,
    #[command(flatten)]
    artifact_policy: ArtifactPolicyArgs,
    #[command(flatten)]
    sandbox: SandboxArgs,
}

#[derive(Args, Debug)]
pub struct RollbackArgs {
    #[arg(value_parser = ops::parse_skill)]
    skill: String,
    /// Only these agents [default: all that have the skill].
    #[arg(long = "agent", value_name = "NAME")]
    agents: Vec<AgentArg>,
    /// The approved version to go to [default: the previous approved one]; a withdrawn one, or
    /// one withdrawn here with --local, is refused (exit 9).
    #[arg(long, value_name = "sha256:HEX")]
    to: Option<String>,
    /// Who decides [default: $USER].
    #[arg(long, value_name = "NAME", value_parser = parse_person)]
    by: Option<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
pub struct WithdrawArgs {
    /// SKILL@sha256:HEX.
    version: VersionRef,
    /// Why (recorded and shown).
    #[arg(long, value_name = "TEXT", value_parser = parse_reason)]
    reason: String,
    /// Who withdraws it (recorded and shown on every host) [default: $USER].
    #[arg(long, value_name = "NAME", value_parser = parse_person)]
    by: Option<String>,
    /// Contain it on this host now, without the records (for when they cannot be reached):
    /// its tree is moved into STORE/quarantine/ with one rename, so every agent's link to it
    /// dangles at once, and the withdrawal is kept pending in the store. The next command that
    /// reaches the records (sync, status, install, ...) records it fleet-wide with this reason,
    /// who and when, and moves this host's agents to the previous approved version. A digest
    /// not in this store is recorded as pending only (give it in full). Meanwhile install,
    /// update, approve and rollback refuse it here (exit 9). It is recorded for the host the
    /// records bind this store to (STORE/host); a --host naming another is refused (exit 2).
    #[arg(long)]
    local: bool,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
pub struct ProvenanceArgs {
    /// SKILL or SKILL@sha256:HEX.
    what: String,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
pub struct GcArgs {
    /// Unused approved versions kept per skill (rollback targets).
    #[arg(long, default_value_t = 2, value_name = "N")]
    keep: usize,
    #[command(flatten)]
    common: Common,
}

fn parse_person(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 64 || s.chars().any(char::is_control) {
        return Err("1 to 64 characters, no control characters".into());
    }
    Ok(s.to_owned())
}

fn parse_reason(s: &str) -> Result<String, String> {
    if s.trim().is_empty() || s.len() > 1000 || s.chars().any(char::is_control) {
        return Err("1 to 1000 characters, no control characters".into());
    }
    // A reason is recorded and shown to every host: a URL's password in it (a tracker link
    // copied with its token) is masked before it reaches either.
    Ok(skillbox::urls::redact_message(s, skillbox::urls::Masked::Marker).into_owned())
}

fn who(by: &Option<String>) -> String {
    by.clone()
        .or_else(|| {
            std::env::var("USER")
                .ok()
                .filter(|u| parse_person(u).is_ok())
        })
        .unwrap_or_else(|| format!("uid:{}", nix::unistd::geteuid()))
}

fn store_root(c: &Common) -> Result<PathBuf, Error> {
    match &c.store {
        // The default store is made whole; one the user named only in a directory that exists
        // (`--store /typo/x` made `/typo`; [`super::parent_exists`]).
        Some(p) => super::parent_exists("--store", p)
            .map(|()| p.clone())
            .map_err(|m| Error::new(Kind::Usage, m)),
        None => store::default_root().ok_or_else(|| {
            Error::new(
                Kind::Usage,
                "no store: give --store, or set XDG_DATA_HOME or HOME",
            )
        }),
    }
}

/// An agent's directory typed as `--agent NAME=DIR` is used, never invented, as a named
/// `--store` is: the directory DIR goes in must exist, or this is the usage error (exit 2),
/// said before the store is opened and before anything is made ([`super::parent_exists`], the
/// same check). A link would otherwise create the whole missing chain (`--agent
/// a=/typo/x/skills` made `/typo`, as root at the root), a place no agent reads. A preset typed
/// alone is a default location, made whole as the default store is, and so is a preset's
/// layout typed under a directory of one's own (`/src/app/.agents/skills`, what the `project`
/// preset's refusal says to type; `/home/u/.claude/skills`): there the directory that layout
/// goes in must exist.
fn check_agent_dirs(agents: &[AgentArg]) -> Result<(), Error> {
    use skillbox::lifecycle::agents::{PRESETS, absolute};
    for a in agents.iter().filter(|a| a.typed) {
        let Some(dir) = a.dir.as_deref() else {
            continue;
        };
        let dir = absolute(dir)?;
        let layout = PRESETS
            .iter()
            .map(|(_, d)| std::path::Path::new(d.strip_prefix("~/").unwrap_or(d)))
            .find(|tail| dir.ends_with(tail));
        let named = match layout.and_then(|tail| {
            let mut base = dir.as_path();
            for _ in tail.components().skip(1) {
                base = base.parent()?;
            }
            Some(base)
        }) {
            Some(base) => base.to_owned(),
            None => dir,
        };
        super::parent_exists(&format!("--agent {}", a.name), &named)
            .map_err(|m| Error::new(Kind::Usage, m))?;
    }
    Ok(())
}

/// Ends the message of a command that could not reach the records: containment on this host
/// does not need them.
const LOCAL_HINT: &str = "; to contain a version on this host now, without the records: skillbox withdraw SKILL@DIGEST --reason TEXT --local";

/// Open the store and its records; first of all, record again the agents this store linked
/// into that the records lost (restored from an older backup), then the withdrawals
/// `withdraw --local` left pending here while the records could not be reached, and again
/// those it recorded that the records lost since, saying so (under the store lock: a command
/// that only reads takes it then). A withdrawal the records cannot take yet (they do
/// not know its version) is no reason to take the lock: this host refuses the digest by its
/// entry alone, and the first command after some host recorded the version records it
/// (`status` and `verify` list it meanwhile).
fn open(c: &Common, access: Access) -> Result<Store, Error> {
    let root = store_root(c)?;
    let mut store = open_at(&root, c, access)?;
    // Found by a read; then done under the lock, where each is looked for again.
    if access != Access::Exclusive
        && (ops::agents_due(&mut store)?
            || (quarantine::has_pending(&root) || quarantine::has_applied(&root))
                && ops::withdrawals_due(&mut store)?)
    {
        drop(store);
        store = open_at(&root, c, Access::Exclusive)?;
    } else if access != Access::Exclusive {
        return Ok(store);
    }
    // The agents first: the withdrawals' moves below go over the agents the records know.
    for line in ops::reinstate_agents(&mut store)? {
        eprintln!("skillbox: {}", shown(&redact_message(&line)));
    }
    for line in ops::reinstate_withdrawals(&mut store)? {
        eprintln!("skillbox: {}", shown(&redact_message(&line)));
    }
    for line in ops::apply_pending(&mut store)? {
        eprintln!("skillbox: {}", shown(&redact_message(&line)));
    }
    Ok(store)
}

fn open_at(root: &std::path::Path, c: &Common, access: Access) -> Result<Store, Error> {
    let mut location = match &c.records {
        Some(text) => fleet::parse_location(text)?,
        None => Location::Sqlite,
    };
    fleet::resolve_password(&mut location, c.records_password_file.as_deref())?;
    fleet::set_ca_file(&mut location, c.records_ca_file.as_deref())?;
    let host = match HostChoice::new(c.host_name.as_deref()) {
        Ok(h) => h,
        // The store's own records serve one host: an unusable system hostname need not stop
        // it (the records keep whatever name the store was bound under first).
        Err(_) if c.host_name.is_none() && !location.is_shared() => HostChoice::local(),
        Err(e) => return Err(e),
    };
    Store::open_with(root, access, &location, &host)
}

/// The message of `e` as shown: masked, then its hint as written ([`Error::hint`]).
fn error_text(e: &Error) -> String {
    format!("{}{}", redact_message(&e.message), e.hint.unwrap_or(""))
}

fn fail(e: &Error, json_out: bool) -> u8 {
    let message = error_text(e);
    if json_out {
        let mut v = json!({"error": {"kind": kind_str(e.kind), "exit": exit_of(e.kind), "message": message}});
        if let Some(d) = &e.detail {
            v["error"]["detail"] = d.clone();
        }
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    }
    eprintln!("skillbox: {message}");
    exit_of(e.kind)
}

fn print_json<T: Serialize>(v: &T) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("skillbox: {e}"),
    }
}

/// Run one lifecycle command; returns its exit code.
pub fn run(cmd: LifecycleCommand, leading: &LeadingSandboxArgs) -> u8 {
    let sandbox = match &cmd {
        LifecycleCommand::Install(a) => leading.merge(&a.sandbox),
        LifecycleCommand::Update(a) => leading.merge(&a.sandbox),
        _ => leading.merge(&SandboxArgs::default()),
    };
    let sandbox = &sandbox;
    let json_out = match &cmd {
        LifecycleCommand::Install(a) => a.common.json,
        LifecycleCommand::Review(a) => a.common.json,
        LifecycleCommand::Approve(a) => a.common.json,
        LifecycleCommand::Deny(a) => a.common.json,
        LifecycleCommand::Update(a) => a.common.json,
        LifecycleCommand::Rollback(a) => a.common.json,
        LifecycleCommand::Withdraw(a) => a.common.json,
        LifecycleCommand::List(a)
        | LifecycleCommand::Status(a)
        | LifecycleCommand::Verify(a)
        | LifecycleCommand::Sync(a) => a.common.json,
        LifecycleCommand::Provenance(a) => a.common.json,
        LifecycleCommand::Gc(a) => a.common.json,
        LifecycleCommand::ForgetHost(a) => a.common.json,
    };
    match dispatch(cmd, sandbox, json_out) {
        Ok(code) => code,
        Err(e) => fail(&e, json_out),
    }
}

fn load_policy(p: &Option<PathBuf>) -> Result<Policy, Error> {
    match p {
        Some(p) => Policy::from_file(p),
        None => Ok(Policy::default()),
    }
}

/// The limits file, then the limit flags over it, checked against the ceilings (as `extract`).
fn load_limits(p: &Option<PathBuf>, flags: &LimitFlags) -> Result<Limits, Error> {
    super::limits::build(p.as_deref(), flags).map_err(|f| Error::new(Kind::Usage, f.message))
}

fn dispatch(cmd: LifecycleCommand, sandbox: &SandboxArgs, json_out: bool) -> Result<u8, Error> {
    let engine = |artifact: &std::fs::File,
                  staging: std::os::fd::BorrowedFd<'_>,
                  req: &skillbox::extract::Request| {
        super::sandbox::extract(sandbox, artifact, staging, req, None)
    };
    match cmd {
        LifecycleCommand::Install(a) => {
            check_agent_dirs(&a.agents)?;
            let policy = load_policy(&a.policy)?;
            let limits = load_limits(&a.limits, &a.overrides)?;
            // The same reading as `index check`: `https:...` is a URL (refused masked if it
            // is a lenient form), never a file name an error would repeat, password and all.
            let source = if skillbox::urls::names_a_url(&a.source) {
                let skill = a.skill.clone().ok_or_else(|| {
                    Error::new(
                        Kind::Usage,
                        "install INDEX_URL SKILL: name the skill to install",
                    )
                })?;
                ops::parse_skill(&skill).map_err(|e| Error::new(Kind::Usage, e))?;
                // Typed here: refused before the store is opened (`ops::install` applies the
                // rule again, for the URL an update reads from the records).
                skillbox::urls::check_typed(&a.source).map_err(|e| {
                    let shown = skillbox::urls::redact_refused(&a.source);
                    Error::new(Kind::Usage, format!("{shown}: {e}"))
                })?;
                if a.digest.is_some() {
                    return Err(Error::new(
                        Kind::Usage,
                        "--digest is for a local artifact; the index lists the digest",
                    ));
                }
                Source::Index {
                    url: a.source.clone(),
                    skill,
                }
            } else {
                if a.skill.is_some() {
                    return Err(Error::new(
                        Kind::Usage,
                        "install ARTIFACT takes no skill name (SKILL.md names it)",
                    ));
                }
                let digest = a.digest.ok_or_else(|| {
                    Error::new(
                        Kind::Usage,
                        "install ARTIFACT needs --digest sha256:HEX (the digest you expect)",
                    )
                })?;
                Source::File {
                    path: PathBuf::from(&a.source),
                    digest,
                }
            };
            let mut setup = super::fetch::setup(&a.fetch, a.artifact_policy.max_bytes())
                .map_err(|(_, m)| Error::new(Kind::Usage, m))?;
            // As `fetch`: a download past the extraction limit is cut there, never received
            // whole and cached first.
            setup
                .client
                .policy_mut()
                .bound_by_extraction_limit(limits.max_artifact_bytes);
            let mut store = open(&a.common, Access::Exclusive)?;
            let intake = Intake {
                policy: &policy,
                fetcher: Some(Fetcher {
                    client: &setup.client,
                    index_limits: &setup.index_limits,
                }),
                engine: &engine,
                limits,
                agents: a.agents.clone(),
                op: "install",
                switch_index: a.switch_index,
            };
            let report = ops::install(&mut store, &intake, &source)?;
            Ok(show_install(&report, json_out))
        }
        LifecycleCommand::Update(a) => {
            check_agent_dirs(&a.agents)?;
            let policy = load_policy(&a.policy)?;
            let limits = load_limits(&a.limits, &a.overrides)?;
            let mut setup = super::fetch::setup(&a.fetch, a.artifact_policy.max_bytes())
                .map_err(|(_, m)| Error::new(Kind::Usage, m))?;
            // As `fetch`: a download past the extraction limit is cut there, never received
            // whole and cached first.
            setup
                .client
                .policy_mut()
                .bound_by_extraction_limit(limits.max_artifact_bytes);
            let mut store = open(&a.common, Access::Exclusive)?;
            let named: Vec<String> = a.agents.iter().map(|g| g.name.clone()).collect();
            let targets = ops::update_targets(&mut store, a.skill.as_deref(), &named)?;
            let mut reports = Vec::new();
            let mut code = EXIT_OK;
            for (skill, url, agents) in targets {
                // Each agent as typed when named (its directory as typed), else as recorded.
                let agents: Vec<AgentArg> = agents
                    .into_iter()
                    .map(|n| {
                        a.agents
                            .iter()
                            .find(|g| g.name == n)
                            .cloned()
                            .unwrap_or_else(|| AgentArg::recorded(n))
                    })
                    .collect();
                let intake = Intake {
                    policy: &policy,
                    fetcher: Some(Fetcher {
                        client: &setup.client,
                        index_limits: &setup.index_limits,
                    }),
                    engine: &engine,
                    limits: limits.clone(),
                    agents,
                    op: "update",
                    // Each agent is updated from its own index (`update_targets`).
                    switch_index: false,
                };
                match ops::install(
                    &mut store,
                    &intake,
                    &Source::Index {
                        url,
                        skill: skill.clone(),
                    },
                ) {
                    Ok(r) => {
                        let c = install_code(&r);
                        if code == EXIT_OK {
                            code = c;
                        }
                        if !json_out {
                            show_install(&r, false);
                        }
                        reports.push(serde_json::to_value(&r).unwrap_or(Value::Null));
                    }
                    Err(e) => {
                        if code == EXIT_OK {
                            code = exit_of(e.kind);
                        }
                        eprintln!("skillbox: {skill}: {}", error_text(&e));
                        reports.push(json!({"skill": skill, "error": {"kind": kind_str(e.kind), "message": error_text(&e)}}));
                    }
                }
            }
            if json_out {
                print_json(&json!({ "updates": reports }));
            } else if reports.is_empty() {
                println!("nothing to update");
            }
            Ok(code)
        }
        LifecycleCommand::Review(a) => {
            let mut store = open(&a.common, Access::Read)?;
            let (v, review) = ops::review(&mut store, &a.version)?;
            if json_out {
                print_json(
                    &json!({"skill": v.skill, "digest": v.digest, "state": v.state, "findings_to_decide": v.findings, "review_sha256": v.review_sha256, "review": review}),
                );
            } else {
                println!("{}@{}  {}", v.skill, v.digest, v.state.as_str());
                if !v.findings.is_empty() {
                    println!("needs a decision on:");
                    for f in &v.findings {
                        println!("  - {}", display_name(f.as_bytes()));
                    }
                }
                print!("{}", render_review(&review));
            }
            Ok(EXIT_OK)
        }
        LifecycleCommand::Approve(a) => {
            check_agent_dirs(&a.agents)?;
            let mut store = open(&a.common, Access::Exclusive)?;
            let r = ops::approve(&mut store, &a.version, &who(&a.by), &a.agents)?;
            Ok(show_install(&r, json_out))
        }
        LifecycleCommand::Deny(a) => {
            let mut store = open(&a.common, Access::Exclusive)?;
            let v = ops::deny(&mut store, &a.version, &who(&a.by), &a.reason)?;
            if json_out {
                print_json(
                    &json!({"skill": v.skill, "digest": v.digest, "state": v.state, "decided_by": v.decided_by}),
                );
            } else {
                println!(
                    "denied {}@{} (by {}); its tree left the store",
                    v.skill, v.digest, v.decided_by
                );
            }
            Ok(EXIT_OK)
        }
        LifecycleCommand::Rollback(a) => {
            let to =
                a.to.as_deref()
                    .map(|d| format!("{}@{d}", a.skill).parse::<VersionRef>())
                    .transpose()
                    .map_err(|e| Error::new(Kind::Usage, format!("--to: {e}")))?;
            check_agent_dirs(&a.agents)?;
            let mut store = open(&a.common, Access::Exclusive)?;
            let r = ops::rollback(&mut store, &a.skill, &a.agents, to.as_ref(), &who(&a.by))?;
            show_moves("rolled back", &r, json_out);
            Ok(if r.problems.is_empty() {
                EXIT_OK
            } else {
                EXIT_OPERATIONAL
            })
        }
        LifecycleCommand::Withdraw(a) if a.local => {
            // No records: the host the records bind this store to (noted in the store), checked
            // against --host as every command checks it; a bad --host is refused, as anywhere.
            let host = match HostChoice::new(a.common.host_name.as_deref()) {
                Ok(h) => h,
                Err(_) if a.common.host_name.is_none() => HostChoice::local(),
                Err(e) => return Err(e),
            };
            let r = quarantine::withdraw_local(
                &store_root(&a.common)?,
                &a.version.skill,
                &a.version.digest,
                &a.reason,
                &who(&a.by),
                &host,
            )?;
            if json_out {
                print_json(&r);
            } else {
                let name = format!("{}@{}", r.skill, r.digest);
                match r.containment {
                    "quarantined" => println!(
                        "contained locally: {name} moved to {}; no agent of this host can load it",
                        shown(r.quarantine.as_deref().unwrap_or(""))
                    ),
                    "already_quarantined" => println!(
                        "already contained locally: {name} is in {}",
                        shown(r.quarantine.as_deref().unwrap_or(""))
                    ),
                    _ => println!(
                        "{name} is not in this store: nothing to contain here; its withdrawal is recorded as pending"
                    ),
                }
                if r.already_pending {
                    println!(
                        "pending withdrawal already recorded (by {}, {}: {}); it stands",
                        shown(&r.pending.by),
                        shown(&r.pending.time),
                        shown(&r.pending.reason)
                    );
                } else {
                    println!("pending withdrawal recorded in the store");
                }
                println!(
                    "the next command that reaches the records (skillbox sync) withdraws it fleet-wide and moves this host's agents"
                );
            }
            Ok(EXIT_OK)
        }
        LifecycleCommand::Withdraw(a) => {
            // Records out of reach, corrupt, or on a full filesystem: `--local` still contains.
            let hinted = |e: Error| {
                if skillbox::lifecycle::records::records_unusable(&e) {
                    e.with_hint(LOCAL_HINT)
                } else {
                    e
                }
            };
            let mut store = open(&a.common, Access::Exclusive).map_err(hinted)?;
            let r =
                ops::withdraw(&mut store, &a.version, &a.reason, &who(&a.by)).map_err(hinted)?;
            show_moves("withdrawn", &r, json_out);
            Ok(if r.problems.is_empty() {
                EXIT_OK
            } else {
                EXIT_OPERATIONAL
            })
        }
        LifecycleCommand::List(a) => {
            let mut store = open(&a.common, Access::Read)?;
            let l = ops::list(&mut store)?;
            if json_out {
                print_json(&l);
            } else if l.skills.is_empty() {
                println!("no skills recorded");
            } else {
                use std::fmt::Write as _;
                // One write: a line-buffered stdout would make 10,000 versions 10,000 writes.
                let mut out = String::new();
                for s in &l.skills {
                    let _ = writeln!(out, "{}", s.skill);
                    for (agent, d) in &s.active {
                        let _ = writeln!(out, "  {agent:<16} -> {}", short(d));
                    }
                    for v in &s.versions {
                        let w = v
                            .withdrawn_reason
                            .as_deref()
                            .map(|r| format!(" ({})", display_name(r.as_bytes())))
                            .unwrap_or_default();
                        let gone = if v.quarantined {
                            " [quarantined]"
                        } else if v.stored {
                            ""
                        } else {
                            " [not stored]"
                        };
                        let _ = writeln!(
                            out,
                            "    {}  {:<9} {:<12} {}{w}{gone}",
                            short(&v.digest),
                            v.state.as_str(),
                            shown(&v.change),
                            shown(&v.created_at)
                        );
                    }
                }
                print!("{out}");
            }
            Ok(EXIT_OK)
        }
        LifecycleCommand::Status(a) => {
            let mut store = open(&a.common, Access::Read)?;
            let s = ops::status(&mut store)?;
            if json_out {
                print_json(&s);
            } else {
                println!("store        {}", shown(&s.store));
                println!("records      {}", shown(&s.records));
                println!("host         {}", s.host);
                if s.hosts.len() > 1 {
                    println!("hosts        {}", s.hosts.len());
                    for h in &s.hosts {
                        println!(
                            "  {:<16} last sync {}",
                            h.name,
                            shown(h.last_sync.as_deref().unwrap_or("never"))
                        );
                    }
                }
                println!("skills       {} ({} versions)", s.skills, s.versions);
                println!("agents       {}", s.agents.len());
                for (n, d) in &s.agents {
                    println!("  {n:<16} {}", shown(d));
                }
                println!("active       {}", s.installs.len());
                for i in &s.installs {
                    let from = match i.index_url.as_deref() {
                        Some("") | None => "a local file".to_owned(),
                        Some(u) => shown(u),
                    };
                    println!(
                        "  {:<16} {}@{} from {from}",
                        shown(&i.agent),
                        i.skill,
                        short(&i.digest)
                    );
                }
                println!("pending      {}", s.pending.len());
                for p in &s.pending {
                    println!("  {p}");
                }
                println!("withdrawn    {}", s.withdrawn.len());
                for w in &s.withdrawn_in_use {
                    println!("  {}", w.version);
                    if w.still_on.is_empty() {
                        println!("    contained: no agent on any host runs it");
                    } else {
                        println!("    STILL ON {}", host_agents(&w.still_on));
                    }
                }
                for m in &s.agent_dirs_missing {
                    println!("  {}", shown(m));
                }
                if !s.quarantined.is_empty() {
                    println!("quarantined  {}", s.quarantined.len());
                    for q in &s.quarantined {
                        println!("  {}", shown(q));
                    }
                }
                if !s.pending_local_withdrawals.is_empty() {
                    println!(
                        "local withdrawals not in the records yet  {}",
                        s.pending_local_withdrawals.len()
                    );
                    for p in &s.pending_local_withdrawals {
                        println!("  {}", shown(p));
                    }
                }
                if !s.withdrawals_waiting_for_version.is_empty() {
                    println!(
                        "local withdrawals waiting for their version in the records  {} (restored from before it was recorded; refused here; recorded again once any host records it)",
                        s.withdrawals_waiting_for_version.len()
                    );
                    for p in &s.withdrawals_waiting_for_version {
                        println!("  {}", shown(p));
                    }
                }
                if !s.withdrawals_unwritten.is_empty() {
                    println!("WITHDRAWAL NOT WRITTEN  {}", s.withdrawals_unwritten.len());
                    for l in &s.withdrawals_unwritten {
                        println!("  {}", shown(l));
                    }
                }
                if !s.withdrawals_lost.is_empty() {
                    println!("WITHDRAWAL LOST  {}", s.withdrawals_lost.len());
                    for l in &s.withdrawals_lost {
                        println!("  {}", shown(l));
                    }
                }
                if s.interrupted > 0 {
                    println!(
                        "interrupted  {} step(s); the next command that changes state (or verify) finishes them",
                        s.interrupted
                    );
                }
            }
            // Printed in full first: a script asking "is it contained?" reads the status code,
            // and the output says where it is not.
            // A withdrawal the records lost, or one never written (a `withdraw --local` on a
            // full filesystem), is not contained either: other hosts may run it.
            Ok(
                if s.withdrawn_in_use.iter().any(|w| !w.still_on.is_empty())
                    || !s.withdrawals_lost.is_empty()
                    || !s.withdrawals_unwritten.is_empty()
                {
                    EXIT_WITHDRAWN
                } else {
                    EXIT_OK
                },
            )
        }
        LifecycleCommand::Provenance(a) => {
            let (skill, r) = match a.what.split_once('@') {
                Some(_) => {
                    let r: VersionRef = a
                        .what
                        .parse()
                        .map_err(|e: String| Error::new(Kind::Usage, e))?;
                    (r.skill.clone(), Some(r))
                }
                None => (
                    ops::parse_skill(&a.what).map_err(|e| Error::new(Kind::Usage, e))?,
                    None,
                ),
            };
            let mut store = open(&a.common, Access::Read)?;
            let p = ops::provenance(&mut store, &skill, r.as_ref())?;
            if json_out {
                print_json(&p);
            } else {
                print_provenance(&p);
            }
            Ok(EXIT_OK)
        }
        LifecycleCommand::Gc(a) => {
            let mut store = open(&a.common, Access::Exclusive)?;
            let g = ops::gc(&mut store, a.keep)?;
            if json_out {
                print_json(&g);
            } else {
                for r in &g.recovered {
                    println!("recovered: {}", shown(r));
                }
                for r in &g.removed {
                    println!("removed {}", shown(r));
                }
                println!("{} removed, {} kept", g.removed.len(), g.kept);
            }
            Ok(EXIT_OK)
        }
        LifecycleCommand::Sync(a) => {
            let mut store = open(&a.common, Access::Exclusive)?;
            let r = ops::sync(&mut store)?;
            if json_out {
                print_json(&r);
            } else {
                for x in &r.recovered {
                    println!("recovered: {}", shown(x));
                }
                let n: usize = r.moved.iter().map(|m| m.agents.len()).sum();
                println!("host {}: {n} agent(s) moved off withdrawn versions", r.host);
                for m in &r.moved {
                    for x in &m.agents {
                        println!(
                            "  {}@{}  {:<16} -> {}",
                            m.skill,
                            m.digest.as_deref().map(short).unwrap_or_default(),
                            x.agent,
                            x.to.as_deref()
                                .map(short)
                                .unwrap_or_else(|| "none (skill removed)".into())
                        );
                    }
                }
                for p in &r.problems {
                    println!("  PROBLEM: {}", shown(p));
                }
            }
            Ok(if r.problems.is_empty() {
                EXIT_OK
            } else {
                EXIT_OPERATIONAL
            })
        }
        LifecycleCommand::ForgetHost(a) => {
            let mut store = open(&a.common, Access::Exclusive)?;
            let r = ops::forget_host(
                &mut store,
                &a.name,
                &a.reason,
                &who(&a.by),
                a.even_if_recent,
            )?;
            if json_out {
                print_json(&r);
            } else {
                println!(
                    "forgot host {} (last seen {}, last sync {}): {} agent(s), {} stored version(s), {} unfinished step(s) removed from the records",
                    r.host,
                    shown(&r.last_seen),
                    shown(r.last_sync.as_deref().unwrap_or("never")),
                    r.agents.len(),
                    r.stored_versions,
                    r.unfinished_steps
                );
                for g in &r.agents {
                    if g.versions.is_empty() {
                        println!("  {:<16} (no skill)", g.agent);
                    }
                    for v in &g.versions {
                        println!(
                            "  {:<16} {}@{}{}{}",
                            g.agent,
                            v.skill,
                            short(&v.digest),
                            if v.withdrawn { "  WITHDRAWN" } else { "" },
                            if v.unfinished_switch {
                                "  (a switch off it was recorded, not made: its link may still run it)"
                            } else {
                                ""
                            }
                        );
                    }
                }
                println!(
                    "its events stay; if its store comes back, it is registered again with these rows"
                );
            }
            Ok(EXIT_OK)
        }
        LifecycleCommand::Verify(a) => {
            let mut store = open(&a.common, Access::Exclusive)?;
            let v = ops::verify(&mut store)?;
            if json_out {
                print_json(&v);
            } else {
                for r in &v.repaired {
                    println!("repaired: {}", shown(r));
                }
                for p in &v.problems {
                    println!("PROBLEM: {}", shown(p));
                }
                for w in &v.waiting {
                    println!("waiting: {}", shown(w));
                }
                println!(
                    "{}: {} version(s), {} link(s) checked",
                    if v.ok { "consistent" } else { "NOT consistent" },
                    v.versions_checked,
                    v.links_checked
                );
            }
            Ok(if v.ok { EXIT_OK } else { EXIT_OPERATIONAL })
        }
    }
}

/// A string a package, a server or the records (shared by other hosts) gave us, for a
/// terminal: control characters, C1 included (no ESC or CSI reaches it), line separators and
/// bidi overrides are escaped, so text from outside can neither move the cursor nor forge a
/// line. Bounded generously: a URL or a rule is shown whole.
fn shown(s: &str) -> String {
    escape_bounded(s, 4096)
}

fn short(d: &str) -> String {
    d.get(..19)
        .map(|s| format!("{s}…"))
        .unwrap_or_else(|| d.to_owned())
}

fn install_code(r: &InstallReport) -> u8 {
    if !r.problems.is_empty() {
        return EXIT_OPERATIONAL;
    }
    match r.decision {
        Decision::Approved { .. } => EXIT_OK,
        Decision::NeedsApproval { .. } => EXIT_NEEDS_APPROVAL,
        Decision::Denied { .. } => EXIT_DENIED,
    }
}

fn show_install(r: &InstallReport, json_out: bool) -> u8 {
    let code = install_code(r);
    if json_out {
        let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
        if let Some(review) = &r.review {
            v["review"] = serde_json::to_value(review).unwrap_or(Value::Null);
        }
        if let Some(d) = &r.diff {
            v["diff"] = serde_json::to_value(d).unwrap_or(Value::Null);
        }
        print_json(&v);
        return code;
    }
    for x in &r.recovered {
        println!("recovered: {}", shown(x));
    }
    println!("{}@{}", r.skill, r.digest);
    println!("  change:   {}", shown(&r.change));
    println!(
        "  review:   {} (sha256 of the review {})",
        shown(&r.review_summary),
        short(&shown(&r.review_sha256))
    );
    match &r.decision {
        Decision::Approved { rule } => {
            println!("  decision: approved ({})", display_name(rule.as_bytes()))
        }
        Decision::Denied { rule } => println!(
            "  decision: DENIED by policy: {}",
            display_name(rule.as_bytes())
        ),
        Decision::NeedsApproval { findings } => {
            println!("  decision: NEEDS APPROVAL; a person must decide on:");
            for f in findings {
                println!("    - {}", display_name(f.as_bytes()));
            }
        }
    }
    if let Some(d) = &r.diff {
        print!("{}", indent(&skillbox::skill::diff::render(d)));
    }
    if matches!(r.decision, Decision::NeedsApproval { .. }) {
        if let Some(review) = &r.review {
            print!("{}", render_review(review));
        }
        println!(
            "  next: skillbox approve {}@{}  (or deny it)",
            r.skill, r.digest
        );
    }
    for a in &r.agents {
        println!(
            "  agent {}: {} -> {}  ({}/{})",
            a.agent,
            a.from
                .as_deref()
                .map(short)
                .unwrap_or_else(|| "none".into()),
            a.to.as_deref().map(short).unwrap_or_else(|| "none".into()),
            shown(&a.dir),
            r.skill
        );
    }
    if r.intake == "unchanged" {
        println!("  unchanged: already active for every agent named");
    }
    for p in &r.problems {
        println!("  PROBLEM: {}", shown(p));
    }
    code
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}

fn show_moves(what: &str, r: &ops::MoveReport, json_out: bool) {
    if json_out {
        print_json(r);
        return;
    }
    for x in &r.recovered {
        println!("recovered: {}", shown(x));
    }
    if let Some(w) = &r.already_withdrawn {
        println!(
            "already withdrawn: {}@{} was withdrawn by {}{} at {} ({}); this host's agents are moved off it",
            r.skill,
            r.digest.as_deref().unwrap_or(""),
            shown(&w.by),
            w.host
                .as_deref()
                .map(|h| format!(" on {}", shown(h)))
                .unwrap_or_default(),
            shown(&w.time),
            shown(w.reason.as_deref().unwrap_or("no reason recorded")),
        );
    }
    println!(
        "{what} {}{}: {} agent(s) moved",
        r.skill,
        r.digest
            .as_deref()
            .map(|d| format!("@{d}"))
            .unwrap_or_default(),
        r.agents.len()
    );
    for a in &r.agents {
        println!(
            "  {:<16} {} -> {}",
            a.agent,
            a.from
                .as_deref()
                .map(short)
                .unwrap_or_else(|| "none".into()),
            a.to.as_deref()
                .map(short)
                .unwrap_or_else(|| "none (skill removed)".into())
        );
    }
    if what == "withdrawn" {
        if r.still_on.is_empty() {
            println!("  no agent on any host sharing the records runs it any more");
        } else {
            println!(
                "  still on it (skillbox sync on those hosts moves them): {}",
                host_agents(&r.still_on)
            );
        }
    }
    for p in &r.problems {
        println!("  PROBLEM: {}", shown(p));
    }
}

/// `host-a: alpha, beta; host-b: alpha`.
fn host_agents(list: &[ops::HostAgent]) -> String {
    let mut out: Vec<(String, Vec<&str>)> = Vec::new();
    for h in list {
        match out.last_mut() {
            Some((host, agents)) if *host == h.host => agents.push(&h.agent),
            _ => out.push((h.host.clone(), vec![&h.agent])),
        }
    }
    out.iter()
        .map(|(h, a)| format!("{h}: {}", a.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The trusted rendering of a review: every string from the package escaped and bounded.
fn render_review(r: &Review) -> String {
    use std::fmt::Write as _;
    let e = |s: &str| escape_bounded(s, 200);
    let mut s = String::new();
    let _ = writeln!(s, "  review (text from the package is escaped):");
    if let Some(f) = &r.frontmatter {
        let _ = writeln!(s, "    name:        {}", e(&f.name));
        let _ = writeln!(s, "    description: {}", e(&f.description));
    }
    if !r.tools.is_empty() {
        let _ = writeln!(
            s,
            "    tools:       {}",
            r.tools.iter().map(|t| e(t)).collect::<Vec<_>>().join(", ")
        );
    }
    for sc in &r.scripts {
        let _ = writeln!(
            s,
            "    script:      {} ({}, {} bytes{})",
            e(&sc.path),
            sc.interpreter
                .as_deref()
                .map(e)
                .unwrap_or_else(|| "unknown interpreter".into()),
            sc.size,
            if sc.executable { ", executable" } else { "" }
        );
    }
    let c = &r.capabilities;
    for (what, list) in [
        ("host", &c.hosts),
        ("download", &c.downloads),
        ("upload", &c.uploads),
        ("credential", &c.credentials),
        ("risky", &c.risky_commands),
        ("executable", &c.executables),
    ] {
        for x in list {
            let _ = writeln!(s, "    {what:<12} {}", e(x));
        }
    }
    for f in r.findings.iter().take(50) {
        let at = f.line.map(|l| format!(":{l}")).unwrap_or_default();
        let _ = writeln!(
            s,
            "    finding:     {} {}{at}  {}",
            f.kind,
            e(&f.file),
            e(&f.excerpt)
        );
    }
    if r.findings.len() > 50 {
        let _ = writeln!(
            s,
            "    … {} more findings (--json shows all)",
            r.findings.len() - 50
        );
    }
    if !r.coverage.complete {
        let _ = writeln!(s, "    INCOMPLETE: the review hit its bounds");
    }
    s
}

fn print_provenance(p: &ops::ProvenanceReport) {
    let v = &p.version;
    let pv = &v.provenance;
    // Every value here was recorded from a package, an index or a server (a Content-Type, a
    // Location, a rule naming a package's tool): each is escaped.
    let g = |k: &str| shown(pv.get(k).and_then(Value::as_str).unwrap_or("-"));
    let field = |h: &Value, k: &str| shown(h[k].as_str().unwrap_or("-"));
    println!("{}@{}", v.skill, v.digest);
    println!(
        "  state:          {}{}",
        v.state.as_str(),
        if v.quarantined {
            " (tree quarantined on this host: no agent can load it; gc removes it)"
        } else if v.stored {
            ""
        } else {
            " (tree not in the store)"
        }
    );
    if let Some(r) = &v.withdrawn_reason {
        println!("  withdrawn:      {}", display_name(r.as_bytes()));
    }
    println!("  index:          {}", g("index_url"));
    if let Some(d) = pv.get("index_download").filter(|d| !d.is_null()) {
        for h in d
            .get("hops")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            println!(
                "    redirect:     {} -> {}",
                field(h, "url"),
                field(h, "location")
            );
        }
    }
    if let Some(e) = pv.get("entry").filter(|e| !e.is_null()) {
        println!(
            "  entry:          {}",
            display_name(e.to_string().as_bytes())
        );
    }
    println!(
        "  resolved url:   {} ({})",
        g("resolved_url"),
        g("url_form")
    );
    for h in pv
        .get("hops")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        println!(
            "  redirect:       {} [{}] -> {} ({})",
            field(h, "url"),
            field(h, "address"),
            field(h, "location"),
            shown(&h["status"].to_string())
        );
    }
    println!("  final url:      {}", g("final_url"));
    if let Some(c) = pv.get("cached_from").filter(|c| c.is_object()) {
        // A cache hit: no download of its own; the bytes' first download, which another
        // entry or index may have listed.
        println!(
            "  cached from:    {} ({})",
            field(c, "final_url"),
            field(c, "fetched_at")
        );
    }
    println!("  peer address:   {}", g("address"));
    println!("  content-type:   {}", g("content_type"));
    println!("  digest:         {}", v.digest);
    println!(
        "  review:         {} (sha256 {})",
        shown(&v.review_summary),
        shown(&v.review_sha256)
    );
    let decided = format!(
        "by {}{}",
        shown(&v.decided_by),
        v.rule
            .as_deref()
            .map(|r| format!(" ({})", display_name(r.as_bytes())))
            .unwrap_or_default()
    );
    // A withdrawal keeps the decision it replaced (who approved it); the withdrawal's own
    // actor is its event's. "withdrawn by policy" would say a policy pulled it.
    let withdrawn_by = (v.state.as_str() == "withdrawn").then(|| {
        p.events
            .iter()
            .rev()
            .find(|e| e.kind == "withdrawn")
            .map_or_else(|| "-".to_owned(), |e| shown(&e.actor))
    });
    match withdrawn_by {
        Some(by) => {
            println!("  decision:       withdrawn by {by} (the decision it replaced: {decided})")
        }
        None => println!("  decision:       {} {decided}", v.state.as_str()),
    }
    if !v.findings.is_empty() {
        println!(
            "  findings:       {}",
            display_name(v.findings.join("; ").as_bytes())
        );
    }
    println!(
        "  agents:         {}",
        if p.agents.is_empty() {
            "none".into()
        } else {
            shown(&p.agents.join(", "))
        }
    );
    for t in &p.taken_from {
        let from = if t.index_url.is_empty() {
            "a local file (or not known)".to_owned()
        } else {
            t.index_url.clone()
        };
        println!(
            "  taken from:     {}",
            shown(&format!("{}: {} from {from}", t.host, t.agent))
        );
    }
    if !p.hosts.is_empty() {
        println!("  hosts:          {}", shown(&host_agents(&p.hosts)));
    }
    println!("  events:");
    for e in &p.events {
        // The index the agent (or the intake) took the version from: index -> version -> agent.
        let from = match e.index_url.as_deref() {
            Some("") => " (from a local file)".to_owned(),
            Some(u) => format!(" (from {})", shown(u)),
            None => String::new(),
        };
        println!(
            "    {}  {:<20} {:<20} {}{}{from}",
            shown(&e.time),
            shown(&e.kind),
            shown(&e.actor),
            e.host
                .as_deref()
                .map(|h| format!("[{}] ", shown(h)))
                .unwrap_or_default(),
            display_name(e.detail.as_bytes())
        );
    }
}
