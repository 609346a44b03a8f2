//! Artifacts a correct engine must accept: every format, the shapes real packages take, and
//! every limit exactly at its boundary (the one-past twin of each lives in `hostile.rs`).

use std::error::Error;

use serde_json::json;

use super::pkg::{F, GUIDE_MD, PACKAGE_DIRS, f, noise, package, skill_md, tar_of, zip_entries};
use super::tarraw::{Tar, gzip, zstd, zstd_long, zstd_window_log};
use super::zipraw::{Entry, FLAG_DESCRIPTOR, Finish, Zip, zip_of};
use super::{Corpus, sha256_hex};
use skillbox_tools::stock::{self, Member, TarStyle};

/// Names `SKILL.md` plus `count - 1` empty files, all at the root so that archive headers and
/// created nodes are the same number.
pub fn many_names(count: usize) -> Vec<String> {
    let mut names = vec!["SKILL.md".to_owned()];
    names.extend((0..count - 1).map(|i| format!("{i:04}")));
    names
}

pub fn zip_many(count: usize) -> Vec<u8> {
    let entries: Vec<Entry> = many_names(count)
        .iter()
        .map(|n| {
            if n == "SKILL.md" {
                Entry::file(n, skill_md("many"))
            } else {
                Entry::file(n, b"").stored()
            }
        })
        .collect();
    zip_of(&entries)
}

/// A tar of `SKILL.md` plus `count - 1` empty files at the root. Names carry 8 hex digits of
/// noise so that the decoded stream (512-byte headers) stays well under 200:1 even compressed:
/// the entry limit, not the ratio rule, is what these cases are about.
pub fn tar_many(count: usize) -> Vec<u8> {
    let mut t = Tar::new();
    t.file("SKILL.md", skill_md("many"));
    let salt = noise(99, 4 * count);
    for (i, s) in salt.chunks(4).take(count - 1).enumerate() {
        let tag = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        t.file(format!("{i:04}-{tag:08x}"), b"");
    }
    t.finish()
}

/// A path of `depth` components: `d/d/.../leaf.md`.
pub fn deep_path(depth: usize) -> String {
    let mut p = "d/".repeat(depth - 1);
    p.push_str("leaf.md");
    p
}

/// A path of exactly `len` bytes made of components of at most 204 bytes.
pub fn long_path(len: usize) -> String {
    let mut comps = Vec::new();
    let mut left = len;
    let mut letter = b'a';
    while left > 0 {
        let take = if left > 205 { 204 } else { left };
        comps.push(String::from_utf8(vec![letter; take]).unwrap_or_default());
        left -= take;
        left = left.saturating_sub(1); // the separator
        letter += 1;
    }
    let p = comps.join("/");
    debug_assert_eq!(p.len(), len);
    p
}

/// A single component of `len` bytes ending in `.md`.
pub fn long_component(len: usize) -> String {
    format!("references/{}.md", "c".repeat(len - 3))
}

/// The package's file bytes in total: what `max_expanded_bytes` counts.
pub fn total_bytes(files: &[F]) -> u64 {
    files.iter().map(|x| x.data.len() as u64).sum()
}

/// The standard package as the library writers lay it out: the directories first.
fn library_members(files: &[F]) -> Vec<Member<'_>> {
    let mut m: Vec<Member<'_>> = PACKAGE_DIRS.iter().map(|d| Member::Dir(d)).collect();
    m.extend(files.iter().map(Member::File));
    m
}

fn zip_library(files: &[F], zip64_first: bool) -> Result<Vec<u8>, Box<dyn Error>> {
    Ok(stock::zip_library(&library_members(files), zip64_first)?)
}

fn tar_library(files: &[F]) -> Result<Vec<u8>, Box<dyn Error>> {
    // Longer than the 100-byte name field: the builder emits a GNU `././@LongLink` record.
    let long = f(
        &format!("references/{}.md", "long-name-".repeat(12)),
        0o644,
        "long\n",
    );
    let mut members = library_members(files);
    members.push(Member::File(&long));
    Ok(stock::tar_library(&members, TarStyle::GNU_EPOCH)?)
}

/// `len` bytes of zeros with one noise byte in every `stride`: data that deflates at a chosen
/// ratio (about 128:1 for a stride of 512, 230:1 for 1024), unlike zeros (1000:1) or noise (1:1).
pub fn sparse_noise(seed: u64, len: usize, stride: usize) -> Vec<u8> {
    let picks = noise(seed, 2 * len.div_ceil(stride));
    let mut out = vec![0u8; len];
    for (i, p) in picks.chunks(2).enumerate() {
        let at = i * stride + usize::from(p[0]) * stride / 256;
        if let Some(b) = out.get_mut(at) {
            *b = p[1] | 1;
        }
    }
    out
}

