//! Deterministic generator of the skillbox corpus: benign and hostile artifacts, their
//! manifest of expected verdicts, and a checksum list.
//!
//! Usage: `cargo run -p skillbox-tools --bin gen_corpus -- corpus/`
//!
//! Every byte is a function of this source: no clocks, no randomness, fixed compression levels,
//! fixed ownership. Running it twice yields identical files, and `tests/suite/corpus.rs` holds
//! the committed files to `CHECKSUMS`. It never decides what the engine does; it only records
//! what the policy in `docs/design.md` says a correct engine must answer.

mod benign;
mod hostile;
mod pkg;
mod tarraw;
mod zipraw;

use std::collections::BTreeSet;
use std::error::Error;
use std::fs;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Reason codes a corpus artifact can provoke (docs/design.md). `timeout` and `sandbox_*` depend on
/// the host, not on the bytes, and are deliberately absent; `resource_limit` is here for the
/// one case the bytes decide (a zstd window past `zstd_window_log_max`).
pub const CORPUS_CODES: [&str; 29] = [
    "path_traversal",
    "absolute_path",
    "invalid_name",
    "link_escape",
    "link_traversal",
    "hardlink",
    "device_entry",
    "duplicate_path",
    "case_collision",
    "unicode_collision",
    "entry_count",
    "expanded_size",
    "ratio",
    "file_size",
    "path_depth",
    "path_length",
    "encrypted",
    "unsupported_method",
    "corrupt",
    "crc_mismatch",
    "header_mismatch",
    "overlapping_entries",
    "missing_skill_md",
    "format_mismatch",
    "unsupported_format",
    "digest_mismatch",
    "artifact_size",
    "invalid_skill_md",
    "resource_limit",
];

/// Names hostile entries aim at outside the output directory. The test asserts that nothing
/// matching `/tmp/skillbox-corpus-escape-*` exists after any case.
pub const ESCAPE_ABS: &str = "/tmp/skillbox-corpus-escape-";
/// Enough `..` to reach `/` from any plausible staging depth, then the same sentinel.
pub const ESCAPE_REL: &str = "../../../../../../../../../../../../tmp/skillbox-corpus-escape-";

/// One artifact and what a correct engine answers for it.
pub struct Case {
    pub name: String,
    pub file: String,
    pub bytes: Vec<u8>,
    pub skill_md: bool,
    pub media_type: Option<String>,
    pub limits: Option<Value>,
    pub digest: Option<String>,
    pub reason: Option<&'static str>,
    pub description: String,
}

impl Case {
    /// Declare the artifact a bare SKILL.md (`--type skill-md`).
    pub fn skill_md(&mut self) -> &mut Self {
        self.skill_md = true;
        self
    }

    pub fn media(&mut self, media_type: &str) -> &mut Self {
        self.media_type = Some(media_type.to_owned());
        self
    }

    /// A limits-file override (keys as in the limits file; the rest keep their defaults).
    pub fn limits(&mut self, limits: Value) -> &mut Self {
        self.limits = Some(limits);
        self
    }

    /// The digest to claim with `--digest` (`sha256:<hex>`).
    pub fn digest(&mut self, digest: String) -> &mut Self {
        self.digest = Some(digest);
        self
    }
}

#[derive(Default)]
pub struct Corpus {
    pub cases: Vec<Case>,
}

impl Corpus {
    fn push(
        &mut self,
        dir: &str,
        name: &str,
        ext: &str,
        bytes: Vec<u8>,
        reason: Option<&'static str>,
        d: &str,
    ) -> &mut Case {
        self.cases.push(Case {
            name: name.to_owned(),
            file: format!("{dir}/{name}.{ext}"),
            bytes,
            skill_md: false,
            media_type: None,
            limits: None,
            digest: None,
            reason,
            description: d.to_owned(),
        });
        let last = self.cases.len() - 1;
        &mut self.cases[last]
    }

    /// A benign artifact, stored as `benign/<name>.<ext>`.
    pub fn accept(
        &mut self,
        name: &str,
        ext: &str,
        bytes: Vec<u8>,
        description: &str,
    ) -> &mut Case {
        self.push("benign", name, ext, bytes, None, description)
    }

