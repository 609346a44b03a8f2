//! What a file's name says about it: the interpreter its extension calls for, and how the
//! review reads it (a script, Markdown, a licence, data). Its own module, depending on nothing,
//! because the engine asks it too: the engine keeps the bytes of the files the review will read
//! whole for what they run ([`read_for_runs`]), and the review may not be a dependency of the
//! engine (the engine's answer is what the review reads).

/// The hasher of the maps and sets keyed by a package's names (the engine's collision keys and
/// staged tree, the captured texts, the review's): foldhash, keyed once per process with
/// randomness from the operating system, drawn through std's own `RandomState` (`getrandom`,
/// which the child's allow-list has for it). std's SipHash was 35.7 M instructions of the
/// child's request for 10,000 tiny files (bench-results/throughput.md). foldhash's own
/// `RandomState` seeds itself from addresses and the clock, which is no key: names come from
/// whoever made the archive, and only a key they cannot know keeps them from choosing names
/// that collide. Whatever the input, the child's deadline bounds what it costs. The parent's
/// re-check keeps SipHash: its keys come from the child's answer, and it has no deadline.
#[derive(Clone, Debug)]
pub(crate) struct NameHash(foldhash::fast::SeedableRandomState);

impl Default for NameHash {
    fn default() -> Self {
        static KEY: std::sync::OnceLock<(u64, foldhash::SharedSeed)> = std::sync::OnceLock::new();
        let (per_hasher, shared) = KEY.get_or_init(|| {
            use std::hash::BuildHasher as _;
            let random = std::collections::hash_map::RandomState::new();
            (
                random.hash_one(0u64),
                foldhash::SharedSeed::from_u64(random.hash_one(1u64)),
            )
        });
        Self(foldhash::fast::SeedableRandomState::with_seed(
            *per_hasher,
            shared,
        ))
    }
}

impl std::hash::BuildHasher for NameHash {
    type Hasher = foldhash::fast::FoldHasher<'static>;

    fn build_hasher(&self) -> Self::Hasher {
        self.0.build_hasher()
    }
}

/// A map keyed by names of a package ([`NameHash`]).
pub(crate) type NameMap<K, V> = std::collections::HashMap<K, V, NameHash>;
/// A set of names of a package ([`NameHash`]).
pub(crate) type NameSet<K> = std::collections::HashSet<K, NameHash>;

/// The last component of `path`.
pub(crate) fn file_name(path: &str) -> &str {
    memchr::memrchr(b'/', path.as_bytes()).map_or(path, |i| &path[i + 1..])
}

/// Whether `hay` holds `needle`, ASCII letters compared in either case (what `to_ascii_uppercase`
/// and `contains` gave, without the allocation: these are asked for every file of a package).
fn contains_ci(hay: &str, needle: &str) -> bool {
    let n = needle.as_bytes();
    hay.as_bytes()
        .windows(n.len())
        .any(|w| w.eq_ignore_ascii_case(n))
}

fn starts_ci(hay: &str, prefix: &str) -> bool {
    hay.as_bytes()
        .get(..prefix.len())
        .is_some_and(|h| h.eq_ignore_ascii_case(prefix.as_bytes()))
}

fn ends_ci(hay: &str, suffix: &str) -> bool {
    hay.len() >= suffix.len()
        && hay.as_bytes()[hay.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
}

/// A file name's extension with its ASCII letters lowered. Asked several times for every file
/// of a package, so held inline rather than allocated, unless longer than any named here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ext {
    Inline { len: u8, bytes: [u8; 23] },
    Long(String),
}

impl std::ops::Deref for Ext {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            // Copied from a `str` with only ASCII letters changed: still UTF-8, so the
            // fallback is never taken.
            Ext::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            Ext::Long(s) => s,
        }
    }
}

/// What follows the last `.` of the file name, lowered; `None` without one, or for a name
/// that only starts with one (`.bashrc`).
pub(crate) fn extension(path: &str) -> Option<Ext> {
    let name = file_name(path);
    let dot = memchr::memrchr(b'.', name.as_bytes()).filter(|&d| d > 0)?;
    let ext = &name[dot + 1..];
    Some(match u8::try_from(ext.len()) {
        Ok(len) if usize::from(len) <= 23 => {
            let mut bytes = [0u8; 23];
            bytes[..ext.len()].copy_from_slice(ext.as_bytes());
            bytes[..ext.len()].make_ascii_lowercase();
            Ext::Inline { len, bytes }
        }
        _ => Ext::Long(ext.to_ascii_lowercase()),
    })
}