/// A zip that produces exactly `ratio` x its own size in bytes, plus `extra`: SKILL.md and a
/// file of zeros, padded to the length the budget needs with the archive comment. Returns the
/// artifact and the limits (`max_ratio` = `ratio`, a threshold below the output).
pub fn budget_zip(ratio: u64, extra: u64) -> (Vec<u8>, serde_json::Value) {
    let skill = skill_md("budget");
    let build = |zeros: u64, comment: usize| {
        let mut z = Zip::new();
        z.add(&Entry::file("SKILL.md", &skill));
        z.add(&Entry::file("assets/zeros.bin", vec![0u8; zeros as usize]));
        z.finish_with(&Finish {
            comment: vec![b'.'; comment],
            ..Finish::default()
        })
    };
    let mut target = build(0, 0).len() as u64 + 64;
    loop {
        let zeros = ratio * target - skill.len() as u64 + extra;
        let bare = build(zeros, 0).len() as u64;
        if bare <= target {
            let out = build(zeros, (target - bare) as usize);
            let limits = json!({"max_ratio": ratio, "ratio_threshold_bytes": 4096});
            return (out, limits);
        }
        target = bare + 16;
    }
}

/// SKILL.md and one file `depth` directories deep, with no directory members: two members
/// that need `depth` implicit parents.
pub fn implicit_dirs(depth: usize) -> Vec<u8> {
    let mut t = Tar::new();
    t.file("SKILL.md", skill_md("implicit"));
    let mut p = (0..depth)
        .map(|i| format!("d{i}"))
        .collect::<Vec<_>>()
        .join("/");
    p.push_str("/leaf.md");
    t.file(p, "leaf\n");
    t.finish()
}

/// SKILL.md and `count - 1` empty files spread over 100 directories that the archive never
/// lists: `count` members, 100 implicit directories.
pub fn many_in_dirs(count: usize) -> Vec<(String, Vec<u8>)> {
    let mut out = vec![("SKILL.md".to_owned(), skill_md("many").into_bytes())];
    out.extend((0..count - 1).map(|i| (format!("d{:02}/{i:04}", i % 100), Vec::new())));
    out
}

