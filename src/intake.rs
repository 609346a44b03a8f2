//! One intake job as the confined child runs it: the engine extracts, then the review reads
//! what was staged, and a review that rejects (an invalid SKILL.md) clears the tree (or, in the
//! confined child, leaves it to the parent: [`RejectedTree`]).
//!
//! This is the layer above both: [`crate::extract`] knows nothing of the review and
//! [`crate::skill::review`] knows nothing of the engine's request. [`Outcome`] is the whole
//! answer (the CLI's `--json` object, the child's answer, what the broker converts). It must
//! never run outside the confined child on untrusted bytes: the review parses SKILL.md.

use std::fs::File;
use std::os::fd::BorrowedFd;

use serde::{Deserialize, Serialize};

use crate::extract::inventory::{ArtifactFacts, Entry, Extraction, Totals};
use crate::extract::{self, EngineError, RejectedTree, Request, writer};
use crate::reason::{Reason, Verdict};
use crate::skill::review::{self, IndexFacts, Review, ReviewError};

/// The whole answer of one intake: the engine's extraction plus the review of an accepted tree.
/// The same fields as [`Extraction`] (so the JSON is one flat object) and `review`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub verdict: Verdict,
    pub reason: Option<Reason>,
    pub artifact: ArtifactFacts,
    pub entries: Vec<Entry>,
    pub totals: Totals,
    /// The wrapping directory of a `.skill` package, taken off every name (see
    /// [`Extraction::wrapper`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrapper: Option<String>,
    /// The review report of an accepted package (what it asks to do); absent when rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<Review>,
}

impl Outcome {
    /// A rejection: no entries survive, only the facts and totals at the moment of stopping.
    pub fn rejected(artifact: ArtifactFacts, totals: Totals, reason: Reason) -> Self {
        Extraction::rejected(artifact, totals, reason).into()
    }

    /// The review-free part, as the engine would have answered.
    pub fn extraction(&self) -> Extraction {
        Extraction {
            verdict: self.verdict,
            reason: self.reason.clone(),
            artifact: self.artifact.clone(),
            entries: self.entries.clone(),
            totals: self.totals.clone(),
            wrapper: self.wrapper.clone(),
        }
    }

    /// What [`crate::skill::diff`] compares of a saved answer.
    pub fn version(&self) -> crate::skill::diff::Version<'_> {
        crate::skill::diff::Version {
            verdict: self.verdict,
            digest: self.artifact.digest,
            entries: &self.entries,
            review: self.review.as_ref(),
        }
    }
}

impl From<Extraction> for Outcome {
    /// An extraction with no review (a rejection, or before the review ran).
    fn from(e: Extraction) -> Self {
        Self {
            verdict: e.verdict,
            reason: e.reason,
            artifact: e.artifact,
            entries: e.entries,
            totals: e.totals,
            wrapper: e.wrapper,
            review: None,
        }
    }
}

/// Extract `artifact` beneath `staging`, then review an accepted tree.
///
/// `Err` only for operational faults, after which the caller discards the staging directory.
/// A review that rejects clears the tree first: nothing of a rejected package survives.
pub fn run(
    artifact: &File,
    staging: BorrowedFd<'_>,
    req: &Request,
) -> Result<Outcome, EngineError> {
    let (extraction, captured) = extract::extract_capturing(artifact, staging, req)?;
    review_extraction(staging, req, extraction, &captured, RejectedTree::Cleared)
}

/// [`run`], closing the artifact once the engine is done with it, before the review (the
/// confined child's memfd: its parent holds it until the child is gone and frees its pages
/// then, docs/sandbox.md); a plain tarball's kept members still hold the windows of it the
/// review reads, and are returned with the outcome, for the caller to drop or to leave to
/// its exit (the child does). `rejected_tree` says whether a rejected tree (the engine's or
/// the review's) is removed here or left to the caller ([`RejectedTree`]; the child leaves it
/// to its parent).
pub fn run_releasing(
    artifact: File,
    staging: BorrowedFd<'_>,
    req: &Request,
    rejected_tree: RejectedTree,
) -> Result<(Outcome, extract::Captured), EngineError> {
    let extracted = extract::extract_capturing_as(&artifact, staging, req, rejected_tree);
    drop(artifact);
    let (extraction, captured) = extracted?;
    let outcome = review_extraction(staging, req, extraction, &captured, rejected_tree)?;
    Ok((outcome, captured))
}

