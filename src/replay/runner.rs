//! Running the cases: each in its own confined child (a sandbox's spare in this process, or a
//! `skillbox extract --json` process) over a fresh parent directory, its answer taken, and what
//! it left behind checked.

use super::*;

/// Run every case under `dir` in parallel.
pub fn run(dir: &Path, opts: &Options) -> Result<Report, ReplayError> {
    run_observed(
        dir,
        opts,
        &Observer {
            started: &|_| {},
            finished: &|_| {},
            keep_going: &|| true,
            scratch: None,
        },
    )
}

/// What a caller of [`run_observed`] is told, and what it decides, while the cases run.
pub struct Observer<'a> {
    /// How many cases there are, once they are known.
    pub started: &'a (dyn Fn(usize) + Sync),
    /// Each case's result as it ends (from the worker threads, in completion order): what a
    /// progress display needs.
    pub finished: &'a (dyn Fn(&CaseResult) + Sync),
    /// Asked before each case starts: once `false` (the command was interrupted), no case
    /// starts; those running end, and the report holds only the cases that ran.
    pub keep_going: &'a (dyn Fn() -> bool + Sync),
    /// An empty directory the caller made, and removes, for the run's scratch (so a signal that
    /// ends the command can remove it: the CLI's); a temporary one removed here when `None`.
    pub scratch: Option<&'a Path>,
}

