//! `skillbox publish SKILLS_DIR --out OUT_DIR`: build a reviewed, reproducible discovery index
//! from a directory of skill folders, or (`--check`) compare the sources' build with a
//! published tree. The work is [`skillbox::publish`]'s; this file parses, prints and maps
//! errors to exit codes.
//!
//! Exit codes (see [`Exit`]): 0 published (or `--check`: up to date), 3 a skill was refused
//! (nothing written), 4 `--check`: the published tree differs, 1 operational error, 2 usage
//! error.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use skillbox::lifecycle::policy::{Decision, Policy};
use skillbox::publish::{self, Built, Format, Options, PublishError, Published, tree};
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
    /// is written, and nothing is deleted.
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
        ..Options::default()
    })
}

/// `--base-url`: absolute https, no user information, query or fragment; a directory URL.
fn base_url(s: &str) -> Result<url::Url, Failure> {
    let bad = |why: &str| Failure::usage(format!("--base-url {s:?}: {why}"));
    let mut url = skillbox::urls::parse_absolute(s).map_err(|e| bad(&e.to_string()))?;
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
    out_outside_skills(&args.out, &mut skills)?;
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
        stage_dir(&args.out)?
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

/// OUT_DIR inside a skill folder would be packed into that skill on the next run: refused.
/// OUT_DIR as a subfolder of SKILLS_DIR is not a skill: left out.
fn out_outside_skills(out: &Path, skills: &mut Vec<publish::SkillSource>) -> Result<(), Fail> {
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let Ok(parent) = std::fs::canonicalize(parent) else {
        return Ok(());
    };
    let out = match out.file_name() {
        Some(n) => parent.join(n),
        None => parent,
    };
    skills.retain(|s| std::fs::canonicalize(&s.dir).map_or(true, |dir| dir != out));
    for s in skills.iter() {
        if let Ok(dir) = std::fs::canonicalize(&s.dir)
            && out.starts_with(&dir)
        {
            return Err(Failure::usage(format!(
                "--out {} is inside the skill folder {}; it would be published in it \
                 (put it elsewhere)",
                out.display(),
                s.dir.display()
            ))
            .into());
        }
    }
    Ok(())
}

/// Where the build is staged: beside OUT_DIR, on its file system, so it can be renamed in.
fn stage_dir(out: &Path) -> Result<PathBuf, Fail> {
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
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
    let message = format!(
        "{} is not what the sources build: {} difference(s); run `skillbox publish` without --check",
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
