//! A real `skillbox serve` per test, and the artifacts the tests send it.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use skillbox::client::Client;
use skillbox::proto as pb;

pub fn ok<T, E: std::fmt::Display>(r: Result<T, E>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_skillbox")
}

pub const SKILL: &[u8] =
    b"---\nname: demo\ndescription: A demo skill for the broker tests\n---\nUse it.\n";

/// A tar with exactly these entries (names written raw, so hostile ones stay hostile).
pub fn raw_tar(entries: &[(&str, &[u8], u32)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data, mode) in entries {
        let mut h = tar::Header::new_gnu();
        let raw = name.as_bytes();
        h.as_old_mut().name[..raw.len()].copy_from_slice(raw);
        h.set_size(data.len() as u64);
        h.set_mode(*mode);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mtime(0);
        h.set_cksum();
        ok(b.append(&h, *data), "tar append");
    }
    ok(b.into_inner(), "tar finish")
}

/// A valid skill package of SKILL.md and `files` empty files under paths of 978 bytes (three
/// shared directories of 250-byte names, then a file name of 225), within the default limits
/// (paths of at most 1024 bytes, components of 255, 10,000 entries). Each file is about 1 KB of
/// the encoded answer, so 4,400 of them make an `ExtractResponse` of about 4.7 MB, past the
/// 4 MiB a stock gRPC client receives, from a 9 MB tar written in a few milliseconds.
pub fn long_paths_tar(files: usize) -> Vec<u8> {
    let dirs = ["a", "b", "c"].map(|c| c.repeat(250)).join("/");
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(SKILL.len() as u64);
    h.set_mode(0o644);
    h.set_mtime(0);
    ok(b.append_data(&mut h, "SKILL.md", SKILL), "tar append");
    let tail = "x".repeat(220);
    for i in 0..files {
        let mut h = tar::Header::new_gnu();
        h.set_size(0);
        h.set_mode(0o644);
        h.set_mtime(0);
        // Past 100 bytes: the writer adds a GNU long-name entry before the header.
        let path = format!("{dirs}/{i:05}{tail}");
        ok(b.append_data(&mut h, path, std::io::empty()), "tar append");
    }
    ok(b.into_inner(), "tar finish")
}

/// A valid skill package: SKILL.md plus `extra`.
pub fn skill_tar(extra: &[(&str, &[u8], u32)]) -> Vec<u8> {
    let mut all = vec![("SKILL.md", SKILL, 0o644)];
    all.extend_from_slice(extra);
    raw_tar(&all)
}

/// A tar.gz with SKILL.md and one file of `n` zero bytes (compresses about 1000:1).
pub fn zeros_tar_gz(n: u64) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    let mut h = tar::Header::new_gnu();
    h.set_size(SKILL.len() as u64);
    h.set_mode(0o644);
    h.set_mtime(0);
    ok(b.append_data(&mut h, "SKILL.md", SKILL), "tar");
    let mut h = tar::Header::new_gnu();
    h.set_size(n);
    h.set_mode(0o644);
    h.set_mtime(0);
    ok(
        b.append_data(&mut h, "zeros.bin", std::io::repeat(0).take(n)),
        "tar",
    );
    ok(ok(b.into_inner(), "tar").finish(), "gzip")
}

/// An `AsyncRead` that yields `data` in `chunk`-byte pieces, one every `every`.
pub fn slow_stream(
    data: Vec<u8>,
    chunk: usize,
    every: Duration,
) -> impl tokio::io::AsyncRead + Send + Unpin + 'static {
    let (mut w, r) = tokio::io::duplex(chunk.max(1) * 2);
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt as _;
        for piece in data.chunks(chunk.max(1)) {
            if w.write_all(piece).await.is_err() {
                return;
            }
            tokio::time::sleep(every).await;
        }
    });
    r
}