/// [`run`], with an [`Observer`].
pub fn run_observed(
    dir: &Path,
    opts: &Options,
    observer: &Observer<'_>,
) -> Result<Report, ReplayError> {
    let Observer {
        started,
        finished,
        keep_going,
        scratch: given_scratch,
    } = *observer;
    let start = Instant::now();
    let given = dir;
    let (root, sub) = locate(dir)?;
    let mut cases = collect(&root)?;
    if !sub.as_os_str().is_empty() {
        cases.retain(|c| c.file.starts_with(&sub));
    }
    let dir = root.as_path();
    started(cases.len());
    let own_scratch: tempfile::TempDir;
    let scratch = match given_scratch {
        Some(p) => p,
        None => {
            own_scratch = tempfile::Builder::new()
                .prefix("skillbox-replay-")
                .tempdir()
                .map_err(ReplayError::Scratch)?;
            own_scratch.path()
        }
    };
    fs::create_dir(scratch.join("io")).map_err(ReplayError::Scratch)?;
    fs::create_dir(scratch.join("cases")).map_err(ReplayError::Scratch)?;
    let dir_abs = dir.canonicalize().map_err(|source| ReplayError::Read {
        path: dir.to_owned(),
        source,
    })?;
    let jobs = opts.jobs.clamp(1, cases.len().max(1));
    let sandbox = match &opts.isolate {
        Isolate::Spare(spare) => Some(start_sandbox(spare, opts.timeout)?),
        Isolate::Process { .. } => None,
    };
    let how = match (&opts.isolate, &sandbox) {
        (Isolate::Spare(spare), Some(sandbox)) => How::Spare(sandbox, spare),
        (Isolate::Process { exe, extract_args }, _) => How::Process { exe, extract_args },
        // Not reached: a sandbox is started for every spare run above.
        (Isolate::Spare(_), None) => {
            return Err(ReplayError::Scratch(io::Error::other("no sandbox")));
        }
    };
    let next = AtomicUsize::new(0);
    let results: Mutex<BTreeMap<usize, CaseResult>> = Mutex::new(BTreeMap::new());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| {
                loop {
                    if !keep_going() {
                        break;
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(case) = cases.get(i) else { break };
                    // Cases still to come want the next spare as soon as this one takes the
                    // ready one, not once its child has ended (`Sandbox::expect`).
                    let _more = match &how {
                        How::Spare(sandbox, _) if i + 1 < cases.len() => Some(sandbox.expect()),
                        _ => None,
                    };
                    let r = run_case(i, case, &dir_abs, scratch, opts.timeout, &how);
                    finished(&r);
                    if let Ok(mut m) = results.lock() {
                        m.insert(i, r);
                    }
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_default();
    Ok(Report {
        dir: given.to_owned(),
        jobs,
        isolate: opts.isolate.name(),
        duration: start.elapsed(),
        cases: results.into_values().collect(),
    })
}

/// The one sandbox of a spare run: its deadline is the replay's per-case timeout when that is
/// shorter, so the child is killed there (and that case alone is an error).
fn start_sandbox(spare: &SpareOptions, timeout: Duration) -> Result<Sandbox, ReplayError> {
    let mut config = spare.sandbox.clone();
    config.timeout = config.timeout.min(timeout);
    Sandbox::new(config).map_err(ReplayError::Sandbox)
}

/// How the cases of one run are started.
pub(super) enum How<'a> {
    Process {
        exe: &'a Path,
        extract_args: &'a [String],
    },
    Spare(&'a Sandbox, &'a SpareOptions),
}

pub(super) fn run_case(
    i: usize,
    case: &Case,
    dir: &Path,
    scratch: &Path,
    timeout: Duration,
    how: &How<'_>,
) -> CaseResult {
    let start = Instant::now();
    let mut result = CaseResult {
        name: case.name.clone(),
        file: case.file.to_string_lossy().into_owned(),
        status: Status::Error,
        expected: case.expect.clone(),
        got: None,
        problems: Vec::new(),
        duration: Duration::ZERO,
    };
    match execute(i, case, dir, scratch, timeout, how, &mut result.problems) {
        Some(got) => {
            let mut status = match &case.expect {
                None => Status::Unexpected,
                Some(e) if matches(e, &got) => Status::Pass,
                Some(_) => Status::Fail,
            };
            if status == Status::Pass && !result.problems.is_empty() {
                status = Status::Fail;
            }
            result.status = status;
            result.got = Some(got);
        }
        None => {
            result.status = if case.expect.is_none() {
                Status::Unexpected
            } else {
                Status::Error
            }
        }
    }
    result.duration = start.elapsed();
    result
}

pub(super) fn matches(expect: &Expect, got: &Got) -> bool {
    expect.verdict == got.verdict
        && (expect.reason.is_none() && got.verdict == Verdict::Rejected
            || expect.reason == got.reason)
}

/// Run one case; `None` when it produced no usable answer (the problems say why).
pub(super) fn execute(
    i: usize,
    case: &Case,
    dir: &Path,
    scratch: &Path,
    timeout: Duration,
    how: &How<'_>,
    problems: &mut Vec<String>,
) -> Option<Got> {
    let artifact = dir.join(&case.file);
    match fs::metadata(&artifact) {
        Ok(m) if m.is_file() => {}
        Ok(_) => {
            problems.push(format!("{} is not a regular file", case.file.display()));
            return None;
        }
        Err(e) => {
            problems.push(format!("cannot read {}: {e}", case.file.display()));
            return None;
        }
    }
    // A fresh, empty parent per case (the `extract` process's cwd and TMPDIR, so stray writes
    // show up), holding the staging directory.
    let parent = scratch.join("cases").join(i.to_string());
    if let Err(e) = fs::create_dir(&parent) {
        problems.push(format!("cannot create the case directory: {e}"));
        return None;
    }
    let answer = match how {
        How::Process { exe, extract_args } => run_process(
            i,
            case,
            &artifact,
            &parent,
            &scratch.join("io"),
            exe,
            extract_args,
            timeout,
            problems,
        ),
        How::Spare(sandbox, spare) => {
            run_spare(case, &artifact, &parent, sandbox, spare, timeout, problems)
        }
    };
    check_containment(&parent, answer.as_ref().map(|(o, _)| o), problems);
    if let Ok(dir) = File::open(&parent) {
        let _ = crate::extract::writer::clear_beneath(dir.as_fd(), 0);
    }
    let _ = fs::remove_dir(&parent);
    let (o, v) = answer?;
    // A reason is printed to terminals and logs: hostile names must arrive escaped.
    if let Some(r) = &o.reason
        && r.entry
            .iter()
            .chain(std::iter::once(&r.detail))
            .any(|t| t.chars().any(char::is_control))
    {
        problems.push("the reason carries a raw control character (unescaped hostile name)".into());
    }
    // Finding kinds are read from the JSON: the report's shape belongs to the review.
    let findings: BTreeSet<String> = v["review"]["findings"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["kind"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if let Some(want) = &case.findings
        && o.verdict == Verdict::Accepted
        && *want != findings
    {
        let show = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(", ");
        problems.push(format!(
            "review findings [{}], expected [{}]",
            show(&findings),
            show(want)
        ));
    }
    Some(Got {
        verdict: o.verdict,
        reason: o.reason.as_ref().map(|r| r.code),
        detail: o.reason.as_ref().map(|r| r.detail.clone()),
        entry: o.reason.as_ref().and_then(|r| r.entry.clone()),
        findings,
    })
}

/// The case as its own `skillbox extract --json --out PARENT/staging` process.
#[allow(clippy::too_many_arguments)]
fn run_process(
    i: usize,
    case: &Case,
    artifact: &Path,
    parent: &Path,
    io_dir: &Path,
    exe: &Path,
    extract_args: &[String],
    timeout: Duration,
    problems: &mut Vec<String>,
) -> Option<(Outcome, Value)> {
    let staging = parent.join("staging");
    let mut cmd = Command::new(exe);
    cmd.arg("extract")
        .arg(artifact)
        .arg("--json")
        .arg("--out")
        .arg(&staging);
    if let Some(kind) = case.kind {
        cmd.arg("--type").arg(kind.as_str());
    }
    if let Some(mt) = &case.media_type {
        cmd.arg("--media-type").arg(mt);
    }
    if let Some(d) = &case.digest {
        cmd.arg("--digest").arg(d);
    }
    if let Some(limits) = &case.limits {
        let path = io_dir.join(format!("{i}.limits.json"));
        if let Err(e) = fs::write(&path, limits.to_string()) {
            problems.push(format!("cannot write the limits file: {e}"));
            return None;
        }
        cmd.arg("--limits").arg(path);
    }
    cmd.args(extract_args);
    let out_path = io_dir.join(format!("{i}.out"));
    let err_path = io_dir.join(format!("{i}.err"));
    let (Ok(out), Ok(err)) = (File::create(&out_path), File::create(&err_path)) else {
        problems.push("cannot create the output files".into());
        return None;
    };
    cmd.current_dir(parent)
        .env("TMPDIR", parent)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    let status = wait(cmd, timeout, problems);
    status.and_then(|status| read_answer(status, &out_path, &err_path, problems))
}

/// The case in a confined child taken from `sandbox`'s spares, staged into `PARENT/staging`
/// exactly as `skillbox extract --out PARENT/staging` stages: the directory is created fresh,
/// the sandbox re-checks an acceptance against the tree, and anything else leaves nothing.
fn run_spare(
    case: &Case,
    artifact: &Path,
    parent: &Path,
    sandbox: &Sandbox,
    spare: &SpareOptions,
    timeout: Duration,
    problems: &mut Vec<String>,
) -> Option<(Outcome, Value)> {
    let req = match request(case, artifact, &spare.overrides) {
        Ok(r) => r,
        Err(e) => {
            problems.push(e);
            return None;
        }
    };
    // Checked again on the open file: the path may have been swapped since.
    let file = match File::open(artifact) {
        Ok(f) if f.metadata().is_ok_and(|m| m.is_file()) => f,
        Ok(_) => {
            problems.push(format!("{} is not a regular file", case.file.display()));
            return None;
        }
        Err(e) => {
            problems.push(format!("cannot open {}: {e}", case.file.display()));
            return None;
        }
    };
    let staging = parent.join("staging");
    if let Err(e) = fs::create_dir(&staging) {
        problems.push(format!("cannot create the staging directory: {e}"));
        return None;
    }
    let confined = File::open(&staging)
        .map_err(|e| format!("cannot open the staging directory: {e}"))
        .and_then(|dir| {
            sandbox
                .extract_at(&file, dir.as_fd(), &req)
                .map_err(|e| format!("the confined child could not run the case: {e}"))
        });
    let discard = || {
        // Beneath the fd, never following a symlink: the tree may hold hostile links.
        if let Ok(dir) = File::open(&staging) {
            let _ = crate::extract::writer::clear_beneath(dir.as_fd(), 0);
        }
        let _ = fs::remove_dir(&staging);
    };
    let confined = match confined {
        Ok(c) => c,
        Err(e) => {
            discard();
            problems.push(e);
            return None;
        }
    };
    // The sandbox's deadline is the replay's timeout when that is the shorter: then a timeout
    // is this case's error, as it is when the timeout kills an `extract` process.
    let killed_by_us = timeout < spare.sandbox.timeout
        && confined
            .outcome
            .reason
            .as_ref()
            .is_some_and(|r| r.code == ReasonCode::Timeout);
    if confined.outcome.verdict == Verdict::Rejected || killed_by_us {
        discard();
    }
    if killed_by_us {
        problems.push(timed_out(timeout));
        return None;
    }
    // Findings are read from the answer's JSON, as from an `extract` process's (only the
    // review: encoding a 10,000-entry inventory to read none of it costs a case milliseconds).
    let value = match serde_json::to_value(&confined.outcome.review) {
        Ok(review) => json!({ "review": review }),
        Err(e) => {
            problems.push(format!("cannot encode the answer: {e}"));
            return None;
        }
    };
    Some((confined.outcome, value))
}

/// The request `skillbox extract` would build for this case: the case's limits as its limits
/// file, the overrides as its limit flags, the file's name as the format hint, a `.skill` file
/// with its wrapper accepted, and the type from the extension when the manifest gives none.
pub(super) fn request(
    case: &Case,
    artifact: &Path,
    overrides: &LimitOverrides,
) -> Result<Request, String> {
    let expected_digest = match &case.digest {
        Some(d) => Some(
            d.parse::<Sha256Digest>()
                .map_err(|e| format!("--digest: {e}"))?,
        ),
        None => None,
    };
    let base = match &case.limits {
        Some(v) => {
            let file: LimitOverrides =
                serde_json::from_value(v.clone()).map_err(|e| format!("limits: {e}"))?;
            let limits = file.apply(&Limits::default());
            limits.validate().map_err(|e| format!("limits: {e}"))?;
            limits
        }
        None => Limits::default(),
    };
    let limits = overrides.apply(&base);
    limits.validate().map_err(|e| format!("limits: {e}"))?;
    let given = case.kind.map(|k| match k {
        CaseType::SkillMd => ArtifactType::SkillMd,
        CaseType::Archive => ArtifactType::Archive,
    });
    Ok(Request {
        media_type: case.media_type.clone(),
        expected_digest,
        ..Request::for_local_file(artifact, given, limits)
    })
}

/// A case past the replay's timeout.
fn timed_out(timeout: Duration) -> String {
    if timeout.subsec_nanos() == 0 {
        format!("timed out after {}s and was killed", timeout.as_secs())
    } else {
        format!(
            "timed out after {:.3}s and was killed",
            timeout.as_secs_f64()
        )
    }
}

/// Spawn and wait, killing the child past the timeout.
pub(super) fn wait(
    mut cmd: Command,
    timeout: Duration,
    problems: &mut Vec<String>,
) -> Option<ExitStatus> {
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            problems.push(format!("cannot run skillbox extract: {e}"));
            return None;
        }
    };
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                problems.push(timed_out(timeout));
                return None;
            }
            Ok(None) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => {
                problems.push(format!("cannot wait for skillbox extract: {e}"));
                let _ = child.kill();
                return None;
            }
        }
    }
}

