//! The review's trigger automaton: which lines of a file hold one of [`TRIGGERS`], the
//! substrings without which the line scanner reports nothing (see [`super::scan`]).
//!
//! An Aho-Corasick DFA built by `const` evaluation, so it sits in the binary's read-only data:
//! nothing to build or validate when a child starts (building it at run time cost more
//! instructions than scanning a typical package's text). Its shape is chosen for the scan:
//! built over byte classes (ASCII case folded, every byte no trigger holds in one class), it is
//! laid out with one edge for every byte value, so a step is one load at `state + byte` (states
//! are `u32` row offsets) with no class lookup between; every state that completes a trigger is
//! one sentinel, since the scan stops at the first trigger of a line and skips to the next line.
//! The sentinel is the table's last row, whose every edge leads back to it, so the scan tests
//! for it once every few bytes instead of after each.
//! A [`WORD_TRIGGERS`] word counts only where a token starts: after a newline, a delimiter or
//! a `/` (the text starts as if after a newline). No trigger holds a newline but as a word's
//! start, so the automaton is in its start state after every `\n`: a file
//! can be cut at line boundaries into segments scanned independently, and eight of them are
//! stepped in lock-step, which hides the latency of each table load behind the others'.
//! The answer, the start of every line holding a trigger, is exact: a test holds it to a naive
//! substring search over generated and real text.
use crate::extract::hashing::Scanned;

/// Substrings (ASCII case-insensitive) without which [`super::scan::Scanner::line`] reports
/// nothing (with the [`WORD_TRIGGERS`]).
pub(crate) const TRIGGERS: &[&str] = &[
    // URLs, scp-style and bare hosts.
    "://",
    "@",
    ".com",
    ".net",
    ".org",
    ".io",
    ".dev",
    ".ai",
    ".co",
    ".gov",
    ".edu",
    ".xyz",
    ".biz",
    ".us",
    ".uk",
    ".de",
    ".fr",
    ".cn",
    ".ru",
    ".jp",
    // Network commands and fetchers.
    "curl",
    "wget",
    "iwr",
    "invoke-",
    "aria2c",
    "ssh",
    "scp",
    "ftp",
    "rsync",
    "telnet",
    "nslookup",
    "urlopen",
    "urlretrieve",
    "requests.",
    "httpx.",
    "axios.",
    // Installers.
    "install",
    "clone",
    "submodule",
    "npm",
    "npx",
    "pnpx",
    "yarn",
    "bunx",
    "uvx",
    "pipx",
    "uv add",
    "uv tool",
    "go get",
    "go run",
    "poetry add",
    "pdm add",
    "composer",
    "deno",
    "helm",
    "save-module",
    "docker run",
    "docker pull",
    "podman run",
    "podman pull",
    "pacman",
    "apk",
    "yum",
    "dnf",
    "bun",
    // Uploads and shell strings (`files=`, `shell=True`, `os.system`, `execSync`).
    "files",
    "data",
    "content",
    "upload_",
    "put_object",
    "publish",
    "twine",
    "gem push",
    "docker push",
    "podman push",
    "gh release",
    "shell",
    "os.system",
    "os.popen",
    "getoutput",
    "exec",
    // Decoders, whose output a shell or interpreter may run (`base64 -d | sh`,
    // `exec(b64decode(..))`, `pwsh -EncodedCommand`).
    "base64",
    "base32",
    "basenc",
    "b64decode",
    "b32decode",
    "b85decode",
    "a85decode",
    "decodebytes",
    "unhexlify",
    "fromhex",
    "atob",
    "xxd",
    "openssl",
    "uudecode",
    "powershell",
    "pwsh",
    // Native code.
    "gcc",
    "g++",
    "clang",
    "nvcc",
    "tcc",
    "rustc",
    "zig cc",
    "cc -",
    "c++ -",
    "build_ext",
    "node-gyp",
    "cmake",
    "ld_preload",
    "dyld_insert",
    // Risky commands.
    "sudo",
    "doas",
    "chmod",
    // Credentials.
    ".ssh",
    ".aws",
    ".netrc",
    ".git-credentials",
    ".gnupg",
    ".npmrc",
    ".pypirc",
    ".kube",
    ".docker",
    ".azure",
    ".env",
    "id_rsa",
    "id_ed25519",
    "id_ecdsa",
    "id_dsa",
    ".config/",
    "/shadow",
    "dotenv",
    "_token",
    "_secret",
    "_key",
    "_passw",
    "_credentials",
    "_apikey",
    // Markdown links (checked in SKILL.md).
    "](",
    "]:",
];

/// Command words (ASCII case-insensitive) that count only where a token of the line scanner
/// starts, or after a `/` (a path's last component): the line scanner compares them with a
/// whole token's last path component (`rm`, `/bin/rm`, `nc`, `ping`, `dig`, `irm`, `apt`,
/// `apt-get`) and never looks for them inside a word. As plain substrings they are in most
/// lines of prose (`form`, `once`, `shipping`, `digit`, `confirm`, `adapt`), each then read by
/// the line scanner for nothing.
pub(crate) const WORD_TRIGGERS: &[&str] = &["rm", "nc", "ping", "dig", "irm", "apt"];

/// What may precede a token's first byte: the line scanner's delimiters, the newline, and `/`
/// (a test in `scan` holds this to the scanner's delimiter table).
pub(crate) const WORD_START: &[u8] = b" \t\r\n\"'`(){}[]<>;|&,=/";

/// One past the largest byte value: the class table's size.
const BYTES: usize = 256;

/// ASCII case folding, the same for the triggers and the text.
const fn fold(b: u8) -> u8 {
    b.to_ascii_lowercase()
}

