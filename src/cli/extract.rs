//! `skillbox extract ARTIFACT`: verify and extract one artifact in a confined child (or send it
//! to a running broker with `--server`), print the answer, and leave nothing on disk after a
//! rejection.
//!
//! Exit codes (see [`Exit`]): 0 accepted, 3 rejected (the reason is printed), 1 operational
//! error, 2 usage error.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use skillbox::client::{Released, Until};
use skillbox::convert::{MAX_INDEX_DESCRIPTION, MAX_SKILL_NAME};
use skillbox::digest::Sha256Digest;
use skillbox::extract::{ArtifactType, Request};
use skillbox::reason::Verdict;
use skillbox::sandbox::{ChildAhead, SandboxConfig};

use super::exit::{Exit, Failure};
use super::limits::{self, LimitFlags};
use super::output::{Staged, print_answer, remote_summary};
use super::sandbox::SandboxArgs;
use super::staging::Staging;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum TypeArg {
    /// A single SKILL.md file, staged byte for byte.
    SkillMd,
    /// A zip, tar, tar.gz or tar.zst archive with SKILL.md at its root.
    Archive,
}

#[derive(Args, Debug)]
pub struct ExtractArgs {
    /// The artifact file. Its extension is a format hint when no media type is given.
    artifact: PathBuf,
    /// Expected digest, `sha256:<64 lowercase hex>`; a mismatch rejects (`digest_mismatch`).
    #[arg(long, value_name = "sha256:HEX")]
    digest: Option<String>,
    /// Declared artifact type [default: skill-md for a `.md` file, else archive].
    #[arg(long = "type", value_enum)]
    artifact_type: Option<TypeArg>,
    /// Media type hint (e.g. the HTTP Content-Type); must agree with the bytes.
    #[arg(long, value_name = "MIME")]
    media_type: Option<String>,
    /// Directory to stage into; must not exist yet (it is created), in a directory that does.
    /// Without it a temporary directory is used and removed afterwards. A Ctrl-C removes
    /// either (exit 130). With --server, the accepted tree is fetched
    /// from the broker into it (every SHA-256 checked), which works over TCP too.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Limits file (.toml or .json; keys as in docs/limits.md). Flags below override it.
    #[arg(long, value_name = "FILE")]
    limits: Option<PathBuf>,
    /// Print one JSON object (verdict, reason, artifact, entries, totals, review, sandbox); a
    /// failure prints `{"error": {"kind", "exit", "message"}}` instead.
    #[arg(long)]
    pub json: bool,
    /// Send the artifact to a running broker instead (`unix:///path/to.sock`, `unix:` for the
    /// default socket, `http://127.0.0.1:PORT`, `https://HOST:PORT` with SKILLBOX_TLS_CA); same
    /// output and exit codes. With --out the accepted tree is fetched into that directory.
    #[arg(long, value_name = "URI")]
    server: Option<String>,
    /// The skill's name as the discovery index lists it. The review compares it with SKILL.md's
    /// `name` and raises the `name_mismatch` flag when they differ; the verdict never changes.
    #[arg(long, value_name = "NAME", value_parser = parse_skill_name)]
    skill_name: Option<String>,
    /// The skill's description as the discovery index lists it. The review raises the
    /// `description_mismatch` flag when it differs from SKILL.md's `description` (whitespace
    /// aside); the verdict never changes.
    #[arg(long, value_name = "TEXT", value_parser = parse_index_description)]
    index_description: Option<String>,
    #[command(flatten)]
    overrides: LimitFlags,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// `--skill-name`: the broker's bound on `header.skill_name`, so the local and `--server` paths
/// accept the same values.
fn parse_skill_name(s: &str) -> Result<String, String> {
    if s.len() > MAX_SKILL_NAME {
        return Err(format!("longer than {MAX_SKILL_NAME} bytes"));
    }
    if s.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    Ok(s.to_owned())
}

/// `--index-description`: the broker's bound on `header.index_description`.
fn parse_index_description(s: &str) -> Result<String, String> {
    if s.len() > MAX_INDEX_DESCRIPTION {
        return Err(format!("longer than {MAX_INDEX_DESCRIPTION} bytes"));
    }
    Ok(s.to_owned())
}

/// Start the confined child of a local `skillbox extract` now, before the command line is
/// parsed: its `exec`, start-up and process steps then overlap the parent's parsing and its
/// work on the artifact and staging directory, instead of following them. Only for `skillbox
/// extract ...` without `--server` (looked up crudely; the parsed command decides, and a child
/// it does not use is killed and reaped when the value is dropped). The child holds nothing but
/// its socket until [`run`] hands it the request; it is started for the default identity, and
/// [`skillbox::sandbox::Sandbox::with_child_ahead`] drops it for any other. `None` if it cannot be started (the
/// extraction then starts its child as usual, and reports why that fails).
pub fn start_child_ahead() -> Option<ChildAhead> {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(std::ffi::OsStr::new("extract")) {
        return None;
    }
    if args.any(|a| a == "--server" || a.as_encoded_bytes().starts_with(b"--server=")) {
        return None;
    }
    skillbox::sandbox::start_child_ahead(None, SandboxConfig::default().run_as).ok()
}

/// Run `skillbox extract`; `ahead` is the child [`start_child_ahead`] started, if any.
pub fn run(
    args: ExtractArgs,
    sandbox: &SandboxArgs,
    ahead: Option<ChildAhead>,
) -> Result<Exit, Failure> {
    if args.server.is_none() {
        super::interrupt::start();
    }
    let expected_digest = match &args.digest {
        Some(d) => Some(
            d.parse::<Sha256Digest>()
                .map_err(|e| Failure::usage(format!("--digest: {e}")))?,
        ),
        None => None,
    };
    let limits = limits::build(args.limits.as_deref(), &args.overrides)?;
    // Not a request field (a request may only tighten the broker's limits): dropped without a
    // word, it left the person sure the broker took the wrapper, then refused it.
    if args.server.is_some() && limits.accept_wrapper {
        return Err(Failure::usage(
            "--accept-wrapper (or accept_wrapper in --limits) is not sent to a broker: a request \
             may only tighten its limits, and whether it takes the `.skill` layout is its own \
             setting (serve --limits FILE with accept_wrapper = true). Drop the flag (a broker \
             that takes the layout takes it without), or drop --server to extract it here",
        ));
    }
    let given = args.artifact_type.map(|t| match t {
        TypeArg::SkillMd => ArtifactType::SkillMd,
        TypeArg::Archive => ArtifactType::Archive,
    });
    let artifact = open_artifact(&args.artifact).map_err(|mut f| {
        if f.message.ends_with("not a URL") {
            f.message.push_str(
                " (`skillbox fetch INDEX_URL SKILL_NAME` downloads a skill its discovery index \
                 lists and extracts it; `skillbox extract FILE` one already on disk)",
            );
        }
        f
    })?;
    if let Some(out) = &args.out {
        super::staging::check_out(out).map_err(Failure::usage)?;
    }
    let req = Request {
        media_type: args.media_type.clone(),
        expected_digest,
        skill_name: args.skill_name.clone(),
        index_description: args.index_description.clone(),
        ..Request::for_local_file(&args.artifact, given, limits)
    };
    if let Some(server) = &args.server {
        drop(ahead);
        return extract_remote(server, &args, &req);
    }
    let staging = match &args.out {
        Some(out) => Staging::kept(out).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => Failure::usage(format!(
                "--out {} already exists; give a new path",
                out.display()
            )),
            _ => Failure::operational(format!("cannot create {}: {e}", out.display())),
        })?,
        None => Staging::temporary().map_err(|e| {
            Failure::operational(format!("cannot create a temporary directory: {e}"))
        })?,
    };
    let dir = File::open(staging.path()).map_err(|e| {
        Failure::operational(format!("cannot open {}: {e}", staging.path().display()))
    });
    let confined = dir.and_then(|dir| {
        super::sandbox::extract(sandbox, &artifact, dir.as_fd(), &req, ahead)
            .map_err(|e| Failure::operational(e.to_string()))
    });
    // A Ctrl-C while the child ran ended it too: whatever it answered (a crash, or even an
    // acceptance after a SIGTERM sent to skillbox alone), nothing is kept.
    if let Some(sig) = super::interrupt::take() {
        staging.discard();
        super::interrupt::end(sig, args.json);
    }
    let (outcome, report) = match confined {
        Ok(c) => (c.outcome, c.sandbox),
        Err(f) => {
            staging.discard();
            return Err(f);
        }
    };
    if outcome.verdict == Verdict::Rejected {
        staging.discard();
    }
    print_answer(
        &outcome,
        Some(&report),
        Some(&report.summary()),
        staging.shown(),
        wrapper_hint(&outcome, false).as_deref(),
        args.json,
    )?;
    Ok(verdict_exit(outcome.verdict))
}