pub fn write_temp(name: &str, bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = ok(tempfile::tempdir(), "tempdir");
    let path = dir.path().join(name);
    ok(std::fs::write(&path, bytes), "write");
    (dir, path)
}

/// A temporary directory every uid can traverse and read (for clients run as nobody).
pub fn world_readable_dir() -> tempfile::TempDir {
    let dir = ok(tempfile::tempdir(), "tempdir");
    ok(
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)),
        "chmod",
    );
    dir
}

/// What to pass as `--metrics` (or `--tcp`): port 0, the kernel picks a free one when the
/// broker binds, and [`Server::metrics_addr`] (or [`Server::tcp_port`]) reads it from the log.
/// A port picked here and bound by the broker later could be taken in between by any other
/// test's listener (the suite runs in parallel), and the readiness check would then take that
/// listener for the broker: a test that hung 19 minutes on a server that never answered.
pub const ANY_PORT: &str = "127.0.0.1:0";
/// The broker's log lines naming what it bound (src/broker/mod.rs).
const TCP_LINE: &str = "listening addr=";
const METRICS_LINE: &str = "metrics on /metrics addr=";

pub fn http_get(addr: &str, path: &str) -> String {
    let mut s = ok(std::net::TcpStream::connect(addr), "connect");
    ok(write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n"), "write");
    let mut out = String::new();
    ok(s.read_to_string(&mut out), "read");
    out
}

/// Run the CLI, optionally as another uid/gid.
pub fn cli(args: &[&str], as_ids: Option<(u32, u32)>) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args).env_remove("XDG_RUNTIME_DIR");
    if let Some((uid, gid)) = as_ids {
        cmd.uid(uid).gid(gid);
    }
    ok(cmd.output(), "run skillbox")
}

/// A running `skillbox serve`, killed when dropped.
pub struct Server {
    child: Option<Child>,
    dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    socket: PathBuf,
    log: PathBuf,
}

impl Server {
    pub fn start(args: &[&str]) -> Self {
        Self::start_env(args, &[])
    }