pub(crate) fn interpreter_for_extension(ext: &str) -> Option<&'static str> {
    Some(match ext {
        "sh" => "sh",
        "bash" => "bash",
        "zsh" => "zsh",
        "fish" => "fish",
        "ksh" => "ksh",
        "py" | "pyw" => "python",
        "rb" => "ruby",
        "pl" | "pm" => "perl",
        "php" => "php",
        "js" | "mjs" | "cjs" | "jsx" => "node",
        "ts" | "mts" | "cts" | "tsx" => "typescript",
        // Source files their toolchains run directly (`go run x.go`, `java X.java`, `swift
        // x.swift`, `kotlin x.kts`, `dotnet script x.csx`): programs, like a `.py`.
        "go" => "go",
        "java" => "java",
        "swift" => "swift",
        "kts" => "kotlin",
        "groovy" => "groovy",
        "exs" => "elixir",
        "jl" => "julia",
        "dart" => "dart",
        "scala" | "sc" => "scala",
        "csx" => "dotnet-script",
        "fsx" => "dotnet-fsi",
        "nu" => "nu",
        "raku" => "raku",
        "lua" => "lua",
        "ps1" | "psm1" => "powershell",
        "bat" | "cmd" => "cmd",
        "vbs" => "vbscript",
        "applescript" => "osascript",
        "r" => "Rscript",
        "tcl" => "tclsh",
        "awk" => "awk",
        // Makefiles included by another (`include rules.mk`), and rake's task files.
        "mk" | "mak" => "make",
        "rake" => "rake",
        _ => return None,
    })
}

/// The task runner that reads its commands from a file of this name (any case), run by typing
/// the runner alone in the file's directory: `make`, `just setup`, `rake`, `task`, and `npm
/// install` (which runs `package.json`'s `preinstall`, `install` and `postinstall` scripts).
/// No path names the file, so no runner's argument makes it a script: its name must. Security:
/// read as data or prose, `curl ... | sh` in a recipe was no capability, and a package whose
/// SKILL.md says "run `make` first" grew nothing a reviewer was shown.
fn runner_for_file_name(path: &str) -> Option<&'static str> {
    const RUNNERS: [(&str, &str); 10] = [
        ("makefile", "make"),
        ("gnumakefile", "make"),
        ("justfile", "just"),
        (".justfile", "just"),
        ("rakefile", "rake"),
        ("rakefile.rb", "rake"),
        ("taskfile.yml", "task"),
        ("taskfile.yaml", "task"),
        ("taskfile.dist.yml", "task"),
        ("taskfile.dist.yaml", "task"),
    ];
    let name = file_name(path);
    if name.eq_ignore_ascii_case("package.json") {
        return Some("npm");
    }
    RUNNERS
        .iter()
        .find(|(file, _)| name.eq_ignore_ascii_case(file))
        .map(|&(_, runner)| runner)
}

/// The interpreter a file's name says runs it (`a.py` -> `python`, `Makefile` -> `make`), if
/// any.
pub fn interpreter_by_name(path: &str) -> Option<&'static str> {
    runner_for_file_name(path).or_else(|| {
        extension(path)
            .as_deref()
            .and_then(interpreter_for_extension)
    })
}

/// How a text file is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextKind {
    /// A script: every line is code.
    Script,
    /// Markdown or plain text: prose, with code blocks.
    Markdown,
    /// Licence text: only its fenced code blocks are scanned.
    Licence,
    /// Schemas, configuration, markup.
    Data,
}

pub(crate) fn text_kind(path: &str, script: bool) -> TextKind {
    if script {
        return TextKind::Script;
    }
    if is_licence_name(file_name(path)) {
        return TextKind::Licence;
    }
    match extension(path).as_deref() {
        None | Some("md" | "markdown" | "mdx" | "mdc" | "rst" | "txt" | "adoc") => {
            TextKind::Markdown
        }
        Some(_) => TextKind::Data,
    }
}