pub(super) fn tail(path: &Path) -> String {
    let text = fs::read(path).unwrap_or_default();
    let start = text.len().saturating_sub(2000);
    display_name(String::from_utf8_lossy(&text[start..]).trim().as_bytes())
}

/// Decode the child's JSON answer and hold it against its exit status.
pub(super) fn read_answer(
    status: ExitStatus,
    out: &Path,
    err: &Path,
    problems: &mut Vec<String>,
) -> Option<(Outcome, Value)> {
    let mut text = Vec::new();
    let read = File::open(out).and_then(|f| f.take(MAX_ANSWER_BYTES + 1).read_to_end(&mut text));
    let code = status.code();
    let answer: Option<(Outcome, Value)> = match read {
        Ok(_) if text.len() as u64 > MAX_ANSWER_BYTES => {
            problems.push(format!("answer larger than {MAX_ANSWER_BYTES} bytes"));
            None
        }
        Ok(_) => serde_json::from_slice::<Value>(&text).ok().and_then(|v| {
            serde_json::from_value::<Outcome>(v.clone())
                .ok()
                .map(|o| (o, v))
        }),
        Err(e) => {
            problems.push(format!("cannot read the answer: {e}"));
            None
        }
    };
    let expected_code = answer.as_ref().map(|(o, _)| match o.verdict {
        Verdict::Accepted => 0,
        Verdict::Rejected => 3,
    });
    match (code, expected_code) {
        (Some(c), Some(e)) if c == e => answer,
        (Some(c), Some(_)) => {
            problems.push(format!(
                "exit status {c} does not match the verdict in the answer"
            ));
            answer
        }
        (code, None) => {
            let how = match code {
                Some(c) => format!("exited with status {c}"),
                None => format!("was killed ({status})"),
            };
            problems.push(format!(
                "skillbox extract {how} without a verdict: {}",
                tail(err)
            ));
            None
        }
        (None, Some(_)) => {
            problems.push(format!("skillbox extract was killed ({status})"));
            None
        }
    }
}