/// Byte classes: 0 for every byte no trigger holds, 1.. for the others (upper-case letters
/// share their lower-case letter's class), and the number of classes.
const ALPHABET: ([u8; BYTES], usize) = {
    let mut class = [0u8; BYTES];
    let mut n = 1usize;
    let mut i = 0;
    while i < TRIGGERS.len() + WORD_TRIGGERS.len() {
        let p = if i < TRIGGERS.len() {
            TRIGGERS[i].as_bytes()
        } else {
            WORD_TRIGGERS[i - TRIGGERS.len()].as_bytes()
        };
        let mut j = 0;
        while j < p.len() {
            let b = fold(p[j]) as usize;
            if class[b] == 0 {
                class[b] = n as u8;
                n += 1;
            }
            j += 1;
        }
        i += 1;
    }
    let mut b = b'A';
    while b <= b'Z' {
        class[b as usize] = class[fold(b) as usize];
        b += 1;
    }
    // The word-start bytes no trigger holds share one class (the newline among them).
    let mut j = 0;
    while j < WORD_START.len() {
        if class[WORD_START[j] as usize] == 0 {
            class[WORD_START[j] as usize] = n as u8;
        }
        j += 1;
    }
    (class, n + 1)
};
/// The class of the word-start bytes that no trigger holds, the newline among them.
const WORD_CLASS: usize = ALPHABET.1 - 1;
const CLASSES: usize = ALPHABET.1;

/// The word triggers' first classes: each word-start byte's class (those no trigger holds are
/// one class, and bytes of one class are one edge).
const STARTS: ([u8; WORD_START.len()], usize) = {
    let mut out = [0u8; WORD_START.len()];
    let mut n = 0;
    let mut j = 0;
    while j < WORD_START.len() {
        let c = ALPHABET.0[WORD_START[j] as usize];
        let mut k = 0;
        while k < n && out[k] != c {
            k += 1;
        }
        if k == n {
            out[n] = c;
            n += 1;
        }
        j += 1;
    }
    (out, n)
};

/// The patterns as class sequences: every trigger, and every word trigger after each start.
const PATTERNS: usize = TRIGGERS.len() + WORD_TRIGGERS.len() * STARTS.1;

/// Pattern `i`'s class at `j` (`None` past its end).
const fn pattern_class(i: usize, j: usize) -> Option<u8> {
    if i < TRIGGERS.len() {
        let p = TRIGGERS[i].as_bytes();
        return if j < p.len() {
            Some(ALPHABET.0[p[j] as usize])
        } else {
            None
        };
    }
    let k = i - TRIGGERS.len();
    let (w, start) = (
        WORD_TRIGGERS[k / STARTS.1].as_bytes(),
        STARTS.0[k % STARTS.1],
    );
    if j == 0 {
        Some(start)
    } else if j <= w.len() {
        Some(ALPHABET.0[w[j - 1] as usize])
    } else {
        None
    }
}

/// At most one trie node per pattern class, plus the root.
const NODES: usize = {
    let mut n = 1;
    let mut i = 0;
    while i < PATTERNS {
        let mut j = 0;
        while pattern_class(i, j).is_some() {
            j += 1;
        }
        n += j;
        i += 1;
    }
    n
};

/// The transition table's size: a power of two, so an index masked to it needs no bounds check.
/// 1 MiB of read-only data, of which a scan touches the few rows ordinary text keeps visiting.
/// Rows of one edge per byte value, not per class (a 128 KiB table of `u16` behind a class
/// table), save the class lookup each step: with the bytes copied out per block (`lockstep`),
/// the trigger pass over 30 MB of the benchmark's text went from 16.7 to 13.2 ms, while either
/// change alone gained little (bench-results/throughput.md).
const TABLE: usize = 1 << 18;
const MASK: usize = TABLE - 1;
/// A row: one edge for every byte value.
const ROW: usize = BYTES;

/// The state every completed trigger leads to: the table's last row, every edge of which leads
/// back to it, so a scan can step on past a match and look for it once a block (no row of the
/// automaton proper reaches that far).
const MATCH: State = (TABLE - ROW) as State;

type State = u32;

/// The automaton: `next[state + byte]`, states being row offsets (the root at 0).
struct Dfa {
    next: [State; TABLE],
    /// The state after a newline, where every line (and the text) starts.
    start: State,
}

/// Aho-Corasick over the folded triggers: a trie, failure links in breadth-first order, every
/// missing edge filled from the failure state's row, then the rows renumbered with the
/// completing states merged into [`MATCH`].
const fn build() -> Dfa {
    let class = ALPHABET.0;
    // The trie, then the full automaton, over node numbers (0 is the root, never a child).
    let mut trie = [0u16; NODES * CLASSES];
    let mut ends = [false; NODES];
    let mut nodes = 1usize;
    let mut i = 0;
    while i < PATTERNS {
        let mut s = 0usize;
        let mut j = 0;
        while let Some(c) = pattern_class(i, j) {
            let c = c as usize;
            if trie[s * CLASSES + c] == 0 {
                trie[s * CLASSES + c] = nodes as u16;
                nodes += 1;
            }
            s = trie[s * CLASSES + c] as usize;
            j += 1;
        }
        ends[s] = true;
        i += 1;
    }
    let mut fail = [0u16; NODES];
    let mut matching = [false; NODES];
    let mut order = [0u16; NODES];
    let (mut head, mut tail) = (0usize, 1usize);
    while head < tail {
        let s = order[head] as usize;
        head += 1;
        let mut c = 0;
        while c < CLASSES {
            let t = trie[s * CLASSES + c] as usize;
            // From the root, a byte no trigger starts with stays at the root.
            let via_fail = if s == 0 {
                0
            } else {
                trie[fail[s] as usize * CLASSES + c]
            };
            if t != 0 {
                fail[t] = via_fail;
                matching[t] = ends[t] || matching[via_fail as usize];
                order[tail] = t as u16;
                tail += 1;
            } else {
                trie[s * CLASSES + c] = via_fail;
            }
            c += 1;
        }
    }
    // Rows for the states that complete nothing, in breadth-first order (the root first, the
    // shallow states that ordinary text keeps visiting next to it).
    let mut row = [MATCH; NODES];
    let mut rows = 0usize;
    let mut k = 0;
    while k < nodes {
        let s = order[k] as usize;
        if !matching[s] {
            row[s] = (rows * ROW) as State;
            rows += 1;
        }
        k += 1;
    }
    assert!(
        rows * ROW <= MATCH as usize,
        "the trigger automaton outgrew its table"
    );
    let mut next = [MATCH; TABLE];
    let mut s = 0;
    while s < nodes {
        if !matching[s] {
            let r = row[s] as usize;
            let mut b = 0;
            while b < BYTES {
                next[r + b] = row[trie[s * CLASSES + class[b] as usize] as usize];
                b += 1;
            }
        }
        s += 1;
    }
    // Text starts as if after a newline (a token may start there).
    let start = row[trie[WORD_CLASS] as usize];
    assert!(start != MATCH, "a word-start byte alone is no trigger");
    Dfa { next, start }
}