    /// [`Server::start`] with these environment variables set for the server.
    pub fn start_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        let tmp = ok(tempfile::tempdir(), "tempdir");
        let dir = tmp.path().to_owned();
        let mut s = Self::spawn_inner(&dir, args, false, env);
        s._tmp = Some(tmp);
        s
    }

    /// In a directory the caller owns (e.g. one other uids can traverse).
    pub fn start_in(dir: &tempfile::TempDir, args: &[&str]) -> Self {
        let sub = dir.path().join(format!(
            "srv-{}",
            std::process::id() ^ (Instant::now().elapsed().subsec_nanos())
        ));
        let _ = std::fs::create_dir(&sub);
        ok(
            std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o755)),
            "chmod",
        );
        Self::spawn(&sub, args)
    }

    /// On TCP at `127.0.0.1` on a port the kernel picks ([`Server::tcp_port`]; the flags in
    /// `args` say how: TLS files and so on).
    pub fn start_tcp(args: &[&str]) -> Self {
        let tmp = ok(tempfile::tempdir(), "tempdir");
        let mut all = vec!["--tcp", ANY_PORT];
        all.extend_from_slice(args);
        let mut s = Self::spawn_inner(tmp.path(), &all, true, &[]);
        s._tmp = Some(tmp);
        s
    }

    fn spawn(dir: &Path, args: &[&str]) -> Self {
        Self::spawn_inner(dir, args, false, &[])
    }

    fn spawn_inner(dir: &Path, args: &[&str], tcp: bool, env: &[(&str, &str)]) -> Self {
        let socket = dir.join("skillbox.sock");
        let log = dir.join("server.log");
        let staging = dir.join("staging");
        let child = Command::new(bin())
            .arg("serve")
            .arg("--socket")
            .arg(&socket)
            .arg("--staging-root")
            .arg(&staging)
            .args(["--log", "skillbox=debug,info"])
            .args(args)
            .env_remove("XDG_RUNTIME_DIR")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(ok(std::fs::File::create(&log), "log file"))
            .spawn();
        let child = ok(child, "spawn skillbox serve");
        let mut s = Self {
            child: Some(child),
            dir: dir.to_owned(),
            _tmp: None,
            socket,
            log,
        };
        s.wait_ready(tcp);
        s
    }

    /// Until the broker listens: on its own socket, or on TCP once its log names the port it
    /// bound (so that nothing else listening on some port is ever taken for it).
    fn wait_ready(&mut self, tcp: bool) {
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            let up = if tcp {
                self.logged_addr(TCP_LINE).is_some()
            } else {
                std::os::unix::net::UnixStream::connect(&self.socket).is_ok()
            };
            if up {
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "skillbox serve exited with {status} before listening:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("skillbox serve did not listen within 20 s:\n{}", self.log());
    }

    /// The address after `line` in the log (`line` ends with `addr=`), the last time it was
    /// logged.
    fn logged_addr(&self, line: &str) -> Option<String> {
        let log = self.log();
        let at = log.rfind(line)? + line.len();
        let addr = log[at..].split_whitespace().next()?;
        Some(addr.to_owned())
    }

    /// The TCP port of a server started with [`Server::start_tcp`], as the broker logged it.
    pub fn tcp_port(&self) -> u16 {
        let addr = self
            .logged_addr(TCP_LINE)
            .unwrap_or_else(|| panic!("no TCP address in the log:\n{}", self.log()));
        let port = addr.rsplit(':').next().and_then(|p| p.parse().ok());
        port.unwrap_or_else(|| panic!("no port in {addr:?}"))
    }

    /// Where a server started with `--metrics` [`ANY_PORT`] serves its metrics, as it logged
    /// it (the line comes before the listening one, so it is there once the server is ready).
    pub fn metrics_addr(&self) -> String {
        self.logged_addr(METRICS_LINE)
            .unwrap_or_else(|| panic!("no metrics address in the log:\n{}", self.log()))
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn uri(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    pub fn staging_root(&self) -> PathBuf {
        self.dir.join("staging")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The server's peak resident memory so far (`VmHWM`), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = ok(
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())),
            "/proc/PID/status",
        );
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|kb| kb.trim().parse::<u64>().ok())
            .map_or_else(|| panic!("no VmHWM in {status}"), |kb| kb * 1024)
    }

    pub async fn client(&self) -> Client {
        ok(Client::connect(&self.uri()).await, "connect")
    }

    pub async fn channel(&self) -> tonic::transport::Channel {
        ok(
            ok(skillbox::client::endpoint(&self.uri()), "endpoint")
                .connect()
                .await,
            "connect",
        )
    }

    pub async fn raw_client(
        &self,
    ) -> pb::skillbox_client::SkillboxClient<tonic::transport::Channel> {
        pb::skillbox_client::SkillboxClient::new(self.channel().await)
    }

    /// The per-request directories under the staging root.
    pub fn staging_dirs(&self) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(self.staging_root()) else {
            return Vec::new();
        };
        rd.filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| skillbox::broker::is_staging_id(n))
            .collect()
    }

    /// Every process whose parent is the server: its confined children (forked by the zygote
    /// with CLONE_PARENT, or exec'd) and the zygote itself.
    fn all_children(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.pid())) else {
            return out;
        };
        for t in tasks.filter_map(Result::ok) {
            if let Ok(list) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(
                    list.split_whitespace()
                        .filter_map(|p| p.parse::<u32>().ok()),
                );
            }
        }
        out
    }

    /// The zygote and its idle spares name themselves; a spare renames itself `skillbox-child`
    /// when it is given a request.
    fn comm_is(pid: u32, name: &str) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == name)
    }

    /// The server's confined children (per request; the long-lived zygote and the one spare
    /// waiting for the next request are not).
    pub fn children(&self) -> Vec<u32> {
        self.all_children()
            .into_iter()
            .filter(|&p| {
                // A pid whose name cannot be read any more was reaped after the list was read.
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| !matches!(c.trim_end(), "skillbox-zygote" | "skillbox-spare"))
            })
            .collect()
    }

    /// The spares that were given a request and run it now (a spare renames itself
    /// `skillbox-child` on its order): strictly the children of requests, never a process whose
    /// name could not be read or a spare just forked.
    pub fn request_children(&self) -> Vec<u32> {
        self.all_children()
            .into_iter()
            .filter(|&p| Self::comm_is(p, "skillbox-child"))
            .collect()
    }

    /// The server's zygotes: one while it runs with the default settings. A spare forked a moment
    /// ago is counted too until it renames itself (its first step): see [`Self::wait_zygotes`].
    pub fn zygotes(&self) -> Vec<u32> {
        self.all_children()
            .into_iter()
            .filter(|&p| Self::comm_is(p, "skillbox-zygote"))
            .collect()
    }

    /// The zygotes once there are `want` of them or `within` has passed (a replacement names
    /// itself a moment after it starts, and the zygote it replaces is reaped a moment after
    /// it retires).
    pub fn wait_zygotes(&self, want: usize, within: Duration) -> Vec<u32> {
        let until = Instant::now() + within;
        loop {
            let now = self.zygotes();
            if now.len() == want || Instant::now() >= until {
                return now;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The spares forked ahead of the next request: at most one per zygote.
    pub fn spares(&self) -> Vec<u32> {
        self.all_children()
            .into_iter()
            .filter(|&p| Self::comm_is(p, "skillbox-spare"))
            .collect()
    }

    /// How many spares there are once `want` exist or `within` has passed (the next spare is
    /// forked while a request runs, so it may still be on its way). Never more than one.
    pub fn wait_spares(&self, want: usize, within: Duration) -> usize {
        let until = Instant::now() + within;
        loop {
            let n = self.spares().len();
            assert!(n <= 1, "more than one spare: {:?}", self.spares());
            if n >= want || Instant::now() >= until {
                return n;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// No staging directory and no child left.
    pub fn assert_clean(&self) {
        self.wait_clean(Duration::from_secs(3));
    }

    pub fn wait_clean(&self, within: Duration) {
        let until = Instant::now() + within;
        loop {
            let (dirs, kids) = (self.staging_dirs(), self.children());
            if dirs.is_empty() && kids.is_empty() {
                return;
            }
            if Instant::now() >= until {
                panic!(
                    "left behind: staging {dirs:?}, children {kids:?}\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Kill the server without a goodbye and start a new one on the same socket and root.
    pub fn restart(&mut self, args: &[&str]) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let fresh = Self::spawn(&self.dir, args);
        let mut fresh = std::mem::ManuallyDrop::new(fresh);
        self.child = fresh.child.take();
    }

    pub fn sigterm(&self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.pid()).unwrap_or(0));
        ok(
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM),
            "SIGTERM",
        );
    }

    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let mut child = self
            .child
            .take()
            .unwrap_or_else(|| panic!("already reaped"));
        let until = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status;
            }
            if Instant::now() >= until {
                let _ = child.kill();
                panic!(
                    "skillbox serve did not exit within {within:?}:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One corpus case, ready to send.
#[derive(Clone, Debug)]
pub struct CorpusCase {
    pub name: String,
    pub path: PathBuf,
    pub kind: String,
    pub media_type: Option<String>,
    pub limits: Option<skillbox::extract::policy::Limits>,
    pub digest: Option<String>,
    pub verdict: String,
    pub reason: Option<String>,
}

impl CorpusCase {
    pub fn header(&self) -> pb::ExtractHeader {
        let declared_type = if self.kind == "skill-md" {
            pb::ArtifactType::SkillMd
        } else {
            pb::ArtifactType::Archive
        };
        pb::ExtractHeader {
            declared_type: declared_type as i32,
            media_type: self.media_type.clone(),
            file_name: self
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned()),
            expected_digest: self.digest.clone(),
            // Every limit, explicitly: the replay server is started with the loosest policy
            // any case needs (see `CORPUS_SERVER_LIMITS`), and each case tightens from there.
            limits: Some(skillbox::convert::limits_to_proto(
                &self.limits.clone().unwrap_or_default(),
            )),
            ..Default::default()
        }
    }
}

/// The server policy for a corpus replay: the defaults, loosened where a case's own limits
/// loosen them (copying internal hard links, no SKILL.md required).
pub const CORPUS_SERVER_LIMITS: &[u8] =
    b"hardlinks = \"copy_internal\"\nrequire_skill_md = false\n";

/// The cases of corpus/manifest.json, or None when there is no corpus.
pub fn corpus_cases() -> Option<Vec<CorpusCase>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let text = std::fs::read_to_string(root.join("manifest.json")).ok()?;
    let v: serde_json::Value = ok(serde_json::from_str(&text), "manifest.json");
    let cases = v["cases"]
        .as_array()
        .unwrap_or_else(|| panic!("manifest.json has no cases"));
    let s = |x: &serde_json::Value| x.as_str().map(str::to_owned);
    Some(
        cases
            .iter()
            .map(|c| CorpusCase {
                name: s(&c["name"]).unwrap_or_default(),
                path: root.join(s(&c["file"]).unwrap_or_default()),
                kind: s(&c["type"]).unwrap_or_else(|| "archive".into()),
                media_type: s(&c["media_type"]),
                limits: (!c["limits"].is_null())
                    .then(|| ok(serde_json::from_value(c["limits"].clone()), "case limits")),
                digest: s(&c["digest"]),
                verdict: s(&c["expect"]["verdict"]).unwrap_or_default(),
                reason: s(&c["expect"]["reason"]),
            })
            .collect(),
    )
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, made with `openssl`.
pub struct Pki {
    pub dir: tempfile::TempDir,
}

impl Pki {
    pub fn new() -> Self {
        let dir = ok(tempfile::tempdir(), "tempdir");
        let run = |args: &[&str]| {
            let out = ok(
                Command::new("openssl")
                    .args(args)
                    .current_dir(dir.path())
                    .output(),
                "openssl (needed to make test certificates)",
            );
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ext = dir.path().join("san.ext");
        ok(
            std::fs::write(&ext, "subjectAltName=IP:127.0.0.1,DNS:localhost\n"),
            "ext",
        );
        run(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=skillbox test CA",
        ]);
        for who in ["server", "client"] {
            run(&[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &format!("{who}.key"),
                "-out",
                &format!("{who}.csr"),
                "-subj",
                &format!("/CN={who}"),
            ]);
            run(&[
                "x509",
                "-req",
                "-in",
                &format!("{who}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &format!("{who}.pem"),
                "-days",
                "2",
                "-extfile",
                "san.ext",
            ]);
        }
        Self { dir }
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        ok(std::fs::read(self.dir.path().join(name)), name)
    }
}

/// Whether a process named `comm` that was started by `server_pid` (its parent when the server
/// started it, or `sandbox-zygote <server_pid>` on its command line) is still running, that is,
/// neither gone nor a zombie.
pub fn live_named(comm: &str, server_pid: u32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.filter_map(Result::ok).any(|e| {
        let p = e.path();
        let named = std::fs::read_to_string(p.join("comm")).is_ok_and(|c| c.trim_end() == comm);
        let ours = std::fs::read(p.join("cmdline")).is_ok_and(|c| {
            c.split(|&b| b == 0)
                .any(|a| a == server_pid.to_string().as_bytes())
        });
        let stat = std::fs::read_to_string(p.join("stat")).unwrap_or_default();
        let alive = stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'));
        named && ours && alive
    })
}
