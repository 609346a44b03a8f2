//! The filesystem staged trees land on, and the one kind that slows down as it is used.
//!
//! Every request creates a staged tree and every release deletes one, by the thousand an hour.
//! On ext4 *without a journal* the kernel avoids reusing an inode freed in the last minute (six
//! while its inode table block is still dirty): to allocate one it walks the group's free inodes
//! and looks up the on-disk record of each to skip those recently freed (`find_inode_bit` and
//! `recently_deleted` in `fs/ext4/ialloc.c`). A broker staging there gets slower the more
//! requests came before: measured on such a disk, 4.6 ms per request at first, 25 to 28 ms after
//! a few minutes of load, the child's time in that walk; on a journaled ext4 on the same disk
//! and on tmpfs the figure holds (bench-results/throughput.md). Nothing skillbox does per file
//! changes that, so `serve` and `doctor` say so and point to tmpfs or a journaled filesystem.
//!
//! Mounted `discard` as well, such a filesystem discards every block it frees as it frees it
//! (without a journal there is no commit to batch them on): `unlinkat` of a symlink whose target
//! holds a block took 0.06 to 1.6 ms on such a disk, by the day, against under 0.02 ms on tmpfs,
//! so removing a large staged tree can take seconds. The warning says so when
//! `/proc/self/mountinfo` lists the option.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::Serialize;

/// What a directory lives on, as far as staging cares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Filesystem {
    Tmpfs,
    /// ext2, ext3 or ext4 (one superblock magic), on block device `device` (`vda`, `loop0`);
    /// `journal` is `None` when the device could not be named, `discard` (mounted with online
    /// discard) when `/proc/self/mountinfo` could not be read or does not list the device.
    Ext4 {
        device: Option<String>,
        journal: Option<bool>,
        discard: Option<bool>,
    },
    /// Anything else, by its `statfs` magic number.
    Other {
        magic: i64,
    },
}

/// Where staging lands and what to tell the operator about it.
#[derive(Debug, Clone, Serialize)]
pub struct StagingFs {
    pub path: String,
    pub filesystem: Filesystem,
    /// Set when the filesystem is known to slow staging down as it is used.
    pub warning: Option<String>,
}

const TMPFS_MAGIC: i64 = 0x0102_1994;
const EXT4_SUPER_MAGIC: i64 = 0xEF53;

/// The filesystem under `path` (which must exist).
pub fn filesystem(path: &Path) -> io::Result<Filesystem> {
    let magic = nix::sys::statfs::statfs(path)?.filesystem_type().0 as i64;
    Ok(match magic {
        TMPFS_MAGIC => Filesystem::Tmpfs,
        EXT4_SUPER_MAGIC => {
            let dev = std::fs::metadata(path)?.dev();
            let device = device_name(dev);
            let journal = device.as_deref().map(has_journal);
            let discard = std::fs::read_to_string("/proc/self/mountinfo")
                .ok()
                .and_then(|info| mounted_with_discard(&info, dev));
            Filesystem::Ext4 {
                device,
                journal,
                discard,
            }
        }
        magic => Filesystem::Other { magic },
    })
}

/// The block device's kernel name (`/sys/dev/block/MAJOR:MINOR` links to `.../NAME`).
fn device_name(dev: u64) -> Option<String> {
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    let link = std::fs::read_link(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    Some(link.file_name()?.to_str()?.to_owned())
}

/// jbd2 lists every journal it runs as `/proc/fs/jbd2/DEVICE-INODE` (`vda-8`); no entry for the
/// device (or no jbd2 at all) means the filesystem runs without one.
fn has_journal(device: &str) -> bool {
    let prefix = format!("{device}-");
    std::fs::read_dir("/proc/fs/jbd2").is_ok_and(|dir| {
        dir.flatten().any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
        })
    })
}

/// Whether the filesystem on device `dev` is mounted with online discard, from the text of
/// `/proc/self/mountinfo`: the line whose third field is the device's `MAJOR:MINOR`, its super
/// options (the third field after the ` - ` separator; per filesystem, so every mount of it
/// lists the same) holding `discard`. `None` when no line names the device.
fn mounted_with_discard(mountinfo: &str, dev: u64) -> Option<bool> {
    let want = format!(
        "{}:{}",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev)
    );
    mountinfo.lines().find_map(|line| {
        let mut fields = line.split(' ');
        if fields.nth(2)? != want {
            return None;
        }
        // Past the optional fields, which end at a lone `-`: type, source, super options.
        let super_options = fields.skip_while(|f| *f != "-").nth(3)?;
        Some(super_options.split(',').any(|o| o == "discard"))
    })
}

impl Filesystem {
    /// A short name for a report: `tmpfs`, `ext4 (vda, journal)`.
    pub fn label(&self) -> String {
        match self {
            Filesystem::Tmpfs => "tmpfs".into(),
            Filesystem::Ext4 {
                device,
                journal,
                discard,
            } => format!(
                "ext4 ({}, {}{})",
                device.as_deref().unwrap_or("unknown device"),
                match journal {
                    Some(true) => "journal",
                    Some(false) => "no journal",
                    None => "journal unknown",
                },
                if *discard == Some(true) {
                    ", discard"
                } else {
                    ""
                }
            ),
            Filesystem::Other { magic } => format!("filesystem magic {magic:#x}"),
        }
    }
}