/// `LICENSE`, `COPYING.txt`, `NOTICE`, `font-license.txt`, `Lora-OFL.txt`.
pub(crate) fn is_licence_name(name: &str) -> bool {
    // UNLICENSE holds LICENSE.
    ["LICENSE", "LICENCE", "COPYING"]
        .iter()
        .any(|p| contains_ci(name, p))
        || starts_ci(name, "NOTICE")
        || ends_ci(name, "OFL.TXT")
}

/// Documentation files that carry no extension (`README`, `LICENSE`, ...).
pub(crate) fn is_doc_name(name: &str) -> bool {
    is_licence_name(name)
        || [
            "README",
            "CHANGELOG",
            "AUTHORS",
            "CONTRIBUTORS",
            "CODEOWNERS",
        ]
        .iter()
        .any(|p| starts_ci(name, p))
}

/// Whether a file at `path` is a script by its name alone: a script extension, or under
/// `scripts/` with none (see the review's `classify`).
pub(crate) fn script_by_name(path: &str) -> bool {
    if runner_for_file_name(path).is_some() {
        return true;
    }
    match extension(path) {
        Some(ext) => interpreter_for_extension(&ext).is_some(),
        None => path.starts_with("scripts/") && !is_doc_name(file_name(path)),
    }
}

/// Whether the review reads the file at `path` starting with `head` for what it runs, whatever
/// trigger lines it holds: a Markdown file (SKILL.md's kin: `.md`, `.txt`, no extension, a
/// licence), or a script by its name or shebang. The engine keeps such a file's bytes for the
/// review (the engine's `keeps_bytes`), so it is not read back.
pub(crate) fn read_for_runs(path: &str, head: &[u8]) -> bool {
    matches!(
        text_kind(path, false),
        TextKind::Markdown | TextKind::Licence
    ) || script_by_name(path)
        || head.starts_with(b"#!")
}

/// How a package manager reads a file for where it installs from ([`index_config`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IndexConfig {
    /// A configuration file whose keys name an index: `.npmrc`, `.yarnrc`, `.yarnrc.yml`,
    /// `pip.conf`, `pip.ini` (`registry=`, `index-url =`, ...).
    Keys,
    /// `pyproject.toml`: those keys, and `url` only where it names an index: in uv's
    /// `[[tool.uv.index]]`, Poetry's `[[tool.poetry.source]]`, PDM's `[[tool.pdm.source]]`
    /// (or written inline in the tables above them); `url` elsewhere (`[tool.x]`) is no index.
    Pyproject,
    /// `uv.toml`: those keys, and `url` only in an `[[index]]` table (or inline at its top).
    UvToml,
    /// A requirements file by its name (`requirements*.txt`, `constraints*.txt`, `*.in`), or
    /// one the package names as such: only requirement-file options count (`--index-url`,
    /// `-i`, `--extra-index-url`, `--find-links`, `-f`).
    Requirements,
    /// Any other `.txt`: a requirements file only if the package names it as one (`-r` / `-c`
    /// in another requirements file, `pip install -r FILE` in its commands).
    Text,
}

/// How a package manager reads the file at `path` for where it installs from, by its name;
/// `None`, no package manager reads it so.
pub(crate) fn index_config(path: &str) -> Option<IndexConfig> {
    let name = file_name(path);
    if is_licence_name(name) {
        return None;
    }
    // Compared without lowering a copy of every name: most are none of these.
    let is = |s: &str| name.eq_ignore_ascii_case(s);
    if [
        ".npmrc",
        "npmrc",
        ".yarnrc",
        ".yarnrc.yml",
        "pip.conf",
        "pip.ini",
    ]
    .iter()
    .any(|s| is(s))
    {
        Some(IndexConfig::Keys)
    } else if is("pyproject.toml") {
        Some(IndexConfig::Pyproject)
    } else if is("uv.toml") {
        Some(IndexConfig::UvToml)
    } else if requirements_name(name) {
        Some(IndexConfig::Requirements)
    } else if ends_ci(name, ".txt") {
        Some(IndexConfig::Text)
    } else {
        None
    }
}

/// Whether a file name (any case) is a requirements file's by itself: `requirements*.txt`,
/// `constraints*.txt` (`requirements-dev.txt`, `dev-requirements.txt`), or pip-tools' `*.in`.
pub(crate) fn requirements_name(name: &str) -> bool {
    (ends_ci(name, ".txt")
        && (contains_ci(name, "requirements") || contains_ci(name, "constraints")))
        || ends_ci(name, ".in")
}