pub fn cases(c: &mut Corpus) -> Result<(), Box<dyn Error>> {
    let pkg = package("pdf-tools");
    let zip_basic = zip_of(&zip_entries(&pkg, true));
    let tar_basic = tar_of(&pkg, true, false).finish();
    let md_lf = skill_md("pdf-tools");
    let md_crlf = md_lf.replace('\n', "\r\n");

    // Each format.
    c.accept(
        "zip_basic",
        "zip",
        zip_basic.clone(),
        "deflated zip with directory members, an executable script, references and assets",
    );
    let stored: Vec<Entry> = zip_entries(&pkg, false)
        .into_iter()
        .map(Entry::stored)
        .collect();
    c.accept(
        "zip_stored_no_dirs",
        "zip",
        zip_of(&stored),
        "stored zip without directory members: parents are implicit",
    );
    let descriptor: Vec<Entry> = zip_entries(&pkg, true)
        .into_iter()
        .map(|e| e.flags(FLAG_DESCRIPTOR))
        .collect();
    c.accept(
        "zip_data_descriptor",
        "zip",
        zip_of(&descriptor),
        "streamed zip: CRC and sizes in data descriptors after each member (bit 3)",
    );
    c.accept(
        "zip_library_writer",
        "zip",
        zip_library(&pkg, false)?,
        "zip as written by the zip crate's ZipWriter",
    );
    c.accept(
        "zip_zip64_member",
        "zip",
        zip_library(&pkg, true)?,
        "small member written with zip64 extra fields",
    );
    c.accept(
        "tar_basic",
        "tar",
        tar_basic.clone(),
        "ustar with directory entries and an executable script",
    );
    c.accept(
        "targz_dot_slash",
        "tar.gz",
        gzip(&tar_of(&pkg, true, true).finish()),
        "tar.gz whose names all start with ./ (GNU tar style), including a ./ root entry",
    );
    c.accept(
        "tarzst_basic",
        "tar.zst",
        zstd(&tar_basic),
        "tar.zst with directory entries",
    );
    c.accept(
        "tar_library_builder",
        "tar",
        tar_library(&pkg)?,
        "GNU tar as written by tar::Builder, with a GNU long-name record",
    );
    c.accept(
        "md_skill_lf",
        "md",
        md_lf.clone().into_bytes(),
        "a bare SKILL.md declared as text/markdown",
    )
    .skill_md()
    .media("text/markdown");
    c.accept(
        "md_skill_crlf",
        "md",
        md_crlf.clone().into_bytes(),
        "a bare SKILL.md with CRLF line endings, staged byte for byte",
    )
    .skill_md();

    // Hints: absent, generic, and agreeing.
    c.accept(
        "bin_zip_no_hint",
        "bin",
        zip_basic.clone(),
        "zip bytes with an extension that gives no hint: magic decides",
    );
    c.accept(
        "bin_targz_media_type",
        "bin",
        gzip(&tar_basic),
        "tar.gz bytes named .bin, media type application/gzip",
    )
    .media("application/gzip");
    c.accept(
        "tgz_octet_stream",
        "tgz",
        gzip(&tar_basic),
        "generic media type: the .tgz extension is the hint, and agrees",
    )
    .media("application/octet-stream");
    c.accept(
        "zip_structured_suffix",
        "zip",
        zip_basic.clone(),
        "RFC 6839 +zip structured-syntax media type",
    )
    .media("application/vnd.agentskills.skill+zip");
    c.accept(
        "zip_digest_match",
        "zip",
        zip_basic.clone(),
        "--digest names exactly these bytes",
    )
    .digest(format!("sha256:{}", sha256_hex(&zip_basic)));
    c.accept(
        "md_digest_match",
        "md",
        md_crlf.clone().into_bytes(),
        "--digest of the CRLF bytes as received",
    )
    .skill_md()
    .digest(format!("sha256:{}", sha256_hex(md_crlf.as_bytes())));

    // Long names in each tar encoding.
    let mut t = tar_of(&pkg, false, false);
    let name = format!(
        "references/{}/{}.md",
        "nested-dir".repeat(8),
        "document".repeat(6)
    );
    let (prefix, rest) = name.split_at(name.rfind('/').unwrap_or(0));
    let mut h = super::tarraw::header(
        &rest.as_bytes()[1..],
        0o644,
        5,
        super::tarraw::REG,
        b"",
        super::tarraw::Magic::Ustar,
    );
    h[345..345 + prefix.len()].copy_from_slice(prefix.as_bytes());
    super::tarraw::fix_checksum(&mut h);
    t.block(&h).data(b"long\n");
    c.accept(
        "tar_ustar_prefix",
        "tar",
        t.finish(),
        "ustar name split across the prefix and name fields (> 100 bytes)",
    );
    let mut t = tar_of(&pkg, false, false);
    t.gnu_long(
        format!("references/{}.md", "gnu-long-".repeat(20)).as_bytes(),
        0o644,
        super::tarraw::REG,
        b"long\n",
    );
    c.accept(
        "tar_gnu_long_name",
        "tar",
        t.finish(),
        "GNU ././@LongLink long name",
    );
    let mut t = tar_of(&pkg, false, false);
    let long = format!("references/{}.md", "pax-long-".repeat(20));
    t.pax_file(
        &[("path", long.as_bytes())],
        b"references/pax-short.md",
        b"long\n",
    );
    c.accept(
        "tar_pax_long_name",
        "tar",
        t.finish(),
        "pax extended header `path` overriding a short ustar name",
    );

    // Symlinks that stay inside.
    let mut t = tar_of(&pkg, true, false);
    t.symlink("references/latest.md", "guide.md");
    t.symlink("scripts/refs", "../references");
    t.symlink("assets/guide-link.md", "../references/latest.md");
    c.accept(
        "tar_symlink_internal",
        "tar",
        t.finish(),
        "relative symlinks to a file, a directory and another symlink, all inside",
    );
    let mut z = zip_entries(&pkg, true);
    z.push(Entry::symlink("references/latest.md", "guide.md"));
    z.push(Entry::symlink("scripts/refs", "../references"));
    c.accept(
        "zip_symlink_internal",
        "zip",
        zip_of(&z),
        "Info-ZIP symlink members (mode 0120777, target as content) pointing inside",
    );

    // Non-ASCII names, NFC.
    let uni = vec![
        f("SKILL.md", 0o644, skill_md("unicode")),
        f("r\u{e9}f\u{e9}rences/caf\u{e9}.md", 0o644, GUIDE_MD),
        f("assets/\u{65e5}\u{672c}\u{8a9e}.txt", 0o644, "nihongo\n"),
        f("assets/\u{3a9}mega-\u{1f642}.txt", 0o644, "emoji\n"),
    ];
    c.accept(
        "zip_unicode_nfc",
        "zip",
        zip_of(&zip_entries(&uni, false)),
        "NFC non-ASCII names with the UTF-8 flag (bit 11)",
    );
    c.accept(
        "targz_unicode_nfc",
        "tar.gz",
        gzip(&tar_of(&uni, false, false).finish()),
        "NFC non-ASCII names in ustar",
    );

    // Nested archives are opaque files; the inner zip is itself hostile and must stay packed.
    let inner_hostile = zip_of(&[
        Entry::file("SKILL.md", skill_md("inner")),
        Entry::file("../../escape.md", "x"),
    ]);
    let mut nested = pkg.clone();
    nested.push(f("assets/bundle.zip", 0o644, &inner_hostile));
    nested.push(f("assets/data.tar.gz", 0o644, gzip(&tar_basic)));
    nested.push(f("assets/blob", 0o644, zstd(&tar_basic)));
    c.accept(
        "zip_nested_archive",
        "zip",
        zip_of(&zip_entries(&nested, true)),
        "zip, tar.gz and (extension-less) tar.zst members kept as files, never expanded",
    );
    c.accept(
        "tarzst_nested_archive",
        "tar.zst",
        zstd(&tar_of(&nested, true, false).finish()),
        "the same nested archives inside a tar.zst",
    );

    // Dangerous modes are contained, not rejected.
    let mut t = Tar::new();
    t.file_mode("SKILL.md", 0o666, skill_md("modes"));
    t.dir_mode("scripts/", 0o2777);
    t.file_mode("scripts/extract.sh", 0o4755, super::pkg::EXTRACT_SH);
    t.file_mode("scripts/helper.py", 0o2775, super::pkg::HELPER_PY);
    t.dir_mode("assets/", 0o1777);
    t.file_mode("assets/template.txt", 0o777, super::pkg::TEMPLATE_TXT);
    c.accept(
        "tar_mode_sanitised",
        "tar",
        t.finish(),
        "setuid, setgid, sticky and world-writable modes: staged as 0644/0755 and flagged",
    );
    let z = vec![
        Entry::file("SKILL.md", skill_md("modes")).mode(0o100_666),
        Entry::dir("scripts/").mode(0o042_777),
        Entry::file("scripts/extract.sh", super::pkg::EXTRACT_SH).mode(0o104_755),
        Entry::file("assets/template.txt", super::pkg::TEMPLATE_TXT).mode(0o100_777),
    ];
    c.accept(
        "zip_mode_sanitised",
        "zip",
        zip_of(&z),
        "setuid and world-writable unix modes in zip external attributes",
    );

    // Policy switches.
    let mut t = tar_of(&pkg, true, false);
    t.hardlink("references/guide-copy.md", "references/guide.md");
    c.accept(
        "tar_hardlink_copy_internal",
        "tar",
        t.finish(),
        "hard link to an earlier regular file, staged as a copy under hardlinks=copy_internal",
    )
    .limits(json!({"hardlinks": "copy_internal"}));
    c.accept(
        "zip_no_skill_md_allowed",
        "zip",
        zip_of(&zip_entries(&pkg[1..], true)),
        "no SKILL.md, allowed by require_skill_md=false",
    )
    .limits(json!({"require_skill_md": false}));

    // Limits exactly at the boundary (defaults).
    c.accept(
        "zip_entries_10000",
        "zip",
        zip_many(10_000),
        "exactly 10,000 entries (the default max_entries), all at the root",
    );
    c.accept(
        "targz_entries_10000",
        "tar.gz",
        gzip(&tar_many(10_000)),
        "exactly 10,000 entries in a tar.gz",
    );
    let deep = deep_path(32);
    let mut z = vec![Entry::file("SKILL.md", skill_md("deep"))];
    z.push(Entry::file(&deep, "deep\n"));
    c.accept(
        "zip_path_depth_32",
        "zip",
        zip_of(&z),
        "a file 32 components deep (max_path_depth)",
    );
    let mut t = Tar::new();
    t.file("SKILL.md", skill_md("deep")).file(&deep, "deep\n");
    c.accept(
        "tar_path_depth_32",
        "tar",
        t.finish(),
        "a file 32 components deep in ustar",
    );
    let long = long_path(1024);
    c.accept(
        "zip_path_1024",
        "zip",
        zip_of(&[
            Entry::file("SKILL.md", skill_md("long")),
            Entry::file(&long, "x"),
        ]),
        "a 1,024-byte path (max_path_bytes)",
    );
    let mut t = Tar::new();
    t.file("SKILL.md", skill_md("long"))
        .gnu_long(long.as_bytes(), 0o644, super::tarraw::REG, b"x");
    c.accept(
        "tar_path_1024",
        "tar",
        t.finish(),
        "a 1,024-byte path via a GNU long-name record",
    );
    let comp = long_component(255);
    c.accept(
        "zip_component_255",
        "zip",
        zip_of(&[
            Entry::file("SKILL.md", skill_md("long")),
            Entry::file(&comp, "x"),
        ]),
        "a 255-byte path component (max_component_bytes)",
    );
    let mut t = Tar::new();
    t.file("SKILL.md", skill_md("long")).pax_file(
        &[("path", comp.as_bytes())],
        b"references/short.md",
        b"x",
    );
    c.accept(
        "tar_component_255",
        "tar",
        t.finish(),
        "a 255-byte component via a pax path record",
    );

    // Byte limits at the boundary, through small overrides.
    let blob = |n: usize| {
        let mut files = vec![f("SKILL.md", 0o644, skill_md("sized"))];
        files.push(f("assets/blob.bin", 0o644, noise(7, n)));
        files
    };
    c.accept(
        "zip_file_size_at_limit",
        "zip",
        zip_of(&zip_entries(&blob(4096), false)),
        "a 4,096-byte file under max_file_bytes=4096",
    )
    .limits(json!({"max_file_bytes": 4096}));
    c.accept(
        "tar_file_size_at_limit",
        "tar",
        tar_of(&blob(4096), false, false).finish(),
        "a 4,096-byte file under max_file_bytes=4096",
    )
    .limits(json!({"max_file_bytes": 4096}));
    let total = total_bytes(&pkg);
    c.accept(
        "zip_expanded_at_limit",
        "zip",
        zip_basic.clone(),
        "files total exactly max_expanded_bytes",
    )
    .limits(json!({"max_expanded_bytes": total}));
    c.accept(
        "tar_expanded_at_limit",
        "tar",
        tar_basic.clone(),
        "files total exactly max_expanded_bytes",
    )
    .limits(json!({"max_expanded_bytes": total}));
    c.accept("zip_ratio_at_threshold", "zip", zip_of(&[Entry::file("zeros.bin", vec![0u8; 65_536])]), "65,536 zeros at ~800:1: not past ratio_threshold_bytes=65536, so max_ratio=10 does not apply")
        .limits(json!({"require_skill_md": false, "ratio_threshold_bytes": 65_536, "max_ratio": 10}));
    c.accept(
        "zip_artifact_size_at_limit",
        "zip",
        zip_basic.clone(),
        "artifact exactly max_artifact_bytes long",
    )
    .limits(json!({"max_artifact_bytes": zip_basic.len()}));
    c.accept(
        "md_artifact_size_at_limit",
        "md",
        md_lf.clone().into_bytes(),
        "SKILL.md exactly max_artifact_bytes long",
    )
    .skill_md()
    .limits(json!({"max_artifact_bytes": md_lf.len()}));
    let mut t = tar_of(&pkg[..4], true, false);
    t.file("assets/extra.txt", "x");
    c.accept(
        "tar_entries_at_limit",
        "tar",
        t.finish(),
        "8 headers, 8 nodes under max_entries=8",
    )
    .limits(json!({"max_entries": 8}));
    round_three(c, &pkg);
    // Last, so the 10,000-member cases are not replayed side by side with the ones above.
    round_two(c)
}