static DFA: Dfa = build();

#[inline(always)]
fn step(s: State, b: u8) -> State {
    DFA.next[(s as usize + b as usize) & MASK]
}

/// Text scanned per refill of [`Lines`] (cut at the next line end), so that the line starts it
/// holds stay bounded however long the file is.
const CHUNK: usize = 16 * 1024;

/// The trigger automaton (built at compile time).
pub struct Triggers(());

impl Triggers {
    /// The shared instance (the automaton is built when the binary is compiled).
    pub fn get() -> &'static Triggers {
        static T: Triggers = Triggers(());
        &T
    }

    /// The start of every line of `hay` that holds a trigger, in order.
    pub fn lines<'h>(&self, hay: &'h [u8]) -> Lines<'h> {
        Lines::new(hay, CHUNK)
    }

    /// [`Triggers::lines`] of `hay` from `from` on (a line start): the lines before it are
    /// taken as scanned.
    pub fn lines_from<'h>(&self, hay: &'h [u8], from: usize) -> Lines<'h> {
        let mut lines = Lines::new(hay, CHUNK);
        lines.scanned = from.min(hay.len());
        lines
    }

    /// The start of the first line at or after `from` (a line start) that holds a trigger.
    pub fn next_line(&self, hay: &[u8], from: usize) -> Option<usize> {
        let mut out = Vec::new();
        let mut at = from;
        while at < hay.len() {
            let end = chunk_end(hay, at, CHUNK);
            single(hay, at, at, end, DFA.start, &mut out);
            if let Some(&first) = out.first() {
                return Some(first);
            }
            at = end;
        }
        None
    }
}

/// Where the chunk starting at `at` ends: `chunk` bytes on, then to the end of that line.
fn chunk_end(hay: &[u8], at: usize, chunk: usize) -> usize {
    if hay.len() - at <= chunk {
        return hay.len();
    }
    let cut = at + chunk;
    memchr::memchr(b'\n', &hay[cut..]).map_or(hay.len(), |i| cut + i + 1)
}

/// The start of every line of `hay` holding a trigger, found a chunk at a time.
pub struct Lines<'h> {
    hay: &'h [u8],
    chunk: usize,
    scanned: usize,
    found: Vec<usize>,
    taken: usize,
}

impl<'h> Lines<'h> {
    fn new(hay: &'h [u8], chunk: usize) -> Self {
        Lines {
            hay,
            chunk: chunk.max(1),
            scanned: 0,
            found: Vec::new(),
            taken: 0,
        }
    }

    fn refill(&mut self) {
        let (hay, from) = (self.hay, self.scanned);
        let end = chunk_end(hay, from, self.chunk);
        self.found.clear();
        self.taken = 0;
        aligned(hay, from, end, &mut self.found);
        self.scanned = end;
    }
}

/// The trigger lines of `hay[from..end]`, `from` a line start and `end` the end of `hay` or just
/// after a newline, appended to `out` in order: one at most per line, so at most as many as the
/// newlines in the range, plus one.
fn aligned(hay: &[u8], from: usize, end: usize, out: &mut Vec<usize>) {
    let first = out.len();
    // LANES segments cut after a newline (the automaton is at its start there).
    let mut cut = [end; LANES + 1];
    cut[0] = from;
    for k in 1..LANES {
        let aim = (from + (end - from) * k / LANES).max(cut[k - 1]);
        cut[k] = memchr::memchr(b'\n', &hay[aim..end]).map_or(end, |i| aim + i + 1);
    }
    lockstep(hay, cut, out);
    // The segments report in the order their matches came; each line once.
    out[first..].sort_unstable();
}

/// The review takes a file with a NUL byte in its first `BINARY_HEAD` bytes for binary, and never
/// scans its lines (the window of the engine's kept heads, too).
pub const BINARY_HEAD: usize = crate::extract::captured::NUL_WINDOW;

/// Trigger lines a [`Prescan`] lists; the rest of the file is scanned by the review.
const LISTED: usize = crate::extract::hashing::MARKS;
/// Text a [`Prescan`] scans at once between two line ends, like [`Lines`]' refills.
const PRESCAN_PIECE: usize = 16 * 1024;