/// The warning for `fs`, if it has one.
pub fn warning(fs: &Filesystem) -> Option<String> {
    match fs {
        Filesystem::Ext4 {
            journal: Some(false),
            device,
            discard,
        } => Some(format!(
            "ext4 without a journal{}: the kernel skips inodes freed in the last minutes, so \
             creating files slows down as staged trees are deleted (a broker's requests take \
             several times longer after minutes of load){}; stage on tmpfs or a journaled \
             filesystem",
            device
                .as_deref()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default(),
            if *discard == Some(true) {
                ", and mounted `discard` it discards every block it frees as it frees it, so \
                 removing a staged tree costs up to about 1.6 ms for each symlink, directory or \
                 file that holds a block (under 0.02 ms on tmpfs): seconds for a tree of thousands"
            } else {
                ""
            }
        )),
        _ => None,
    }
}

/// [`warning`] for the filesystem holding `path`; `None` too when it cannot be told.
pub fn warning_at(path: &Path) -> Option<String> {
    warning(&filesystem(path).ok()?)
}

/// [`filesystem`] and [`warning`] for `path`, for a report.
pub fn describe(path: &Path) -> io::Result<StagingFs> {
    let filesystem = filesystem(path)?;
    Ok(StagingFs {
        path: path.display().to_string(),
        warning: warning(&filesystem),
        filesystem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_shm_is_tmpfs_and_has_nothing_to_warn_about() {
        let fs = filesystem(Path::new("/dev/shm")).expect("statfs /dev/shm");
        assert_eq!(fs, Filesystem::Tmpfs);
        assert_eq!(warning(&fs), None);
        assert!(filesystem(Path::new("/no/such/dir")).is_err());
        assert_eq!(warning_at(Path::new("/dev/shm")), None);
        assert_eq!(warning_at(Path::new("/no/such/dir")), None);
    }

    #[test]
    fn only_ext4_known_to_run_without_a_journal_is_warned_about() {
        let ext4 = |journal| Filesystem::Ext4 {
            device: Some("vda".into()),
            journal,
            discard: None,
        };
        let w = warning(&ext4(Some(false))).expect("a warning");
        assert!(
            w.contains("without a journal (vda)") && w.contains("tmpfs"),
            "{w}"
        );
        assert_eq!(warning(&ext4(Some(true))), None);
        assert_eq!(warning(&ext4(None)), None);
        assert_eq!(warning(&Filesystem::Other { magic: 0x5846_5342 }), None);
    }

    /// Lines as this project's test host lists them: its root, on `vda` (254:0), without a
    /// journal and mounted `discard`; a loop-mounted ext4 image without; a tmpfs; and one
    /// with optional fields before the separator.
    const MOUNTINFO: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683772k
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534
45 27 7:0 / /mnt/ab rw,relatime - ext4 /dev/loop0 rw
46 27 7:1 / /mnt/cd rw,relatime shared:7 master:2 - ext4 /dev/loop1 rw,nodiscard,errors=remount-ro
";

    #[test]
    fn discard_is_read_from_the_devices_mountinfo_line() {
        let dev = |major, minor| nix::sys::stat::makedev(major, minor);
        assert_eq!(mounted_with_discard(MOUNTINFO, dev(254, 0)), Some(true));
        assert_eq!(mounted_with_discard(MOUNTINFO, dev(7, 0)), Some(false));
        // `nodiscard` is not `discard`, and optional fields are skipped.
        assert_eq!(mounted_with_discard(MOUNTINFO, dev(7, 1)), Some(false));
        assert_eq!(mounted_with_discard(MOUNTINFO, dev(8, 1)), None);
        assert_eq!(mounted_with_discard("", dev(254, 0)), None);

        let bare = |discard| Filesystem::Ext4 {
            device: Some("vda".into()),
            journal: Some(false),
            discard,
        };
        let with = warning(&bare(Some(true))).expect("a warning");
        assert!(
            with.contains("without a journal (vda)") && with.contains("mounted `discard`"),
            "{with}"
        );
        assert!(
            with.ends_with("stage on tmpfs or a journaled filesystem"),
            "{with}"
        );
        for discard in [Some(false), None] {
            let w = warning(&bare(discard)).expect("a warning");
            assert!(!w.contains("discard"), "{w}");
        }
        assert_eq!(bare(Some(true)).label(), "ext4 (vda, no journal, discard)");
        assert_eq!(bare(Some(false)).label(), "ext4 (vda, no journal)");
        // With a journal, freed blocks are discarded at the journal's commit, off the unlink:
        // nothing to warn about.
        let journaled = Filesystem::Ext4 {
            device: Some("vda".into()),
            journal: Some(true),
            discard: Some(true),
        };
        assert_eq!(warning(&journaled), None);
    }
}