/// Benign twins of the third round of hostile cases: a hard link to an executable file, and
/// gzip streams other tools write.
fn round_three(c: &mut Corpus, pkg: &[F]) {
    use super::tarraw::LINK;
    let mut files = pkg.to_vec();
    for file in &mut files {
        if file.path == "references/guide.md" {
            file.mode = 0o755;
        }
    }
    let mut t = tar_of(&files, true, false);
    t.entry(
        b"references/guide-copy.md",
        0o644,
        LINK,
        b"references/guide.md",
        b"",
    );
    c.accept(
        "tar_hardlink_copy_internal_exec_target",
        "tar",
        t.finish(),
        "a hard link header 0644 to a 0755 file, under copy_internal: the copy takes the target's mode 0755, as GNU tar and bsdtar give it",
    )
    .limits(json!({"hardlinks": "copy_internal"}));
    // Tape-blocked: the gzip file padded with zeros to a multiple of 10,240 bytes.
    let tar = tar_of(pkg, true, false).finish();
    let mut padded = gzip(&tar);
    padded.resize(padded.len().div_ceil(10_240) * 10_240 + 10_240, 0);
    c.accept(
        "targz_zero_padded",
        "tar.gz",
        padded,
        "a tar.gz padded with zeros after the gzip stream (tape blocking; gzip: trailing zero bytes ignored)",
    );
    // One tar in two gzip members (`cat a.gz b.gz`): one stream to gzip, GNU tar and bsdtar.
    let (head, tail) = tar.split_at(1024);
    let mut two = gzip(head);
    two.extend(gzip(tail));
    c.accept(
        "targz_two_members",
        "tar.gz",
        two,
        "one tar split over two gzip members, read as one stream",
    );
}