/// The trigger pass run on the hashing thread while it hashes a file (see
/// [`crate::extract::hashing::FileScan`]): the same answer as [`Triggers::lines`] over the file's
/// first bytes, found a piece at a time as they arrive, with the lines it holds the automaton's
/// state across pieces. It marks the first [`LISTED`] trigger lines and where the list stops
/// being complete ([`prescanned`] reads them back); it stops at a NUL byte in the first
/// [`BINARY_HEAD`] bytes, listing nothing (the review does not scan binary files). Allocates only
/// in [`Prescan::new`].
pub struct Prescan {
    /// Bytes fed so far in this file.
    pos: usize,
    /// The automaton's state at `pos`, unless `skipping`.
    s: State,
    /// Where the line holding `pos` starts.
    line: usize,
    /// The line holding `pos` is listed already: skip to its end.
    skipping: bool,
    listed: [u32; LISTED],
    n: usize,
    /// The list is full: the first line not listed (nothing more is scanned).
    full_at: Option<usize>,
    /// The aligned scan's output, with room for every line of one piece (so never grown).
    found: Vec<usize>,
    /// Whether the bytes fed may hold code a Markdown reader reads ([`may_hold_code`]).
    code: CodeSigns,
    /// Bytes fed in this file, also once scanning stopped.
    fed: usize,
    /// A NUL byte is in the file's first [`BINARY_HEAD`] bytes (noted: [`NUL_IN_HEAD`]).
    nul: bool,
}

impl Default for Prescan {
    fn default() -> Self {
        Self::new()
    }
}

impl Prescan {
    pub fn new() -> Self {
        Prescan {
            pos: 0,
            s: DFA.start,
            line: 0,
            skipping: false,
            listed: [0; LISTED],
            n: 0,
            full_at: None,
            // A piece is PRESCAN_PIECE bytes and then the rest of one line: at most
            // PRESCAN_PIECE + 1 newlines, so at most PRESCAN_PIECE + 2 lines.
            found: Vec::with_capacity(PRESCAN_PIECE + 2),
            code: CodeSigns::new(),
            fed: 0,
            nul: false,
        }
    }

    /// List the line starting at `line`; `false` once the list is full (scanning stops).
    fn list(&mut self, line: usize) -> bool {
        match u32::try_from(line) {
            Ok(l) if self.n < LISTED => {
                self.listed[self.n] = l;
                self.n += 1;
                true
            }
            _ => {
                self.full_at = Some(line);
                false
            }
        }
    }

    /// Go on with the line holding `pos` through `bytes` (which hold no newline, or end with
    /// the first one), from the carried state.
    fn carry(&mut self, bytes: &[u8]) -> bool {
        if self.skipping {
            return true;
        }
        let mut s = self.s;
        let hit = bytes.iter().any(|&b| {
            s = step(s, b);
            s == MATCH
        });
        self.s = s;
        if hit {
            self.skipping = true;
            return self.list(self.line);
        }
        true
    }

    fn feed_piece(&mut self, bytes: &[u8]) {
        let base = self.pos;
        self.pos += bytes.len();
        let Some(first) = memchr::memchr(b'\n', bytes) else {
            self.carry(bytes);
            return;
        };
        if !self.carry(&bytes[..=first]) {
            return;
        }
        // Whole lines from here to the last newline, scanned as `Lines` scans them.
        let last = memchr::memrchr(b'\n', bytes).unwrap_or(first);
        let (mut at, end) = (first + 1, last + 1);
        while at < end {
            let to = chunk_end(&bytes[..end], at, PRESCAN_PIECE);
            self.found.clear();
            aligned(bytes, at, to, &mut self.found);
            debug_assert!(self.found.capacity() == PRESCAN_PIECE + 2);
            for k in 0..self.found.len() {
                if !self.list(base + self.found[k]) {
                    return;
                }
            }
            at = to;
        }
        // The last line, not ended yet.
        self.line = base + end;
        self.s = DFA.start;
        self.skipping = false;
        self.carry(&bytes[end..]);
    }
}

impl crate::extract::hashing::FileScan for Prescan {
    fn begin(&mut self) {
        self.pos = 0;
        self.s = DFA.start;
        self.line = 0;
        self.skipping = false;
        self.n = 0;
        self.full_at = None;
        self.code.begin();
        self.fed = 0;
        self.nul = false;
    }

    fn feed(&mut self, bytes: &[u8]) {
        // Every byte fed, also of a file the trigger pass stops in (binary, or its list full).
        self.code.feed(bytes);
        // The head's NUL, looked for in every byte of it fed (also past a full list), is the
        // review's `is_binary` of the same bytes: noted, it spares the review that search.
        if self.fed < BINARY_HEAD && !self.nul {
            let look = &bytes[..bytes.len().min(BINARY_HEAD - self.fed)];
            self.nul = memchr::memchr(0, look).is_some();
        }
        self.fed = self.fed.saturating_add(bytes.len());
        if self.full_at.is_some() {
            return;
        }
        // A binary file is never scanned by the review: stop, listing nothing.
        if self.nul {
            self.n = 0;
            self.full_at = Some(0);
            return;
        }
        self.feed_piece(bytes);
    }

    fn finish(&self) -> (&[u32], u32) {
        let complete = self.full_at.unwrap_or(self.pos);
        // A file's first bytes are at most FILE_BYTES, far under u32::MAX.
        (&self.listed[..self.n], u32::try_from(complete).unwrap_or(0))
    }

    fn note(&self) -> u32 {
        let code = if self.code.found { 0 } else { NO_CODE };
        let nul = if self.nul { NUL_IN_HEAD } else { 0 };
        code | nul
    }
}

/// In a [`Prescan`]'s note ([`Scanned::note`]): the bytes it covered hold nothing
/// [`may_hold_code`] looks for. A note without it says nothing (a file to read).
pub(crate) const NO_CODE: u32 = 1;

/// In a [`Prescan`]'s note: a NUL byte is in the file's first [`BINARY_HEAD`] bytes (of those
/// it covered), where the review's binary test looks. Without it, there is none.
pub(crate) const NUL_IN_HEAD: u32 = 2;