/// Nothing outside the staging directory, nothing at all after a rejection, and an accepted
/// staging tree that is exactly its inventory.
pub(super) fn check_containment(
    parent: &Path,
    answer: Option<&Outcome>,
    problems: &mut Vec<String>,
) {
    let names: Vec<String> = match fs::read_dir(parent) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) => {
            problems.push(format!("cannot list the case directory: {e}"));
            return;
        }
    };
    let accepted = answer.is_some_and(|o| o.verdict == Verdict::Accepted);
    let mut stray: Vec<String> = names
        .iter()
        .filter(|n| !(accepted && n.as_str() == "staging"))
        .cloned()
        .collect();
    stray.sort();
    if !stray.is_empty() {
        let what = if accepted {
            "outside the staging directory"
        } else {
            "after a rejection"
        };
        problems.push(format!(
            "left on disk {what}: {}",
            display_name(stray.join(", ").as_bytes())
        ));
    }
    if let Some(o) = answer.filter(|o| o.verdict == Verdict::Accepted) {
        let staging = parent.join("staging");
        if !staging.is_dir() {
            problems.push("accepted, but the staging directory is missing".into());
        } else if let Err(mut diffs) = verify_tree(&staging, &o.entries) {
            diffs.truncate(10);
            problems.extend(diffs.into_iter().map(|d| format!("staged tree: {d}")));
        }
    }
}