/// The review of an extraction (an accepted one: any other is returned as it is).
fn review_extraction(
    staging: BorrowedFd<'_>,
    req: &Request,
    extraction: extract::inventory::Extraction,
    captured: &extract::Captured,
    rejected_tree: RejectedTree,
) -> Result<Outcome, EngineError> {
    if extraction.verdict != Verdict::Accepted {
        return Ok(extraction.into());
    }
    let listed = IndexFacts {
        skill_name: req.skill_name.clone(),
        description: req.index_description.clone(),
    };
    let limits = review::ReviewLimits::default();
    let reviewed =
        review::review_captured(staging, &extraction.entries, &listed, &limits, captured)
            .and_then(|r| wrapper_named_after_skill(extraction.wrapper.as_deref(), r));
    match reviewed {
        Ok(review) => {
            let mut outcome = Outcome::from(extraction);
            outcome.review = Some(review);
            Ok(outcome)
        }
        Err(err) => {
            if rejected_tree == RejectedTree::Cleared {
                writer::clear_beneath(staging, 0).map_err(EngineError::Cleanup)?;
            }
            match err {
                ReviewError::Invalid(reason) => Ok(Outcome::rejected(
                    extraction.artifact,
                    extraction.totals,
                    reason,
                )),
                ReviewError::Io { source, .. } => Err(EngineError::Staging(source)),
            }
        }
    }
}

/// A wrapping directory must carry the skill's own name: `pdf/SKILL.md` naming itself `pdf`.
fn wrapper_named_after_skill(wrapper: Option<&str>, review: Review) -> Result<Review, ReviewError> {
    let Some(w) = wrapper else {
        return Ok(review);
    };
    let name = review.frontmatter.as_ref().map(|f| f.name.as_str());
    if name == Some(w) {
        return Ok(review);
    }
    Err(ReviewError::Invalid(Reason::new(
        crate::reason::ReasonCode::MissingSkillMd,
        format!(
            "the wrapping directory {} is not the skill's name {}",
            crate::reason::display_name(w.as_bytes()),
            crate::reason::display_name(name.unwrap_or("").as_bytes())
        ),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::{ArtifactType, policy::Limits};
    use crate::reason::ReasonCode;
    use std::os::fd::AsFd;

    fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        for (path, data) in files {
            let mut h = tar::Header::new_ustar();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            h.set_cksum();
            tar.append_data(&mut h, path, *data)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        tar.into_inner().unwrap_or_else(|e| panic!("{e}"))
    }

    /// What `bytes` leaves beneath a fresh staging directory, run as `rejected_tree` says, and
    /// the reason it was rejected for.
    fn left_by(bytes: &[u8], rejected_tree: RejectedTree) -> (Option<ReasonCode>, Vec<String>) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let art = dir.path().join("a.tar");
        std::fs::write(&art, bytes).unwrap_or_else(|e| panic!("{e}"));
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap_or_else(|e| panic!("{e}"));
        let staging = File::open(&out).unwrap_or_else(|e| panic!("{e}"));
        let artifact = File::open(&art).unwrap_or_else(|e| panic!("{e}"));
        let req = Request::new(ArtifactType::Archive, Limits::default());
        let outcome = match rejected_tree {
            RejectedTree::Cleared => run(&artifact, staging.as_fd(), &req),
            RejectedTree::Left => run_releasing(artifact, staging.as_fd(), &req, rejected_tree)
                .map(|(outcome, _kept)| outcome),
        }
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(outcome.verdict, Verdict::Rejected);
        assert!(outcome.entries.is_empty());
        let mut names: Vec<String> = std::fs::read_dir(&out)
            .unwrap_or_else(|e| panic!("{e}"))
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        (outcome.reason.map(|r| r.code), names)
    }

    #[test]
    fn in_process_a_rejection_leaves_nothing_and_the_child_leaves_the_tree_to_its_parent() {
        let skill = b"---\nname: demo\ndescription: A demo skill\n---\nUse it.\n";
        // The engine stops at the duplicate; the review refuses a SKILL.md without frontmatter.
        let engine = tar_of(&[("SKILL.md", skill), ("a.txt", b"a"), ("a.txt", b"b")]);
        let review = tar_of(&[("SKILL.md", b"no frontmatter\n"), ("b.txt", b"b")]);
        for (bytes, code, staged) in [
            (&engine, ReasonCode::DuplicatePath, ["SKILL.md", "a.txt"]),
            (&review, ReasonCode::InvalidSkillMd, ["SKILL.md", "b.txt"]),
        ] {
            // The library's promise, kept by default: nothing of a rejected package is left.
            assert_eq!(
                left_by(bytes, RejectedTree::Cleared),
                (Some(code), Vec::new())
            );
            // The confined child's choice: the tree as it stands, for the parent to remove.
            assert_eq!(
                left_by(bytes, RejectedTree::Left),
                (Some(code), staged.map(str::to_owned).to_vec())
            );
        }
    }
}
