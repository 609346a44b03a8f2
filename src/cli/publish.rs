//! `skillbox publish SKILLS_DIR --out OUT_DIR`: build a reviewed, reproducible discovery index
//! from a directory of skill folders, or (`--check`) compare the sources' build with a
//! published tree. The work is [`skillbox::publish`]'s; this file parses, prints and maps
//! errors to exit codes.
//!
//! Exit codes (see [`Exit`]): 0 published (or `--check`: up to date), 3 a skill was refused
//! (nothing written), 4 `--check`: the published tree differs, 1 operational error, 2 usage
//! error.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use skillbox::lifecycle::policy::{Decision, Policy};
use skillbox::publish::{
    self, Built, Format, Hidden, LeftOutReason, Options, PublishError, Published, tree,
};
use skillbox::sandbox::Sandbox;

use super::exit::{Exit, Failure, error_object, print_json};
use super::sandbox::SandboxArgs;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum FormatArg {
    /// A gzip-compressed tar (GNU headers, level 9).
    #[value(name = "tar.gz")]
    TarGz,
    /// A zip (deflate, level 9).
    Zip,
}

#[derive(Args, Debug)]
pub struct PublishArgs {
    /// The skill folders: a directory holding SKILL.md (one skill), or one whose subfolders
    /// each hold one (hidden subfolders aside). A folder's name is its skill's name.
    skills_dir: PathBuf,
    /// The directory to publish into (served as the site root): the index is written to
    /// OUT_DIR/.well-known/agent-skills/index.json, artifacts beside it under content-addressed
    /// names. Created if missing; in an existing one nothing but new artifacts and the index
    /// is written, and nothing is deleted. Refused when it is, is inside, or holds a skill
    /// folder (by real paths); a subfolder of SKILLS_DIR without SKILL.md is left out of the
    /// skills.
    #[arg(long, value_name = "OUT_DIR")]
    out: PathBuf,
    /// The https URL OUT_DIR is served at; entry URLs become absolute under it
    /// [default: URLs relative to the index].
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// Archive format of the artifacts.
    #[arg(long, value_enum, default_value = "tar.gz")]
    format: FormatArg,
    /// Publish a folder holding only SKILL.md as an archive too [default: as type skill-md].
    #[arg(long)]
    archive_all: bool,
    /// Pack hidden entries (names starting with '.', at any depth: .env, .github/) too
    /// [default: left out, and listed]. Version-control metadata (.git, .hg, .svn, .bzr,
    /// _darcs, .jj, CVS, ...) is left out whatever this says.
    #[arg(long)]
    include_hidden: bool,
    /// Write nothing: build in a temporary directory and compare with OUT_DIR (the index byte
    /// for byte, and every artifact it names); exit 4 naming each difference.
    #[arg(long)]
    check: bool,
    /// The install policy (TOML, docs/lifecycle.md) each skill is judged by, to show what
    /// consumers will be asked [default: the built-in one].
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Refuse to publish a skill the install policy would not approve on its own (it asks a
    /// person, or denies): findings become fatal.
    #[arg(long)]
    deny_findings: bool,
    /// Print one JSON object; a failure prints `{"error": {"kind", "exit", "message", ...}}`
    /// (refusals and differences listed).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// Run `skillbox publish`; prints the answer or the error, and returns the exit status.
pub fn run(args: &PublishArgs, sandbox: &SandboxArgs) -> Exit {
    match publish(args, sandbox) {
        Ok(exit) => exit,
        Err(failure) => {
            if args.json {
                print_json(&failure.json);
            }
            eprintln!("skillbox: {}", failure.message);
            for line in &failure.lines {
                eprintln!("  {line}");
            }
            failure.exit
        }
    }
}

/// A failure with its JSON error object and the lines that detail it.
struct Fail {
    exit: Exit,
    message: String,
    lines: Vec<String>,
    json: Value,
}

impl From<Failure> for Fail {
    fn from(f: Failure) -> Self {
        Self {
            json: error_object(f.exit.kind(), f.exit.code(), &f.message),
            exit: f.exit,
            message: f.message,
            lines: Vec::new(),
        }
    }
}

fn options(args: &PublishArgs) -> Result<Options, Failure> {
    let base_url = match &args.base_url {
        None => None,
        Some(s) => Some(base_url(s)?),
    };
    let policy = match &args.policy {
        None => Policy::default(),
        Some(p) => Policy::from_file(p).map_err(|e| Failure::usage(e.message))?,
    };
    Ok(Options {
        format: match args.format {
            FormatArg::TarGz => Format::TarGz,
            FormatArg::Zip => Format::Zip,
        },
        mtime: source_date_epoch()?,
        base_url,
        archive_all: args.archive_all,
        policy,
        deny_findings: args.deny_findings,
        hidden: if args.include_hidden {
            Hidden::Include
        } else {
            Hidden::LeaveOut
        },
        ..Options::default()
    })
}

/// `--base-url`: absolute https, no user information, query or fragment; a directory URL.
fn base_url(s: &str) -> Result<url::Url, Failure> {
    // Masked: a base URL typed with a password must not be repeated by its refusal.
    let shown = skillbox::urls::redact_refused(s);
    let bad = |why: &str| Failure::usage(format!("--base-url {shown:?}: {why}"));
    let mut url = skillbox::urls::parse_typed(s).map_err(|e| bad(&e.to_string()))?;
    if url.scheme() != "https" {
        return Err(bad("consumers fetch over https only"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("user information is never published"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("no query or fragment"));
    }
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    Ok(url)
}

/// `SOURCE_DATE_EPOCH` (reproducible-builds.org): the mtime of every archive entry, else 0.
fn source_date_epoch() -> Result<u64, Failure> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Err(std::env::VarError::NotPresent) => Ok(0),
        Ok(v) if v.is_empty() => Ok(0),
        Ok(v) => v.trim().parse::<u64>().map_err(|_| {
            Failure::usage(format!(
                "SOURCE_DATE_EPOCH={v:?} is not a number of seconds since 1970"
            ))
        }),
        Err(std::env::VarError::NotUnicode(_)) => Err(Failure::usage(
            "SOURCE_DATE_EPOCH is not a number of seconds since 1970",
        )),
    }
}

fn publish(args: &PublishArgs, sandbox_args: &SandboxArgs) -> Result<Exit, Fail> {
    let opts = options(args)?;
    let (mut skills, prior) = publish::discover(&args.skills_dir).map_err(fail)?;
    // Said as for every directory a flag names ([`super::parent_exists`]); [`stage_dir`] checks
    // OUT_DIR's real parent again, once every link on the way is resolved.
    super::parent_exists("--out", &args.out).map_err(|m| Fail::from(Failure::usage(m)))?;
    let real_out = real_out(&args.out)?;
    out_outside_skills(&args.out, &real_out, &mut skills)?;
    if skills.is_empty() && prior.is_empty() {
        // Only OUT_DIR was found: an empty index would withdraw what it lists.
        return Err(Failure::usage(format!(
            "{}: no skill to publish (its one folder is --out {} itself); nothing was written",
            args.skills_dir.display(),
            args.out.display()
        ))
        .into());
    }
    if sandbox_args.allow_unconfined {
        eprintln!(
            "skillbox: WARNING: --allow-unconfined: the check extraction proceeds even if confinement cannot be applied"
        );
    }
    let sandbox = Sandbox::new(sandbox_args.config())
        .map_err(|e| Fail::from(Failure::operational(e.to_string())))?;
    let stage_in = if args.check {
        std::env::temp_dir()
    } else {
        stage_dir(&args.out, &real_out)?
    };
    let built = publish::build(&skills, prior, &opts, &sandbox, &stage_in).map_err(fail)?;
    if args.check {
        let diffs = tree::check(&built, &args.out).map_err(fail)?;
        return checked(&built, &args.out, &diffs, args.json);
    }
    let skills = built.skills.clone();
    let written = tree::write(built, &args.out).map_err(fail)?;
    if args.json {
        print_json(&json!({
            "out": args.out.display().to_string(),
            "index": args.out.join(publish::INDEX_DIR).join(publish::INDEX_FILE).display().to_string(),
            "skills": skills,
            "files": written,
        }));
    } else {
        print_skills(&skills);
        let n = written
            .iter()
            .filter(|w| w.status == tree::FileStatus::Written)
            .count();
        println!(
            "published {} skill(s) to {} ({n} file(s) written, {} unchanged)",
            skills.len(),
            args.out
                .join(publish::INDEX_DIR)
                .join(publish::INDEX_FILE)
                .display(),
            written.len() - n
        );
    }
    Ok(Exit::Ok)
}

/// Where OUT_DIR really is, every symlink and `..` on the way resolved (it may not exist
/// yet): the canonical path of its longest existing ancestor, the missing names appended.
/// Compared with the skill folders' canonical paths, so no spelling (`skills/x/..`, a
/// symlink to a skill folder) slips past [`out_outside_skills`].
fn real_out(out: &Path) -> Result<PathBuf, Fail> {
    let abs = std::path::absolute(out).map_err(|e| {
        Fail::from(Failure::operational(format!(
            "--out {}: {e}",
            out.display()
        )))
    })?;
    let mut head = abs.as_path();
    let mut missing: Vec<&OsStr> = Vec::new();
    loop {
        match std::fs::canonicalize(head) {
            Ok(mut real) => {
                real.extend(missing.iter().rev());
                return Ok(real);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A name (never `..`: `file_name` is None then) under a missing directory.
                let (Some(name), Some(parent)) = (head.file_name(), head.parent()) else {
                    return Err(Failure::usage(format!(
                        "--out {}: a directory on the way does not exist",
                        out.display()
                    ))
                    .into());
                };
                missing.push(name);
                head = parent;
            }
            Err(e) => {
                return Err(Failure::operational(format!("--out {}: {e}", head.display())).into());
            }
        }
    }
}

/// Publish writes OUT_DIR/.well-known/agent-skills/... and stages beside OUT_DIR; none of it
/// may land in a skill folder, where the next run would pack it (or, OUT_DIR being the skill
/// folder, the skill would be dropped from the index it is published into), and the site
/// served from OUT_DIR must not serve skill sources (the hidden files a package leaves out,
/// `.env` and `.git`, included). Refused, by real paths: OUT_DIR equal to or inside a skill
/// folder, and a skill folder inside OUT_DIR. The one overlap kept: OUT_DIR as a subfolder of
/// SKILLS_DIR holding no SKILL.md (the published site beside the skills) is not a skill, and
/// is left out.
fn out_outside_skills(
    given: &Path,
    out: &Path,
    skills: &mut Vec<publish::SkillSource>,
) -> Result<(), Fail> {
    let shown = if given == out {
        given.display().to_string()
    } else {
        format!("{} (that is {})", given.display(), out.display())
    };
    let mut kept = Vec::new();
    for s in skills.drain(..) {
        let dir = std::fs::canonicalize(&s.dir)
            .map_err(|e| Fail::from(Failure::operational(format!("{}: {e}", s.dir.display()))))?;
        let is_skill = std::fs::symlink_metadata(dir.join("SKILL.md")).is_ok();
        let refuse = |why: String| -> Result<(), Fail> { Err(Failure::usage(why).into()) };
        if dir == out && !is_skill {
            continue;
        }
        if dir == out {
            return refuse(format!(
                "--out {shown} is the skill folder {}: publishing into it would change that \
                 skill and leave it out of the index (give a directory outside every skill \
                 folder)",
                s.dir.display()
            ));
        }
        if out.starts_with(&dir) {
            return refuse(format!(
                "--out {shown} is inside the skill folder {}; it would be packed into that \
                 skill on the next run (put it elsewhere)",
                s.dir.display()
            ));
        }
        if dir.starts_with(out) {
            return refuse(format!(
                "the skill folder {} is inside --out {shown}: the site would serve the skill's \
                 sources, hidden files included, and what publish writes could land in the \
                 skill (publish beside the skills, e.g. --out site)",
                s.dir.display()
            ));
        }
        kept.push(s);
    }
    *skills = kept;
    Ok(())
}

/// Where the build is staged: beside OUT_DIR (its real parent), on its file system, so it can
/// be renamed in, and never inside a skill folder ([`out_outside_skills`] saw to that).
fn stage_dir(out: &Path, real_out: &Path) -> Result<PathBuf, Fail> {
    let parent = real_out.parent().unwrap_or(Path::new("/")).to_owned();
    if !parent.is_dir() {
        return Err(Failure::usage(format!(
            "--out {}: its parent directory {} does not exist",
            out.display(),
            parent.display()
        ))
        .into());
    }
    Ok(parent)
}

fn checked(
    built: &Built,
    out: &Path,
    diffs: &[tree::Difference],
    json_out: bool,
) -> Result<Exit, Fail> {
    if diffs.is_empty() {
        if json_out {
            print_json(&json!({
                "out": out.display().to_string(),
                "up_to_date": true,
                "skills": built.skills,
                "differences": [],
            }));
        } else {
            print_skills(&built.skills);
            println!(
                "{} is what the sources build ({} skill(s))",
                out.join(publish::INDEX_DIR).display(),
                built.skills.len()
            );
        }
        return Ok(Exit::Ok);
    }
    let exit = Exit::Differs;
    // Publishing again is the fix only when it can be: it never replaces an artifact holding
    // other bytes, nor writes through a link, so saying "run publish" then sends the user to
    // a run that fails.
    let hint = if diffs.iter().all(|d| d.publish_fixes) {
        "run `skillbox publish` without --check"
    } else {
        "publish alone cannot mend it (it never replaces an artifact holding other bytes, nor \
         writes through a link): see below"
    };
    let message = format!(
        "{} is not what the sources build: {} difference(s); {hint}",
        out.display(),
        diffs.len()
    );
    let mut v = error_object(exit.kind(), exit.code(), &message);
    v["error"]["differences"] = json!(diffs);
    Err(Fail {
        exit,
        message,
        lines: diffs
            .iter()
            .map(|d| {
                let kind = match d.kind {
                    tree::DifferenceKind::Missing => "missing",
                    tree::DifferenceKind::Differs => "differs",
                };
                format!("{kind} {}: {}", d.path, d.detail)
            })
            .collect(),
        json: v,
    })
}

fn fail(e: PublishError) -> Fail {
    let (exit, lines, extra) = match &e {
        PublishError::Usage(_) => (Exit::Usage, Vec::new(), None),
        PublishError::Refused(r) => (
            Exit::Rejected,
            r.iter().map(ToString::to_string).collect(),
            Some(json!(r)),
        ),
        PublishError::Io { .. }
        | PublishError::Sandbox(_)
        | PublishError::Confinement { .. }
        | PublishError::Inconsistent(_) => (Exit::Operational, Vec::new(), None),
    };
    let message = match &e {
        PublishError::Refused(r) => format!(
            "{} refusal(s) in the sources; nothing was published",
            r.len()
        ),
        other => other.to_string(),
    };
    let mut json = error_object(exit.kind(), exit.code(), &message);
    if let Some(r) = extra {
        json["error"]["refusals"] = r;
    }
    Fail {
        exit,
        message,
        lines,
        json,
    }
}

/// One block per skill: what it is, and what consumers' policies will ask about.
fn print_skills(skills: &[Published]) {
    for s in skills {
        println!(
            "{}  {}  {}  {}",
            s.name,
            s.artifact_type.as_str(),
            s.digest,
            s.path
        );
        let f = &s.findings;
        let c = &f.capabilities;
        let lists: [(&str, &[String]); 8] = [
            ("tools", &f.tools),
            ("scripts", &f.scripts),
            ("executables", &c.executables),
            ("hosts", &c.hosts),
            ("downloads", &c.downloads),
            ("uploads", &c.uploads),
            ("credentials", &c.credentials),
            ("risky commands", &c.risky_commands),
        ];
        for (what, items) in lists {
            if !items.is_empty() {
                println!("    {what}: {}", items.join(", "));
            }
        }
        if !f.kinds.is_empty() {
            let kinds: Vec<String> = f.kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
            println!("    findings: {}", kinds.join(", "));
        }
        if !f.review_complete {
            println!("    review incomplete: a bound left bytes unread");
        }
        for (reason, what) in [
            (
                LeftOutReason::Hidden,
                "left out, hidden (--include-hidden packs them)",
            ),
            (LeftOutReason::Vcs, "left out, version-control metadata"),
            (LeftOutReason::Backup, "left out, editor backups"),
        ] {
            let paths: Vec<&str> = s
                .left_out
                .iter()
                .filter(|l| l.reason == reason)
                .map(|l| l.path.as_str())
                .collect();
            let unlisted = s.left_out_unlisted.of(reason);
            if !paths.is_empty() || unlisted > 0 {
                println!(
                    "    {what}: {}",
                    shortened(&paths, unlisted, s.left_out_unlisted.total() > 0)
                );
            }
        }
        if !s.not_shared.is_empty() {
            let paths: Vec<&str> = s.not_shared.iter().map(String::as_str).collect();
            println!(
                "    private in the sources (SKILL.md is not), published readable by anyone: {}",
                shortened(&paths, 0, false)
            );
        }
        for w in &s.skills_cli_leaves_out {
            let how = if w.code.says_nothing() {
                "and says nothing"
            } else {
                "it says so, yet exits 0"
            };
            println!(
                "    warning: {} will not install it ({how}): {}",
                publish::stock::STOCK_CLI,
                w.detail
            );
        }
        for c in &s.skills_cli_changes {
            println!(
                "    warning: {} installs it otherwise (and says nothing): {}",
                publish::stock::STOCK_CLI,
                c.detail
            );
        }
        if !s.sandbox.starts_with("confined") {
            println!("    check extraction: {}", s.sandbox);
        }
        match &s.decision {
            Decision::Approved { rule } => println!("    install policy: approved ({rule})"),
            Decision::NeedsApproval { findings } => println!(
                "    install policy: needs approval ({})",
                findings.join(", ")
            ),
            Decision::Denied { rule } => println!("    install policy: denied ({rule})"),
        }
    }
}

/// A list for one line of text output: the first paths, then how many more, those listed
/// past them and the `unlisted` ones (`--json` lists them all, or, when the skill left out
/// more than are listed, the first [`publish::LEFT_OUT_LISTED`]).
fn shortened(paths: &[&str], unlisted: u64, capped: bool) -> String {
    const SHOWN: usize = 20;
    let mut line = paths[..paths.len().min(SHOWN)].join(", ");
    let more = paths.len().saturating_sub(SHOWN) as u64 + unlisted;
    if more > 0 {
        let json = if capped {
            format!(
                "--json lists the first {} entries left out and counts the rest",
                publish::LEFT_OUT_LISTED
            )
        } else {
            "--json lists them all".to_owned()
        };
        if line.is_empty() {
            line = format!("{more} ({json})");
        } else {
            line.push_str(&format!(" and {more} more ({json})"));
        }
    }
    line
}
