mod cli;
mod cli_first_hour;
mod corpus;
mod diff;
mod docs;
mod fetch;
mod fleet;
mod fuzz_seeds;
mod grpc;
mod index;
mod lifecycle;
mod output;
mod owned_dir;
mod publish;
mod replay;
mod review;
mod sandbox;
mod staging_fs;
mod twins;

/// Scratch space for the tests that replay the whole corpus (`corpus`, `grpc`, `replay`): a
/// tmpfs (`/dev/shm`) when there is one. These tests check verdicts, not a disk. On ext4 without
/// a journal, mounted `discard` (this project's CI machines' `/tmp`), the corpus's case of 9,990
/// long-target links (`targz_inventory_past_answer_bound`) took 8 to 46 s to stage and remove
/// under a loaded suite, past the child's 30 s deadline, against 1.3 to 1.7 s on tmpfs: the
/// filesystem's time, not the engine's (bench-results/throughput.md, fifteenth session).
/// `serve`, `replay` and `doctor` warn about such a disk; `.ci/run`'s release replay of the
/// corpus still stages under `TMPDIR`.
pub(crate) fn corpus_scratch() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    match skillbox::staging_fs::filesystem(shm) {
        Ok(skillbox::staging_fs::Filesystem::Tmpfs) => {
            tempfile::tempdir_in(shm).expect("a directory in /dev/shm")
        }
        other => {
            eprintln!(
                "WARNING: /dev/shm is not a tmpfs here ({other:?}); the corpus is staged under \
                 TMPDIR, where its slowest case may pass the child's deadline on a slow disk"
            );
            tempfile::tempdir().expect("tempdir")
        }
    }
}