/// Benign twins of the second round of hostile cases: each limit exactly at its boundary, and
/// the shapes real tools write that a stricter reading must still accept.
fn round_two(c: &mut Corpus) -> Result<(), Box<dyn Error>> {
    let (bytes, limits) = budget_zip(100, 0);
    c.accept(
        "zip_ratio_budget_at_limit",
        "zip",
        bytes,
        "produces exactly max_ratio=100 x the artifact's size (the output budget)",
    )
    .limits(limits);
    // A very compressible file first, then incompressible data: the package as a whole is far
    // inside the budget, so member order must not matter.
    let zeros = vec![0u8; 4 << 20];
    let first = vec![
        f("SKILL.md", 0o644, skill_md("order")),
        f("assets/zeros.bin", 0o644, &zeros),
        f("assets/noise.bin", 0o644, noise(5, 64 << 10)),
    ];
    c.accept(
        "zip_ratio_compressible_first",
        "zip",
        zip_of(&zip_entries(&first, false)),
        "4 MiB of zeros (~1000:1) before 64 KiB of noise: ~60:1 overall, inside the 200x budget",
    );
    c.accept(
        "targz_ratio_compressible_first",
        "tar.gz",
        gzip(&tar_of(&first, false, false).finish()),
        "the same package as a tar.gz: the verdict does not depend on member order",
    );
    let last: Vec<F> = vec![first[0].clone(), first[2].clone(), first[1].clone()];
    c.accept(
        "zip_ratio_compressible_last",
        "zip",
        zip_of(&zip_entries(&last, false)),
        "the same files with the zeros last",
    );
    let many = many_in_dirs(10_000);
    let entries: Vec<Entry> = many
        .iter()
        .map(|(n, d)| {
            if d.is_empty() {
                Entry::file(n, d).stored()
            } else {
                Entry::file(n, d)
            }
        })
        .collect();
    c.accept(
        "zip_entries_10000_in_dirs",
        "zip",
        zip_of(&entries),
        "exactly 10,000 members in 100 directories the archive does not list (10,100 nodes)",
    );
    c.accept(
        "tar_implicit_dirs_at_limit",
        "tar",
        implicit_dirs(4),
        "two members that need four implicit parent directories under max_entries=4",
    )
    .limits(json!({"max_entries": 4}));
    let mut t = Tar::new();
    t.pax_file(
        &[("comment", b"reviewed")],
        b"SKILL.md",
        skill_md("pax").as_bytes(),
    );
    t.pax_file(&[("comment", b"x")], b"references/a.md", b"a\n");
    t.pax_file(&[("comment", b"y")], b"references/b.md", b"b\n");
    c.accept(
        "tar_pax_members_at_limit",
        "tar",
        t.finish(),
        "three members, each behind its own PAX header, under max_entries=3: extension headers are not members",
    )
    .limits(json!({"max_entries": 3}));
    // `git archive` writes a PAX global header holding the commit id.
    let mut t = Tar::new();
    let body =
        super::tarraw::pax_records(&[("comment", b"4c34777b7a1b2c3d4e5f60718293a4b5c6d7e8f9")]);
    let h = super::tarraw::header(
        b"pax_global_header",
        0o666,
        body.len() as u64,
        b'g',
        b"",
        super::tarraw::Magic::Ustar,
    );
    t.block(&h).data(&body);
    t.file("SKILL.md", skill_md("git-archive"));
    c.accept(
        "tar_pax_global_comment",
        "tar",
        t.finish(),
        "a PAX global header with only a comment, as git archive writes: accepted",
    );
    let mut t = Tar::new();
    for i in 0..8u8 {
        t.pax_header(&[("comment", &[b'a' + i])]);
    }
    t.file("SKILL.md", skill_md("ext"));
    c.accept(
        "tar_extension_headers_8",
        "tar",
        t.finish(),
        "exactly eight extension headers in a row before a member (the most accepted)",
    );
    let mut t = Tar::new();
    t.pax_header(&[("comment", b"global-ish")]);
    t.pax_header(&[("comment", b"second")]);
    t.gnu_long(
        format!("references/{}.md", "long-".repeat(30)).as_bytes(),
        0o644,
        super::tarraw::REG,
        b"x",
    );
    t.file("SKILL.md", skill_md("ext"));
    c.accept(
        "tar_extension_headers_in_a_row",
        "tar",
        t.finish(),
        "two PAX headers and a GNU long name before one member (a run real writers emit)",
    );

    let tar = tar_of(&package("window"), true, false).finish();
    let frame = zstd_long(&tar, 27);
    if zstd_window_log(&frame) != Some(27) {
        return Err("zstd did not write a 2^27 window".into());
    }
    c.accept(
        "tarzst_window_log_27",
        "tar.zst",
        frame,
        "zstd --long=27 / --ultra -22 frame: a 128 MiB window, what the zstd tool decodes by default",
    );

    // Names that look like the refused ones but are ordinary on every system.
    let names = vec![
        f("SKILL.md", 0o644, skill_md("lookalikes")),
        f("references/console.md", 0o644, "x"),
        f("references/nullable.txt", 0o644, "x"),
        f("references/com10.txt", 0o644, "x"),
        f("references/auxiliary.md", 0o644, "x"),
        f("references/v1.2.3.md", 0o644, "x"),
        f("references/.hidden", 0o644, "x"),
        f("references/stra\u{df}e.md", 0o644, "x"),
        f("references/\u{3bf}\u{3b4}\u{3bf}\u{3c2}.md", 0o644, "x"),
        f(
            "assets/\u{1f468}\u{200d}\u{1f469}\u{200d}\u{1f467}.txt",
            0o644,
            "family emoji joined by ZWJ\n",
        ),
        f(
            "assets/\u{645}\u{6cc}\u{200c}\u{62e}\u{648}\u{627}\u{647}\u{645}.md",
            0o644,
            "Persian with ZWNJ\n",
        ),
    ];
    c.accept(
        "zip_lookalike_names",
        "zip",
        zip_of(&zip_entries(&names, false)),
        "console.md, com10.txt, v1.2.3.md, stra\u{df}e.md alone, emoji and Persian joiners: none is a device, twin or hidden character",
    );
    c.accept(
        "tar_lookalike_names",
        "tar",
        tar_of(&names, false, false).finish(),
        "the same ordinary names in ustar",
    );

    // Zip shapes real writers produce, which every record check must still accept.
    let pkg = package("records");
    let mut z = Zip::new();
    for e in zip_entries(&pkg, true) {
        z.add(&e);
    }
    c.accept(
        "zip_with_comment",
        "zip",
        z.finish_with(&Finish {
            comment: b"built by release.sh".to_vec(),
            ..Finish::default()
        }),
        "an archive comment exactly as long as its length field says",
    );
    let mut z = Zip::new();
    for e in zip_entries(&pkg, true) {
        z.add(&e);
    }
    c.accept(
        "zip_zip64_end_record",
        "zip",
        z.finish_with(&Finish {
            zip64: true,
            ..Finish::default()
        }),
        "Zip64 end record and locator that agree with the directory; the 32-bit copies defer to them",
    );
    let unsigned: Vec<Entry> = zip_entries(&pkg, false)
        .into_iter()
        .map(|mut e| {
            e = e.flags(FLAG_DESCRIPTOR);
            e.descriptor_unsigned = true;
            e
        })
        .collect();
    c.accept(
        "zip_descriptor_unsigned",
        "zip",
        zip_of(&unsigned),
        "data descriptors without their optional signature (APPNOTE 4.3.9.3)",
    );
    let mut deep = vec![f("SKILL.md", 0o644, skill_md("links"))];
    deep.push(f("deep/er/guide.md", 0o644, GUIDE_MD));
    let mut t = tar_of(&deep, false, false);
    t.symlink("sub", "deep/er");
    t.symlink("guide.md", "sub/guide.md");
    t.symlink("deep/up", "../deep/er");
    c.accept(
        "tar_symlink_both_readings_inside",
        "tar",
        t.finish(),
        "links through a link and with ../ that stay inside both as text and for the kernel",
    );
    c.accept(
        "targz_symlink_fan_in",
        "tar.gz",
        gzip(&symlink_fan_in()),
        "2,000 symlinks 31 levels deep, each through a 39-link chain, every target 199 x `x/../`: \
         resolved in time proportional to the targets (walking every chain again held the child \
         past its timeout)",
    );
    let mut t = Tar::new();
    let salt = noise(98, 4 * many.len());
    for ((n, d), s) in many.iter().zip(salt.chunks(4)) {
        let tag = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        if n == "SKILL.md" {
            t.file(n, d);
        } else {
            t.file(format!("{n}-{tag:08x}"), d);
        }
    }
    c.accept(
        "targz_entries_10000_in_dirs",
        "tar.gz",
        gzip(&t.finish()),
        "exactly 10,000 members in 100 implicit directories, tar.gz",
    );
    layers_that_agree(c);
    Ok(())
}