/// Whether the hashing thread's scan found a NUL byte in the first [`BINARY_HEAD`] bytes it
/// covered: the review's binary test (`is_binary` in `review.rs`) of those bytes.
pub fn nul_in_head(scanned: &Scanned) -> bool {
    scanned.note & NUL_IN_HEAD != 0
}

/// Whether the hashing thread's scan of a file's first `covered` bytes noted that they hold
/// nothing [`may_hold_code`] looks for: read as Markdown, they run nothing.
pub fn holds_no_code(scanned: &Scanned) -> bool {
    scanned.note & NO_CODE != 0
}

/// Whether `text` (a file's first bytes) may hold anything the review's search for what a
/// Markdown file runs reads (`RunFinder::markdown` in `review.rs`): code blocks and inline code
/// spans. That search reads only lines in a code block (a fence of three backticks or tildes,
/// at any depth; a line indented four spaces or a tab; an HTML `<pre>`) and, outside them, lines
/// holding a backtick; a text with none of a backtick, `~~~`, a line starting with four spaces
/// or a tab and `<pre` (any case) has none of those. Nor does the search read it as anything
/// else: it reads a file as a script only by its name, by its shebang (`#!`, first bytes) or
/// once something runs it; and it decodes a file as UTF-16 only by a byte-order mark (first
/// byte 0xFE or 0xFF). So `false` here means the search finds nothing in it (a unit test in
/// `review.rs` holds the two to that); `true` is only a maybe.
pub fn may_hold_code(text: &[u8]) -> bool {
    text.starts_with(b"#!")
        || matches!(text.first(), Some(0xfe | 0xff))
        || text.contains(&b'`')
        || text.windows(3).any(|w| w == b"~~~")
        || text.windows(4).any(|w| w.eq_ignore_ascii_case(b"<pre"))
        || text
            .split(|&b| b == b'\n')
            .any(|l| l.starts_with(b"    ") || l.starts_with(b"\t"))
}

/// [`may_hold_code`] over a file fed a piece at a time, on the hashing thread: no allocation
/// once made. Every sign is at most five bytes (`\n` and four spaces): one that crosses from a
/// piece into the next starts in the last four bytes before it and ends in its first four, so
/// those eight bytes are looked at together (and the file starts as if after a line break).
struct CodeSigns {
    found: bool,
    /// Bytes fed, up to the two the start of a file is looked at for.
    fed: usize,
    first: [u8; 2],
    /// The last `tail_len` bytes fed (a line break before the first).
    tail: [u8; 4],
    tail_len: usize,
    indent_spaces: memchr::memmem::Finder<'static>,
    indent_tab: memchr::memmem::Finder<'static>,
}

impl CodeSigns {
    fn new() -> Self {
        let mut c = Self {
            found: false,
            fed: 0,
            first: [0; 2],
            tail: [0; 4],
            tail_len: 0,
            indent_spaces: memchr::memmem::Finder::new(b"\n    "),
            indent_tab: memchr::memmem::Finder::new(b"\n\t"),
        };
        c.begin();
        c
    }

    fn begin(&mut self) {
        self.found = false;
        self.fed = 0;
        self.first = [0; 2];
        self.tail[0] = b'\n';
        self.tail_len = 1;
    }

    fn feed(&mut self, bytes: &[u8]) {
        if self.found || bytes.is_empty() {
            return;
        }
        for &b in bytes.iter().take(2 - self.fed.min(2)) {
            self.first[self.fed] = b;
            self.fed += 1;
        }
        let start = &self.first[..self.fed];
        if start == b"#!" || matches!(start.first(), Some(0xfe | 0xff)) {
            self.found = true;
            return;
        }
        let mut seam = [0u8; 8];
        let k = bytes.len().min(4);
        seam[..self.tail_len].copy_from_slice(&self.tail[..self.tail_len]);
        seam[self.tail_len..self.tail_len + k].copy_from_slice(&bytes[..k]);
        let seam = &seam[..self.tail_len + k];
        if self.signs_in(seam) || self.signs_in(bytes) {
            self.found = true;
            return;
        }
        let last = if bytes.len() >= 4 {
            &bytes[bytes.len() - 4..]
        } else {
            &seam[seam.len().saturating_sub(4)..]
        };
        self.tail[..last.len()].copy_from_slice(last);
        self.tail_len = last.len();
    }

    fn signs_in(&self, b: &[u8]) -> bool {
        memchr::memchr3_iter(b'`', b'~', b'<', b).any(|i| match b[i] {
            b'`' => true,
            b'~' => b[i..].starts_with(b"~~~"),
            _ => b
                .get(i + 1..i + 4)
                .is_some_and(|t| t.eq_ignore_ascii_case(b"pre")),
        }) || self.indent_spaces.find(b).is_some()
            || self.indent_tab.find(b).is_some()
    }
}

/// Whether the hashing thread's scan of a file's first `covered` bytes found no line of them
/// holding a trigger.
pub fn lists_none(scanned: &Scanned) -> bool {
    scanned.complete == scanned.covered && scanned.marks.is_empty()
}

/// The trigger lines of `content` (the `covered` first bytes of a file, exactly) from the
/// hashing thread's scan of it: those it lists, then the rest found by [`Triggers::lines_from`]
/// where its list stopped. `None` when the scan does not read back as one of `content` (then
/// scan it whole).
pub fn prescanned<'h>(
    scanned: &'h Scanned,
    content: &'h [u8],
) -> Option<impl Iterator<Item = usize> + 'h> {
    let complete = usize::try_from(scanned.complete).ok()?;
    let marks = &scanned.marks;
    if scanned.covered != content.len() as u64
        || complete > content.len()
        || marks.last().is_some_and(|&l| l as usize >= complete)
        || marks.windows(2).any(|w| w[0] >= w[1])
    {
        return None;
    }
    let rest = (complete < content.len()).then(|| Triggers::get().lines_from(content, complete));
    Some(
        marks
            .iter()
            .map(|&l| l as usize)
            .chain(rest.into_iter().flatten()),
    )
}