/// What would take a `missing_skill_md` refusal of the `.skill` packager's layout (one
/// directory holding SKILL.md and everything else; the engine names that SKILL.md as the
/// entry), for a person reading the text answer. `remote`: the broker decides by its own
/// limits, and `--accept-wrapper` is not sent to it.
fn wrapper_hint(outcome: &skillbox::intake::Outcome, remote: bool) -> Option<String> {
    wrapped_entry(outcome)?;
    Some(if remote {
        "a broker takes this layout when its limits file sets `accept_wrapper = true` \
         (serve --limits); the directory's name must be the skill's name"
            .to_owned()
    } else {
        "--accept-wrapper takes this layout (the directory's name must be the skill's name)"
            .to_owned()
    })
}

/// The `<dir>/SKILL.md` entry of a `missing_skill_md` refusal of the `.skill` packager's layout
/// (the engine names the wrapped SKILL.md as the entry), or `None` for any other answer.
fn wrapped_entry(outcome: &skillbox::intake::Outcome) -> Option<&str> {
    let r = outcome.reason.as_ref()?;
    let entry = r.entry.as_deref()?;
    let dir = entry.strip_suffix("/SKILL.md")?;
    if r.code != skillbox::reason::ReasonCode::MissingSkillMd || dir.is_empty() || dir.contains('/')
    {
        return None;
    }
    Some(entry)
}