    /// A hostile artifact, stored as `hostile/<name>.<ext>`, rejected with `reason`.
    pub fn reject(
        &mut self,
        name: &str,
        ext: &str,
        bytes: Vec<u8>,
        reason: &'static str,
        description: &str,
    ) -> &mut Case {
        self.push("hostile", name, ext, bytes, Some(reason), description)
    }

    /// The same hostile tar stream as `tar_<stem>`, `targz_<stem>` and `tarzst_<stem>`.
    pub fn reject_tars(&mut self, stem: &str, tar: &[u8], reason: &'static str, description: &str) {
        self.reject(
            &format!("tar_{stem}"),
            "tar",
            tar.to_vec(),
            reason,
            description,
        );
        self.reject(
            &format!("targz_{stem}"),
            "tar.gz",
            tarraw::gzip(tar),
            reason,
            &format!("{description} (gzip)"),
        );
        self.reject(
            &format!("tarzst_{stem}"),
            "tar.zst",
            tarraw::zstd(tar),
            reason,
            &format!("{description} (zstd)"),
        );
    }
}

#[derive(Serialize)]
struct Manifest<'a> {
    version: u32,
    cases: Vec<ManifestCase<'a>>,
}

#[derive(Serialize)]
struct ManifestCase<'a> {
    name: &'a str,
    file: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: Option<&'a str>,
    limits: Option<&'a Value>,
    digest: Option<&'a str>,
    expect: Expect,
    description: &'a str,
}

#[derive(Serialize)]
struct Expect {
    verdict: &'static str,
    reason: Option<&'static str>,
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn check(corpus: &Corpus) -> Result<(), Box<dyn Error>> {
    let mut names = BTreeSet::new();
    for c in &corpus.cases {
        if !names.insert(c.name.as_str()) {
            return Err(format!("duplicate case name {}", c.name).into());
        }
        if let Some(r) = c.reason
            && !CORPUS_CODES.contains(&r)
        {
            return Err(format!("case {}: unknown reason code {r}", c.name).into());
        }
        if c.bytes.len() > 1_600_000 {
            return Err(format!(
                "case {}: {} bytes is too large to commit",
                c.name,
                c.bytes.len()
            )
            .into());
        }
    }
    let covered: BTreeSet<&str> = corpus.cases.iter().filter_map(|c| c.reason).collect();
    let missing: Vec<&str> = CORPUS_CODES
        .iter()
        .copied()
        .filter(|c| !covered.contains(c))
        .collect();
    if !missing.is_empty() {
        return Err(format!("reason codes without a case: {missing:?}").into());
    }
    Ok(())
}

fn write(out: &Path, corpus: &Corpus) -> Result<(), Box<dyn Error>> {
    for sub in ["benign", "hostile"] {
        let dir = out.join(sub);
        if dir.exists() {
            fs::remove_dir_all(&dir)?;
        }
        fs::create_dir_all(&dir)?;
    }
    let mut sums: Vec<(String, String)> = Vec::new();
    for c in &corpus.cases {
        fs::write(out.join(&c.file), &c.bytes)?;
        sums.push((c.file.clone(), sha256_hex(&c.bytes)));
    }
    let manifest = Manifest {
        version: 1,
        cases: corpus
            .cases
            .iter()
            .map(|c| ManifestCase {
                name: &c.name,
                file: &c.file,
                kind: if c.skill_md { "skill-md" } else { "archive" },
                media_type: c.media_type.as_deref(),
                limits: c.limits.as_ref(),
                digest: c.digest.as_deref(),
                expect: Expect {
                    verdict: if c.reason.is_some() {
                        "rejected"
                    } else {
                        "accepted"
                    },
                    reason: c.reason,
                },
                description: &c.description,
            })
            .collect(),
    };
    let mut json = serde_json::to_string_pretty(&manifest)?;
    json.push('\n');
    fs::write(out.join("manifest.json"), &json)?;
    sums.push(("manifest.json".to_owned(), sha256_hex(json.as_bytes())));
    fs::write(out.join("README.md"), README)?;
    sums.push(("README.md".to_owned(), sha256_hex(README.as_bytes())));
    sums.sort();
    // sha256sum(1) format, so `cd corpus && sha256sum -c CHECKSUMS` works too.
    let text: String = sums
        .iter()
        .map(|(file, hex)| format!("{hex}  {file}\n"))
        .collect();
    fs::write(out.join("CHECKSUMS"), text)?;
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out] = args.as_slice() else {
        return Err("usage: cargo run -p skillbox-tools --bin gen_corpus -- OUT_DIR".into());
    };
    let out = Path::new(out);
    let mut corpus = Corpus::default();
    benign::cases(&mut corpus)?;
    hostile::cases(&mut corpus)?;
    check(&corpus)?;
    fs::create_dir_all(out)?;
    write(out, &corpus)?;
    let rejected = corpus.cases.iter().filter(|c| c.reason.is_some()).count();
    let bytes: usize = corpus.cases.iter().map(|c| c.bytes.len()).sum();
    println!(
        "wrote {} cases ({} benign, {rejected} hostile, {bytes} bytes) to {}",
        corpus.cases.len(),
        corpus.cases.len() - rejected,
        out.display()
    );
    Ok(())
}