impl Iterator for Lines<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        loop {
            if let Some(&l) = self.found.get(self.taken) {
                self.taken += 1;
                return Some(l);
            }
            if self.scanned >= self.hay.len() {
                return None;
            }
            self.refill();
        }
    }
}

/// A trigger ended at `at`, in the line that starts after the last newline since `from` (a
/// line start): record that line, and return where the next one starts (or `end`).
fn record(hay: &[u8], from: usize, at: usize, end: usize, out: &mut Vec<usize>) -> usize {
    out.push(memchr::memrchr(b'\n', &hay[from..at]).map_or(from, |i| from + i + 1));
    memchr::memchr(b'\n', &hay[at..end]).map_or(end, |i| at + i + 1)
}

/// Scan `hay[at..end]` one byte at a time from state `s`; `line` is a line start at or
/// before `at` with no trigger line recorded since.
fn single(
    hay: &[u8],
    mut line: usize,
    mut at: usize,
    end: usize,
    mut s: State,
    out: &mut Vec<usize>,
) {
    while at < end {
        let hit = hay[at..end].iter().position(|&b| {
            s = step(s, b);
            s == MATCH
        });
        match hit {
            Some(i) => {
                at = record(hay, line, at + i, end, out);
                line = at;
                s = DFA.start;
            }
            None => return,
        }
    }
}

/// Segments scanned in lock-step: the automaton's step is a load that depends on the last one,
/// so independent segments keep the core busy while each waits.
const LANES: usize = 8;

/// Bytes a segment is stepped through between two looks for a match.
const BLOCK: usize = 16;