/// Open the artifact a command line names. A path that names no regular file (nothing there,
/// a directory, a device) is the caller's mistake, a usage error (2), whatever the case; only a
/// file that is there and cannot be read is operational (1).
pub fn open_artifact(path: &Path) -> Result<File, Failure> {
    let not_a_file = |what: &str| Failure::usage(format!("{}: {what}", path.display()));
    names_a_file(path)?;
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return Err(not_a_file("is not a regular file"));
    }
    let file = File::open(path)
        .map_err(|e| Failure::operational(format!("cannot open {}: {e}", path.display())))?;
    // Checked again on the open file: the path may have been swapped since.
    if !file.metadata().map(|m| m.is_file()).unwrap_or(false) {
        return Err(not_a_file("is not a regular file"));
    }
    Ok(file)
}

/// A path on the command line must name something that is not a directory: anything else is
/// a usage error (2), the same for every command.
pub fn names_a_file(path: &Path) -> Result<(), Failure> {
    let not_a_file = |what: &str| Failure::usage(format!("{}: {what}", path.display()));
    match std::fs::metadata(path) {
        // A URL typed where a file goes: said as one, and shown as refused URLs are (masked
        // from its first possible user information on), never with the password it may hold.
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                && path.to_str().is_some_and(skillbox::urls::names_a_url) =>
        {
            let text = path.to_str().unwrap_or_default();
            Err(Failure::usage(format!(
                "{}: no such file; this command reads a local file, not a URL",
                skillbox::urls::redact_refused(text)
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(not_a_file("no such file")),
        Ok(m) if m.is_dir() => Err(not_a_file("is a directory, not a file")),
        _ => Ok(()),
    }
}

fn verdict_exit(v: Verdict) -> Exit {
    match v {
        Verdict::Accepted => Exit::Ok,
        Verdict::Rejected => Exit::Rejected,
    }
}

/// `--server`: the broker extracts; with `--out` its accepted tree is fetched into the new
/// directory; the broker keeps nothing (the staged tree is released).
fn extract_remote(server: &str, args: &ExtractArgs, req: &Request) -> Result<Exit, Failure> {
    let out = args.out.as_deref();
    let server = server_uri(server)?;
    // The tree is written only after the broker has extracted: a destination that cannot be
    // made is said before the upload, as a local extraction says it (nothing sent for nothing).
    // One that exists, or whose directory does not, was said in [`run`] (a usage error); what
    // is left is a parent that is no directory or cannot be reached, as `create_dir` says it.
    if let Some(dir) = out
        && let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty())
    {
        let cannot = |e: std::io::Error| {
            Failure::operational(format!("cannot create {}: {e}", dir.display()))
        };
        match std::fs::metadata(parent) {
            Err(e) => return Err(cannot(e)),
            Ok(m) if !m.is_dir() => {
                return Err(cannot(std::io::Error::from_raw_os_error(libc::ENOTDIR)));
            }
            Ok(_) => {}
        }
    }
    // The tree is written here, into `--out`: a signal is held from now on (it stops the
    // exchange, wherever it is), and what was written is removed before the command ends, as a
    // local extraction's tree is (`interrupt`). The directory itself is made by the client.
    if let Some(dir) = out {
        super::interrupt::staging(|| Ok(((), dir.to_owned())))
            .map_err(|e| Failure::operational(e.to_string()))?;
    }
    let done = skillbox::client::extract_blocking_until(&server, &args.artifact, req, out, &|| {
        super::interrupt::pending()
    });
    if let Some(sig) = super::interrupt::take() {
        if let Some(dir) = out {
            super::staging::discard_path(dir);
        }
        match done {
            Ok(Until::Stopped(Released::Unconfirmed)) => super::interrupt::end_with(
                sig,
                args.json,
                "the extraction was stopped and its tree here removed; the broker did not say \
                 within 2 s that it removed its copy (it does once it takes the release, else \
                 when the copy expires)",
            ),
            _ => super::interrupt::end(sig, args.json),
        }
    }
    if out.is_some() {
        super::interrupt::staging_done();
    }
    let done = match done.map_err(|e| remote_failure(&server, e))? {
        Until::Done(done) => *done,
        Until::Stopped(_) => {
            return Err(Failure::operational(
                "the exchange with the broker was stopped",
            ));
        }
    };
    // A `*.skill` file asks for its wrapper to be taken, as `--accept-wrapper` does, and no
    // request can carry that (it would loosen the broker's limits): when the broker refused the
    // layout, what was asked was not what this broker takes, the same usage error (2) as the
    // flag, said with the setting that decides. A broker that takes the layout takes it, and
    // any other refusal is the broker's verdict (3). Nothing was kept: a rejected tree is not
    // staged, nor fetched into --out.
    if req.limits.accept_wrapper
        && done.outcome.verdict == Verdict::Rejected
        && let Some(entry) = wrapped_entry(&done.outcome)
    {
        return Err(Failure::usage(format!(
            "{}: the broker at {server} refused the `.skill` packager's layout ({entry} is not at \
             the root: missing_skill_md); a `*.skill` file's wrapper is taken by default only \
             by a local extract, and a request cannot ask a broker for it: the broker takes it \
             when its limits file sets `accept_wrapper = true` (serve --limits FILE). Drop \
             --server to extract it here",
            args.artifact.display()
        )));
    }
    let summary = remote_summary(done.sandbox.as_ref());
    print_answer(
        &done.outcome,
        done.sandbox.as_ref(),
        summary.as_deref(),
        match out {
            Some(dir) if done.outcome.verdict == Verdict::Accepted => Staged::At(dir),
            _ => Staged::Released,
        },
        wrapper_hint(&done.outcome, true).as_deref(),
        args.json,
    )?;
    Ok(verdict_exit(done.outcome.verdict))
}

/// `unix:` names the default socket: spelled out, so a failure can say which path was tried.
fn resolve_server(server: &str) -> String {
    if server == "unix:" || server == "unix://" {
        format!("unix://{}", skillbox::convert::default_socket().display())
    } else {
        server.to_owned()
    }
}

/// `--server URI` as the client takes it (`unix:` spelled out). A URI no client takes is the
/// caller's mistake, a usage error (2), not an operational one. So is user information in an
/// `http`/`https` URI: gRPC sends none of it, and every message naming the server would show
/// the password, so it is refused and shown masked (a broker URI has no path or query in
/// which an `@` could mean anything else).
pub fn server_uri(server: &str) -> Result<String, Failure> {
    let uri = resolve_server(server);
    let masked = skillbox::urls::redact_refused(&uri);
    let web = uri.starts_with("http://") || uri.starts_with("https://");
    if web && uri.contains('@') {
        return Err(Failure::usage(format!(
            "--server {masked}: a broker URI takes no user information (USER:PASSWORD@), which gRPC never sends; give http://HOST:PORT or https://HOST:PORT (a client certificate comes from SKILLBOX_TLS_CERT and SKILLBOX_TLS_KEY)"
        )));
    }
    let tls = skillbox::client::TlsMaterial::default();
    if skillbox::client::endpoint_with(&uri, &tls).is_err() {
        return Err(Failure::usage(format!(
            "--server {masked}: not a broker URI; give unix:///PATH (unix: for the default socket), http://127.0.0.1:PORT or https://HOST:PORT"
        )));
    }
    // Half a client certificate pair is the caller's mistake, said before anything is sent
    // (the client would otherwise go on without a certificate).
    if uri.starts_with("https://")
        && let Err(e) = skillbox::client::half_pair()
    {
        return Err(Failure::usage(e.to_string()));
    }
    Ok(uri)
}

/// What to say when nothing took the connection to `server`: for a socket, which path and how
/// to start a broker there; for TCP, the cause (a TLS handshake the CA does not verify says
/// which variable names the CA, not that nobody is there).
pub fn no_broker(server: &str, e: &skillbox::client::ClientError) -> String {
    if let Some(path) = server.strip_prefix("unix://") {
        let why = match std::fs::symlink_metadata(path) {
            Err(_) => "no such socket",
            Ok(_) => "nothing is listening on it",
        };
        return format!(
            "no broker at {path} ({why}); start one with `skillbox serve` (or `skillbox serve --socket {path}`)"
        );
    }
    let mut why = String::new();
    let mut chain = std::error::Error::source(e);
    while let Some(cause) = chain {
        let text = cause.to_string();
        if !why.contains(&text) {
            why = if why.is_empty() {
                text
            } else {
                format!("{why}: {text}")
            };
        }
        chain = cause.source();
    }
    let lower = why.to_ascii_lowercase();
    // A certificate its CA did verify, for other names: no variable helps (it said to set
    // SKILLBOX_TLS_CA, which was set and right), the name in the URI must change.
    if server.starts_with("https://")
        && (lower.contains("not valid for name") || lower.contains("notvalidforname"))
    {
        return format!(
            "the TLS handshake with the broker at {server} failed ({why}): its certificate does not name the host in that URI; give --server https://NAME:PORT with a name (or address) its certificate holds"
        );
    }
    if server.starts_with("https://") && (lower.contains("certificate") || lower.contains("tls")) {
        return format!(
            "the TLS handshake with the broker at {server} failed ({why}); set SKILLBOX_TLS_CA to the PEM file of the CA that signed its certificate (and SKILLBOX_TLS_CERT, SKILLBOX_TLS_KEY when it asks for a client certificate)"
        );
    }
    format!("no broker answers at {server} ({why}); is `skillbox serve --tcp ...` running there?")
}

/// TLS material the client could not use (a key that does not match its certificate, a file
/// that holds none), said with the variables it came from.
pub fn tls_settings(e: &skillbox::client::ClientError) -> String {
    let text = e.to_string();
    if text.contains("SKILLBOX_TLS_") {
        text
    } else {
        format!("{text} (the files of SKILLBOX_TLS_CA, SKILLBOX_TLS_CERT and SKILLBOX_TLS_KEY)")
    }
}

/// A broker that accepted the connection and closed it before answering: at its
/// --max-connections, or restarting; over TLS without a client certificate, also a broker that
/// asks for one (mutual TLS): with TLS 1.3 the client's side of the handshake is done before
/// the broker checks the certificate, so its refusal comes as a closed connection, and the
/// person was told only to try again later.
pub fn closed_unread(server: &str, why: &str) -> String {
    let no_identity = server.starts_with("https://")
        && std::env::var_os("SKILLBOX_TLS_CERT").is_none()
        && std::env::var_os("SKILLBOX_TLS_KEY").is_none();
    let mtls = if no_identity {
        ", or it asks for a client certificate (mutual TLS, its --tls-client-ca) and none was \
         given: set SKILLBOX_TLS_CERT and SKILLBOX_TLS_KEY"
    } else {
        ""
    };
    format!(
        "UNAVAILABLE: the broker at {server} closed the connection before answering: it may have --max-connections open, or be restarting; try again later{mtls} ({why})"
    )
}

/// What the broker's refusal means for the person at the command line: no broker at a socket
/// says which socket and how to start one; a limit looser than the server's names the field
/// and the server's value (asked through ServerInfo), not the transport's text.
fn remote_failure(server: &str, e: skillbox::client::ClientError) -> Failure {
    use skillbox::client::ClientError;
    use tonic_types::StatusExt as _;
    match &e {
        ClientError::Connect { .. } => {
            let mut message = no_broker(server, &e);
            if server.starts_with("unix://") {
                message.push_str(", or drop --server to extract locally");
            }
            Failure::operational(message)
        }
        // Accepted and closed unread: the broker's --max-connections are open (or it is
        // restarting). Said as such, not as an answer the server never gave.
        ClientError::Unavailable(why) => Failure::operational(closed_unread(server, why)),
        ClientError::Tls(_) => Failure::operational(tls_settings(&e)),
        ClientError::Status(status) if e.is_invalid_argument() => {
            let field = status
                .get_details_bad_request()
                .and_then(|b| b.field_violations.into_iter().next());
            match field {
                Some(v) if v.field.starts_with("header.limits.") => {
                    let name = v.field.trim_start_matches("header.limits.");
                    let flag = format!("--{}", name.replace('_', "-"));
                    let theirs = server_limit(server, name)
                        .map_or_else(String::new, |value| format!(" (the server's: {value})"));
                    Failure::usage(format!("{flag}: {}{theirs}", v.description))
                }
                Some(v) => Failure::usage(format!("{}: {}", v.field, v.description)),
                None => Failure::usage(status.message().to_owned()),
            }
        }
        _ => Failure::operational(e.to_string()),
    }
}

/// The server's value of one limit, from ServerInfo, or nothing if it cannot be had.
fn server_limit(server: &str, name: &str) -> Option<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    let info = rt.block_on(async {
        let mut client = skillbox::client::Client::connect(server).await.ok()?;
        tokio::time::timeout(std::time::Duration::from_secs(5), client.server_info())
            .await
            .ok()?
            .ok()
    })?;
    let l = info.limits?;
    let n = |v: Option<u64>| v.map(|v| v.to_string());
    let b = |v: Option<bool>| v.map(|v| v.to_string());
    match name {
        "max_artifact_bytes" => n(l.max_artifact_bytes),
        "max_entries" => n(l.max_entries),
        "max_expanded_bytes" => n(l.max_expanded_bytes),
        "max_file_bytes" => n(l.max_file_bytes),
        "max_ratio" => n(l.max_ratio),
        "ratio_threshold_bytes" => n(l.ratio_threshold_bytes),
        "max_path_depth" => n(l.max_path_depth),
        "max_path_bytes" => n(l.max_path_bytes),
        "max_component_bytes" => n(l.max_component_bytes),
        "zstd_window_log_max" => n(l.zstd_window_log_max.map(u64::from)),
        "allow_symlinks" => b(l.allow_symlinks),
        "require_skill_md" => b(l.require_skill_md),
        "hardlinks" => l.hardlinks.and_then(|h| {
            skillbox::proto::HardlinkPolicy::try_from(h)
                .ok()
                .map(|p| match p {
                    skillbox::proto::HardlinkPolicy::CopyInternal => "copy-internal".to_owned(),
                    _ => "reject".to_owned(),
                })
        }),
        _ => None,
    }
}