const README: &str = r#"# skillbox corpus

Benign and hostile Agent Skills artifacts with the verdict a correct engine must give each
one. Generated, never edited by hand: `tools/src/bin/gen_corpus/` is the source of every byte.

```
cargo run -p skillbox-tools --bin gen_corpus -- corpus/  # regenerate (same bytes every run)
cargo test --test all corpus                             # checksums + replay every case through the CLI
cd corpus && sha256sum -c CHECKSUMS                      # verify the committed files by hand
```

## Layout

- `benign/`  artifacts that must be accepted (each format, CRLF SKILL.md, internal symlinks,
  NFC names, nested archives, sanitised modes, every limit exactly at its boundary).
- `hostile/` artifacts that must be rejected, one fault each, named `<format>_<attack>`.
- `manifest.json` the cases (below). `CHECKSUMS` sha256 of every file above (sha256sum format).
- Other sub-directories (`review/`, `diff/`) belong to other suites and carry their own
  manifests; the generator never touches them.

## manifest.json

```json
{"version": 1, "cases": [{
  "name": "zip_path_traversal",
  "file": "hostile/zip_path_traversal.zip",
  "type": "archive",
  "media_type": null,
  "limits": null,
  "digest": null,
  "expect": {"verdict": "rejected", "reason": "path_traversal"},
  "description": "one line"
}]}
```

| key | meaning |
|-----|---------|
| `name` | unique case name; the file stem |
| `file` | path relative to this directory; its extension is the format hint (`.bin`: none) |
| `type` | `archive` or `skill-md`: pass as `--type` |
| `media_type` | null, or pass as `--media-type` |
| `limits` | null, or an object of limits-file keys to write to a `.json` file and pass as `--limits`; keys absent keep their defaults |
| `digest` | null (pass no `--digest`), or `sha256:<hex>` to pass as `--digest` |
| `expect.verdict` | `accepted` (exit 0) or `rejected` (exit 3) |
| `expect.reason` | null when accepted, else the reason code |
| `description` | one line for humans |

To replay one case by hand:

```
skillbox extract corpus/hostile/zip_path_traversal.zip --type archive --json --out /tmp/x
```

A rejected case must leave no output directory behind; an accepted one must leave exactly the
tree its inventory lists. Hostile names aim at `/tmp/skillbox-corpus-escape-*` (absolute, or via
enough `../`): nothing by that name may exist after a run.

Byte limits (file size, expanded size, ratio, artifact size, entry count) are exercised at and
one past the boundary through small per-case `limits` overrides, so every file stays small;
`zip_file_65mib` and `zip_expanded_300mib` cross the default size limits with data that stays
inside the ratio budget, and must be named `file_size` and `expanded_size`.
The ratio rule is a fixed output budget (`max_ratio` x the artifact's size, once past
`ratio_threshold_bytes`), so member order never changes a verdict. The bombs (`*_ratio_bomb_*`)
spread 200 MiB to 4 GiB of zeros over files each under the file limit and must be stopped by
that budget; the one-file bombs (`*_bomb_1gib_one_file`) pass the 64 MiB file limit first.
"#;