/// Scan the segments `cut[k]..cut[k + 1]` in lock-step while all have bytes left, then what is
/// left of each alone.
fn lockstep(hay: &[u8], cut: [usize; LANES + 1], out: &mut Vec<usize>) {
    let mut at: [usize; LANES] = std::array::from_fn(|k| cut[k]);
    let end: [usize; LANES] = std::array::from_fn(|k| cut[k + 1]);
    let mut line = at;
    let mut s = [DFA.start; LANES];
    let mut buf = [[0u8; BLOCK]; LANES];
    loop {
        let n = (0..LANES).map(|k| end[k] - at[k]).min().unwrap_or(0);
        if n == 0 {
            break;
        }
        let seg: [&[u8]; LANES] = std::array::from_fn(|k| &hay[at[k]..at[k] + n]);
        // A block at a time with no test a step (`MATCH` leads only to itself); a block where
        // some segment matched is stepped again from its start, a byte at a time, to find where.
        // Each block's bytes are copied out side by side first: read at fixed offsets from one
        // pointer, the eight states stay in registers (reading from eight segment pointers
        // spilled them to the stack every step).
        let mut i = 0;
        while i + BLOCK <= n {
            let before = s;
            for k in 0..LANES {
                buf[k].copy_from_slice(&seg[k][i..i + BLOCK]);
            }
            for j in 0..BLOCK {
                for (state, bytes) in s.iter_mut().zip(&buf) {
                    *state = step(*state, bytes[j]);
                }
            }
            if s.contains(&MATCH) {
                s = before;
                break;
            }
            i += BLOCK;
        }
        let mut done = n;
        while i < n {
            let mut hit = false;
            for k in 0..LANES {
                s[k] = step(s[k], seg[k][i]);
                hit |= s[k] == MATCH;
            }
            if hit {
                done = i;
                break;
            }
            i += 1;
        }
        if done == n {
            for p in &mut at {
                *p += n;
            }
            continue;
        }
        for k in 0..LANES {
            if s[k] == MATCH {
                at[k] = record(hay, line[k], at[k] + done, end[k], out);
                line[k] = at[k];
                s[k] = DFA.start;
            } else {
                at[k] += done + 1;
            }
        }
    }
    for k in 0..LANES {
        single(hay, line[k], at[k], end[k], s[k], out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer by the plainest means: every line, folded, searched for every trigger.
    fn naive(hay: &[u8]) -> Vec<usize> {
        let mut out = Vec::new();
        let mut start = 0;
        for line in hay.split(|&b| b == b'\n') {
            let folded: Vec<u8> = line.iter().map(|b| b.to_ascii_lowercase()).collect();
            let word_at = |w: &str| {
                memchr::memmem::find_iter(&folded, w.as_bytes())
                    .any(|p| p == 0 || WORD_START.contains(&folded[p - 1]))
            };
            if TRIGGERS
                .iter()
                .any(|t| memchr::memmem::find(&folded, t.as_bytes()).is_some())
                || WORD_TRIGGERS.iter().any(|w| word_at(w))
            {
                out.push(start);
            }
            start += line.len() + 1;
        }
        out
    }

    fn check(hay: &[u8]) {
        let want = naive(hay);
        for chunk in [1, 2, 7, 64, 1000, CHUNK] {
            let got: Vec<usize> = Lines::new(hay, chunk).collect();
            assert_eq!(
                got,
                want,
                "chunk {chunk}: {:?}",
                String::from_utf8_lossy(hay)
            );
        }
        let t = Triggers::get();
        assert_eq!(t.lines(hay).collect::<Vec<_>>(), want);
        // From every line start, the next trigger line.
        let mut start = 0;
        for line in hay.split(|&b| b == b'\n') {
            let next = want.iter().copied().find(|&l| l >= start);
            assert_eq!(t.next_line(hay, start), next, "from {start}");
            start += line.len() + 1;
        }
    }

    /// `hay` through a [`Prescan`] in pieces of the sizes `cuts` cycles through: its marks are
    /// the trigger lines below where it says they are complete, and [`prescanned`] gives back
    /// every trigger line; nothing it holds grew.
    fn check_prescan(hay: &[u8], cuts: &[usize]) {
        use crate::extract::hashing::FileScan;
        let want: Vec<usize> = Triggers::get().lines(hay).collect();
        let mut p = Prescan::new();
        let cap = p.found.capacity();
        // A previous file's state must not leak into the next.
        p.feed(b"curl x\n@ trailing, no newline");
        p.begin();
        let (mut at, mut k) = (0, 0);
        while at < hay.len() {
            let n = cuts[k % cuts.len()].clamp(1, hay.len() - at);
            p.feed(&hay[at..at + n]);
            at += n;
            k += 1;
        }
        let (marks, complete) = p.finish();
        let complete = complete as usize;
        let below: Vec<usize> = want.iter().copied().filter(|&l| l < complete).collect();
        assert_eq!(
            marks.iter().map(|&m| m as usize).collect::<Vec<_>>(),
            below,
            "{cuts:?}"
        );
        let binary = hay[..hay.len().min(BINARY_HEAD)].contains(&0);
        assert!(
            complete == hay.len() || marks.len() == LISTED || (binary && complete == 0),
            "{complete} of {}",
            hay.len()
        );
        assert_eq!(p.found.capacity(), cap, "the scan's buffer grew");
        let scanned = Scanned {
            covered: hay.len() as u64,
            complete: complete as u64,
            marks: marks.to_vec(),
            note: p.note(),
        };
        assert_eq!(holds_no_code(&scanned), !may_hold_code(hay), "{cuts:?}");
        // The review takes the noted NUL for its own binary test of the same bytes.
        assert_eq!(nul_in_head(&scanned), binary, "{cuts:?}");
        let got: Vec<usize> = prescanned(&scanned, hay)
            .map(Iterator::collect)
            .unwrap_or_default();
        assert_eq!(got, want, "{cuts:?}");
        assert_eq!(lists_none(&scanned), want.is_empty());
    }

    #[test]
    fn the_hashing_threads_pass_in_pieces_finds_the_same_lines() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let words: &[&[u8]] = &[
            b"plain", b"words", b" ", b"\n", b"curl", b"@", b".com", b"rm", b"x\n", b"\n\n",
            b"ins", b"tall",
        ];
        for round in 0..300 {
            let mut hay = Vec::new();
            let pieces = 1 + rng.below(if round % 10 == 0 { 20_000 } else { 300 });
            for _ in 0..pieces {
                hay.extend_from_slice(words[rng.below(words.len())]);
            }
            let cuts = [1 + rng.below(7), 1 + rng.below(5000), 1 + rng.below(70_000)];
            check_prescan(&hay, &cuts);
            check_prescan(&hay, &[hay.len()]);
        }
        // Dense: a trigger line per two bytes, far more than it lists; a piece of nothing but
        // newlines; one long line holding a trigger at its very end.
        check_prescan(&b"@\n".repeat(40_000), &[256 * 1024]);
        check_prescan(&b"\n".repeat(100_000), &[1024 * 1024, 3]);
        let mut long = vec![b'a'; 300_000];
        long.extend_from_slice(b" curl");
        check_prescan(&long, &[4096]);
        check_prescan(b"", &[1]);
        // Binary: a NUL early on stops the scan (the review never scans such a file); one past
        // the review's window does not.
        let mut bin = b"curl https://x.example.com\n".repeat(400);
        bin[BINARY_HEAD - 1] = 0;
        check_prescan(&bin, &[1000]);
        bin[BINARY_HEAD - 1] = b'x';
        bin[BINARY_HEAD] = 0;
        check_prescan(&bin, &[1000]);
        // A NUL in the window after the list is full: the scan stops listing, yet notes it.
        let mut dense = b"@\n".repeat(BINARY_HEAD);
        const { assert!(2 * LISTED < BINARY_HEAD - 1) };
        dense[BINARY_HEAD - 1] = 0;
        check_prescan(&dense, &[7, 4096]);
        check_prescan(&dense, &[BINARY_HEAD]);
    }

    /// The hashing thread's note, fed in pieces of any size, is [`may_hold_code`] of the whole:
    /// signs cut between pieces, at the file's start, after a previous file.
    #[test]
    fn the_code_note_in_pieces_is_that_of_the_whole() {
        use crate::extract::hashing::FileScan;
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let words: &[&[u8]] = &[
            b"plain", b" ", b"  ", b"\n", b"\r\n", b"\t", b"~", b"`", b"<", b"p", b"R", b"e", b"#",
            b"!", b"\xfe", b"\xff", b"\0", b"x",
        ];
        let mut p = Prescan::new();
        let (mut maybe, mut none) = (0, 0);
        for round in 0..20_000 {
            let mut hay = Vec::new();
            for _ in 0..1 + rng.below(if round % 100 == 0 { 3000 } else { 14 }) {
                hay.extend_from_slice(words[rng.below(words.len())]);
            }
            // The previous file's signs must not carry over.
            p.begin();
            p.feed(&hay);
            p.begin();
            let mut at = 0;
            while at < hay.len() {
                let most = if rng.below(2) == 0 { 5 } else { 40 };
                let n = (1 + rng.below(most)).min(hay.len() - at);
                p.feed(&hay[at..at + n]);
                at += n;
            }
            let want = may_hold_code(&hay);
            assert_eq!(
                p.note() & NO_CODE == 0,
                want,
                "{:?}",
                String::from_utf8_lossy(&hay)
            );
            assert_eq!(
                p.note() & NUL_IN_HEAD != 0,
                hay[..hay.len().min(BINARY_HEAD)].contains(&0),
                "{:?}",
                String::from_utf8_lossy(&hay)
            );
            if want { maybe += 1 } else { none += 1 }
        }
        assert!(maybe > 1000 && none > 1000, "{maybe} may, {none} hold none");
    }

    #[test]
    fn a_scan_that_reads_back_wrong_is_not_used() {
        let hay = b"one\ncurl two\nthree\n";
        let bad = [
            // Covers other bytes than these.
            Scanned {
                covered: 3,
                complete: 3,
                marks: vec![],
                note: 0,
            },
            // Complete past the end.
            Scanned {
                covered: hay.len() as u64,
                complete: 99,
                marks: vec![],
                note: 0,
            },
            // A mark at or past where it says it is complete, or out of order.
            Scanned {
                covered: hay.len() as u64,
                complete: 4,
                marks: vec![4],
                note: 0,
            },
            Scanned {
                covered: hay.len() as u64,
                complete: 14,
                marks: vec![4, 4],
                note: 0,
            },
        ];
        for s in &bad {
            assert!(prescanned(s, hay).is_none(), "{s:?}");
        }
    }

    /// xorshift64: reproducible text without a dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// The table's layout: every edge leads to the start of a row (a multiple of [`ROW`]) of the
    /// automaton or to [`MATCH`], whose every edge leads back to it; an upper-case letter leads
    /// where its lower-case letter does, and every byte no trigger holds where the others do.
    #[test]
    fn every_row_has_an_edge_per_byte_into_a_row() {
        let rows = DFA
            .next
            .iter()
            .filter(|&&t| t != MATCH)
            .max()
            .copied()
            .unwrap_or(0);
        assert!(rows < MATCH, "the automaton's rows reach the match row");
        let none: Vec<u8> = (0..=255u8)
            .filter(|&b| ALPHABET.0[b as usize] == 0)
            .collect();
        assert!(none.len() > 100);
        for r in (0..=rows as usize).step_by(ROW).chain([MATCH as usize]) {
            let row = &DFA.next[r..r + ROW];
            assert!(
                row.iter()
                    .all(|&t| (t as usize).is_multiple_of(ROW) && t <= MATCH)
            );
            if r == MATCH as usize {
                assert!(row.iter().all(|&t| t == MATCH));
            }
            for b in b'A'..=b'Z' {
                assert_eq!(row[b as usize], row[b.to_ascii_lowercase() as usize]);
            }
            assert!(
                none.iter()
                    .all(|&b| row[b as usize] == row[none[0] as usize])
            );
        }
        assert!((DFA.start as usize).is_multiple_of(ROW));
        // A step never leaves the table: the mask is only there to spare a bounds check.
        assert!(MATCH as usize + ROW == TABLE);
    }

    #[test]
    fn every_trigger_alone_in_any_case_and_nowhere_split() {
        for t in TRIGGERS.iter().chain(WORD_TRIGGERS) {
            let upper = t.to_ascii_uppercase();
            for hay in [
                t.to_string(),
                upper.clone(),
                format!("x\n{t}\ny"),
                format!("{upper}\n"),
            ] {
                check(hay.as_bytes());
                assert!(!naive(hay.as_bytes()).is_empty(), "{hay:?}");
            }
            if t.len() > 1 {
                // Cut by a newline, a trigger is in no line.
                let (a, b) = t.split_at(1);
                let cut = format!("{a}\n{b}");
                let got: Vec<usize> = Lines::new(cut.as_bytes(), CHUNK).collect();
                assert_eq!(got, naive(cut.as_bytes()), "{cut:?}");
            }
        }
    }

    /// Text dense with pieces of triggers (prefixes, suffixes, overlaps), in mixed case, with
    /// newlines, other bytes and non-ASCII bytes between them: where an automaton's failure
    /// links go wrong.
    #[test]
    fn generated_text_matches_a_naive_search() {
        let mut rng = Rng(0x5eed_1234_abcd_0001);
        let filler: &[&[u8]] = &[
            b"\n",
            b" ",
            b"x",
            b"\xc3\xa9",
            b"\xff",
            b"\t",
            b"Q",
            b"\n\n",
        ];
        for round in 0..400 {
            let mut hay = Vec::new();
            let pieces = 1 + rng.below(if round % 10 == 0 { 400 } else { 40 });
            for _ in 0..pieces {
                if rng.below(3) == 0 {
                    hay.extend_from_slice(filler[rng.below(filler.len())]);
                    continue;
                }
                let k = rng.below(TRIGGERS.len() + WORD_TRIGGERS.len());
                let t = TRIGGERS
                    .get(k)
                    .unwrap_or_else(|| &WORD_TRIGGERS[k - TRIGGERS.len()]);
                let t = t.as_bytes();
                let (a, b) = (rng.below(t.len() + 1), rng.below(t.len() + 1));
                let piece = if rng.below(4) == 0 {
                    t
                } else {
                    &t[a.min(b)..a.max(b)]
                };
                for &c in piece {
                    hay.push(if rng.below(2) == 0 {
                        c.to_ascii_uppercase()
                    } else {
                        c
                    });
                }
            }
            check(&hay);
        }
    }

    /// Real text: the labelled review set, the corpus and this crate's own sources.
    #[test]
    fn real_text_matches_a_naive_search() {
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            let Ok(rd) = std::fs::read_dir(dir) else {
                return;
            };
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else {
                    out.push(p);
                }
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        for d in [
            "tests/fixtures/review-labelled",
            "corpus/review",
            "src/skill",
            "docs",
        ] {
            walk(&root.join(d), &mut files);
        }
        assert!(files.len() > 20, "{} files", files.len());
        let mut lines = 0;
        for f in files {
            let bytes = std::fs::read(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            let want = naive(&bytes);
            lines += want.len();
            assert_eq!(Triggers::get().lines(&bytes).collect::<Vec<_>>(), want);
            assert_eq!(
                Lines::new(&bytes, 64).collect::<Vec<_>>(),
                naive(&bytes),
                "{}",
                f.display()
            );
        }
        assert!(lines > 1000, "{lines} trigger lines");
    }
}
