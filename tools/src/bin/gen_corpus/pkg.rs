//! The contents of a well-formed skill package, and the deterministic byte sources the cases
//! are built from. Hostile cases start from this package and add exactly one fault, so the
//! fault is the only thing a correct engine can object to.

use super::tarraw::Tar;
use super::zipraw::Entry;
pub use skillbox_tools::stock::{F, noise};

/// A `SKILL.md` with the frontmatter the Agent Skills spec requires.
pub fn skill_md(name: &str) -> String {
    format!(
        "---\nname: {name}\ndescription: Extract text and tables from PDF files. Use when the user asks about PDFs.\n---\n\n\
         # PDF tools\n\nRun `scripts/extract.sh FILE` and read `references/guide.md` first.\n"
    )
}

pub const EXTRACT_SH: &str = "#!/bin/sh\nset -eu\nexec pdftotext -layout \"$1\" -\n";
pub const HELPER_PY: &str = "import sys\n\nprint(sys.argv[1:])\n";
pub const GUIDE_MD: &str = "# Guide\n\nTables come out as tab-separated text.\n";
pub const TEMPLATE_TXT: &str = "Title: {title}\nPages: {pages}\n";

pub fn f(path: &str, mode: u32, data: impl AsRef<[u8]>) -> F {
    F {
        path: path.to_owned(),
        mode,
        data: data.as_ref().to_vec(),
    }
}

/// The standard benign package: a root SKILL.md, a script, a reference, two assets.
pub fn package(name: &str) -> Vec<F> {
    vec![
        f("SKILL.md", 0o644, skill_md(name)),
        f("scripts/extract.sh", 0o755, EXTRACT_SH),
        f("scripts/helper.py", 0o644, HELPER_PY),
        f("references/guide.md", 0o644, GUIDE_MD),
        f("assets/template.txt", 0o644, TEMPLATE_TXT),
        f("assets/logo.png", 0o644, png_like(1)),
    ]
}

/// The top-level directories of [`package`], with trailing slashes.
pub const PACKAGE_DIRS: [&str; 3] = ["scripts/", "references/", "assets/"];

/// Zip members for `files`, each deflated, with explicit directory members first when `dirs`.
pub fn zip_entries(files: &[F], dirs: bool) -> Vec<Entry> {
    let mut out = Vec::new();
    if dirs {
        out.extend(PACKAGE_DIRS.iter().map(Entry::dir));
    }
    out.extend(
        files
            .iter()
            .map(|x| Entry::file(&x.path, &x.data).mode(0o100_000 | x.mode)),
    );
    out
}

/// A tar stream (not yet finished) holding `files`, optionally with directory entries and a
/// `./` prefix on every name.
pub fn tar_of(files: &[F], dirs: bool, dot: bool) -> Tar {
    let p = |s: &str| if dot { format!("./{s}") } else { s.to_owned() };
    let mut t = Tar::new();
    if dirs {
        if dot {
            t.dir("./");
        }
        for d in PACKAGE_DIRS {
            t.dir(p(d));
        }
    }
    for x in files {
        t.file_mode(p(&x.path), x.mode, &x.data);
    }
    t
}

/// A tar stream holding just the root SKILL.md: the start of every hostile tar.
pub fn tar_with_skill() -> Tar {
    let mut t = Tar::new();
    t.file("SKILL.md", skill_md("hostile"));
    t
}

/// The root SKILL.md as a zip member: the first member of every hostile zip.
pub fn zip_skill() -> Entry {
    Entry::file("SKILL.md", skill_md("hostile"))
}

/// PNG signature followed by noise: an opaque binary asset.
pub fn png_like(seed: u64) -> Vec<u8> {
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    out.extend_from_slice(&noise(seed, 600));
    out
}