/// Fields of one format's second layer that every tool reads alike, staged as they say.
fn layers_that_agree(c: &mut Corpus) {
    // A mode in GNU's base-256 (the top bit of the field's first byte): GNU tar, bsdtar and
    // Python's tarfile read 0755, so the script is executable there and must be here.
    let mut t = Tar::new();
    t.file("SKILL.md", skill_md("pdf-tools"));
    let script = b"#!/bin/sh\necho run\n";
    let mut h = super::tarraw::header(
        b"scripts/run.sh",
        0o644,
        script.len() as u64,
        super::tarraw::REG,
        b"",
        super::tarraw::Magic::Gnu,
    );
    h[100..108].copy_from_slice(&[0x80, 0, 0, 0, 0, 0, 0x01, 0xed]);
    super::tarraw::fix_checksum(&mut h);
    t.block(&h).data(script);
    c.accept(
        "tar_mode_base256_exec",
        "tar",
        t.finish(),
        "scripts/run.sh with its mode 0755 in GNU base-256: staged executable, as GNU tar, bsdtar and tarfile extract it",
    );
    // A Unicode Path extra field naming the header's own name (a UTF-8 name given twice): one
    // name to every tool.
    let name = "references/caf\u{e9}.md";
    let mut e = Entry::file(name, "caf\u{e9}\n");
    e.extra = super::hostile::unicode_path_extra(name.as_bytes(), name.as_bytes(), None);
    // What bsdtar's zip writer (libarchive 3.6.2) writes: each member streamed with a data
    // descriptor, the local header holding the sizes but a zero CRC, and with `zip:experimental`
    // an xl field (0x6c78) repeating the central record's system and attributes.
    let members: Vec<Entry> = [
        ("SKILL.md", skill_md("pdf-tools").into_bytes(), 0o100_644u32),
        (
            "scripts/run.sh",
            b"#!/bin/sh\necho run\n".to_vec(),
            0o100_755,
        ),
    ]
    .into_iter()
    .map(|(name, data, mode)| {
        let mut e = Entry::file(name, data).mode(mode).flags(FLAG_DESCRIPTOR);
        e.descriptor_local_sizes = true;
        e.local_extra = Some(super::hostile::xl_extra(3, mode << 16));
        e
    })
    .collect();
    c.accept(
        "zip_bsdtar_writer",
        "zip",
        zip_of(&members),
        "as bsdtar --format zip writes: data descriptors, sizes but no CRC in the local headers, xl fields agreeing with the central directory",
    );
    // bsdtar --format v7: directories are type-NUL headers named with a trailing slash.
    let mut t = Tar::new();
    for (name, mode, data) in [
        (&b"./"[..], 0o755, &b""[..]),
        (b"./SKILL.md", 0o644, skill_md("pdf-tools").as_bytes()),
        (b"./references/", 0o755, b""),
        (b"./references/guide.md", 0o644, b"guide\n"),
    ] {
        let (h, data) = super::hostile::v7_entry(name, mode, data);
        t.block(&h).data(&data);
    }
    c.accept(
        "tar_v7_directories",
        "tar",
        t.finish(),
        "a v7 tar as bsdtar --format v7 writes it: directories as type-NUL headers named with a trailing slash",
    );
    // pzstd (shipped with zstd): each frame after a skippable frame holding its size.
    let mut tar = Tar::new();
    tar.file("SKILL.md", skill_md("pdf-tools"));
    let frame = zstd(&tar.finish());
    let mut pzstd = 0x184d_2a50u32.to_le_bytes().to_vec();
    pzstd.extend_from_slice(&4u32.to_le_bytes());
    pzstd.extend_from_slice(&u32::try_from(frame.len()).unwrap_or(0).to_le_bytes());
    pzstd.extend_from_slice(&frame);
    c.accept(
        "tarzst_pzstd_skippable_frame",
        "tar.zst",
        pzstd,
        "a tar.zst as pzstd writes it: a skippable frame (the next frame's size) first",
    );
    c.accept(
        "zip_unicode_path_same_name",
        "zip",
        zip_of(&[Entry::file("SKILL.md", skill_md("pdf-tools")), e]),
        "a Unicode Path extra field naming exactly the header's UTF-8 name",
    );
}

