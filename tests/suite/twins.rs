//! Names that are one file to a reader or to another filesystem are refused whichever comes
//! first: an ASCII name and its Unicode twin, in both orders, as files and as implicit
//! directories (the engine keeps no NFC or NFKC key for an ASCII name: it is its own key).

use skillbox::extract::policy::Limits;
use skillbox::extract::{ArtifactType, Request};
use skillbox::reason::{ReasonCode, Verdict};
use skillbox::sandbox::SealedArtifact;

const SKILL: &[u8] = b"---\nname: demo\ndescription: A demo skill\n---\nUse it.\n";

fn tar_of(names: &[&str]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for name in std::iter::once(&"SKILL.md").chain(names) {
        let data: &[u8] = if *name == "SKILL.md" { SKILL } else { b"x\n" };
        let mut h = tar::Header::new_gnu();
        let raw = name.as_bytes();
        h.as_old_mut().name[..raw.len()].copy_from_slice(raw);
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mtime(0);
        h.set_cksum();
        b.append(&h, data).expect("append");
    }
    b.into_inner().expect("tar")
}

/// The engine's answer for a tar of `names` (after SKILL.md), in process.
fn outcome(names: &[&str]) -> skillbox::intake::Outcome {
    let art = tar_of(names);
    let mut req = Request::new(ArtifactType::Archive, Limits::default());
    req.file_name = Some("pkg.tar".into());
    let dir = tempfile::tempdir().expect("tempdir");
    let staging = std::fs::File::open(dir.path()).expect("open");
    let sealed = SealedArtifact::copy_from(&art[..], u64::MAX).expect("copy_from");
    skillbox::intake::run(sealed.file(), std::os::fd::AsFd::as_fd(&staging), &req).expect("run")
}

#[test]
fn twins_are_refused_in_either_order_ascii_first_or_not() {
    let nfc = "after Unicode normalisation";
    let nfkc = "after compatibility normalisation";
    let case = "case-insensitive";
    let cases: &[(&str, &str, ReasonCode, &str)] = &[
        // The ligature fi (NFKC twin of "fi").
        ("fi.md", "\u{fb01}.md", ReasonCode::UnicodeCollision, nfkc),
        // KELVIN SIGN: its canonical (NFC) form is the ASCII letter K.
        ("K.md", "\u{212a}.md", ReasonCode::UnicodeCollision, nfc),
        // Precomposed and decomposed e-acute: neither is ASCII.
        (
            "caf\u{e9}.md",
            "cafe\u{301}.md",
            ReasonCode::UnicodeCollision,
            nfc,
        ),
        // Fullwidth letters, NFKC twins of ASCII ones.
        (
            "ab.md",
            "\u{ff41}\u{ff42}.md",
            ReasonCode::UnicodeCollision,
            nfkc,
        ),
        ("Guide.md", "guide.md", ReasonCode::CaseCollision, case),
        // Implicit directories.
        (
            "fix/a.txt",
            "\u{fb01}x/b.txt",
            ReasonCode::UnicodeCollision,
            nfkc,
        ),
        (
            "Kit/a.txt",
            "\u{212a}it/b.txt",
            ReasonCode::UnicodeCollision,
            nfc,
        ),
        // A file and a directory.
        ("fix", "\u{fb01}x/b.txt", ReasonCode::UnicodeCollision, nfkc),
    ];
    for &(a, b, code, why) in cases {
        for (first, second) in [(a, b), (b, a)] {
            let out = outcome(&[first, second]);
            let reason = out
                .reason
                .as_ref()
                .unwrap_or_else(|| panic!("{first:?} then {second:?} accepted"));
            assert_eq!(out.verdict, Verdict::Rejected, "{first:?} then {second:?}");
            assert_eq!(reason.code, code, "{first:?} then {second:?}: {reason:?}");
            // Named: the path staged first, up to the component that collides.
            let named = first.split('/').next().unwrap_or(first);
            let named = format!("{:?}", skillbox::reason::display_name(named.as_bytes()));
            assert!(
                reason.detail.contains(why) && reason.detail.contains(&named),
                "{first:?} then {second:?}: {reason:?}"
            );
        }
        // Each alone is fine.
        assert_eq!(outcome(&[a]).verdict, Verdict::Accepted, "{a:?}");
        assert_eq!(outcome(&[b]).verdict, Verdict::Accepted, "{b:?}");
    }
    // ASCII names that differ only where normalisation changes nothing stay apart.
    assert_eq!(
        outcome(&["fi.md", "f1.md", "fi/x.md"]).verdict,
        Verdict::Accepted
    );
}