/// 2,000 symlinks, each through the same chain of 39 symlinks to a file, every target 199
/// `x/../` long, all 30 directories deep (names by PAX records): a fair package for the
/// kernel's reading, and a quadratic one for a resolver that walks every chain again by path.
fn symlink_fan_in() -> Vec<u8> {
    use super::tarraw::{DIR, REG, SYMLINK};
    let dir = (0..30)
        .map(|i| format!("d{i:02}{}", "a".repeat(26)))
        .collect::<Vec<_>>()
        .join("/");
    let pre = "x/../".repeat(199);
    let mut t = Tar::new();
    t.file("SKILL.md", skill_md("fan-in"));
    let mut add = |path: String, kind: u8, link: String, data: &[u8]| {
        let mut records: Vec<(&str, &[u8])> = vec![("path", path.as_bytes())];
        if !link.is_empty() {
            records.push(("linkpath", link.as_bytes()));
        }
        t.pax_header(&records);
        t.entry(b"pax-named", 0o755, kind, b"", data);
    };
    add(format!("{dir}/x"), DIR, String::new(), b"");
    add(format!("{dir}/f"), REG, String::new(), b"x\n");
    const CHAIN: usize = 39;
    for j in 0..CHAIN {
        let next = if j + 1 < CHAIN {
            format!("zc{}", j + 1)
        } else {
            "f".to_owned()
        };
        add(format!("{dir}/zc{j}"), SYMLINK, format!("{pre}{next}"), b"");
    }
    for i in 0..2000 {
        add(format!("{dir}/l{i}"), SYMLINK, format!("{pre}zc0"), b"");
    }
    t.finish()
}
