//! The audit log backend (`--audit-log-path`): JSON lines appended to a file (or standard
//! output for `-`), rotated as upstream's (lumberjack) rotates it: past `--audit-log-maxsize`
//! megabytes the file is renamed to `<name>-<UTC time>.<ext>` and a new one begun, and the
//! backups beyond `--audit-log-maxbackup` or older than `--audit-log-maxage` days are removed.
//!
//! Written by hand rather than with a rotation crate: the ones at hand name backups
//! differently from upstream (operators' log shippers match upstream's names) and apply one
//! limit, not a count and an age together (RFC 0012, "Audit").

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Upstream's rotation flags.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rotation {
    /// `--audit-log-maxsize`: megabytes before rotating (0: never).
    pub max_size_mb: u64,
    /// `--audit-log-maxbackup`: old files kept (0: all).
    pub max_backups: usize,
    /// `--audit-log-maxage`: days an old file is kept (0: forever).
    pub max_age_days: u64,
}

/// Where events are written.
pub enum Sink {
    /// Standard output (`--audit-log-path -`).
    Stdout,
    /// A file, rotated.
    File { path: PathBuf, file: File, size: u64, rotation: Rotation },
}

impl Sink {
    /// Opens `path` for appending (0600 when made), or standard output for `-`.
    pub fn open(path: &Path, rotation: Rotation) -> std::io::Result<Self> {
        if path.as_os_str() == "-" {
            return Ok(Self::Stdout);
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
        let size = file.metadata()?.len();
        Ok(Self::File { path: path.to_owned(), file, size, rotation })
    }

    /// Writes one line (the event's JSON), rotating first if it would pass the size limit.
    pub fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        match self {
            Self::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(line)?;
                out.write_all(b"\n")
            }
            Self::File { path, file, size, rotation } => {
                let limit = rotation.max_size_mb.saturating_mul(1024 * 1024);
                if limit > 0 && *size > 0 && *size + line.len() as u64 + 1 > limit {
                    *file = rotate(path, *rotation)?;
                    *size = 0;
                }
                file.write_all(line)?;
                file.write_all(b"\n")?;
                *size += line.len() as u64 + 1;
                Ok(())
            }
        }
    }
}

/// The name a file rotated at `at` gets: `audit-2026-12-02T05-49-02.123.log` for `audit.log`.
pub fn backup_name(path: &Path, at: SystemTime) -> PathBuf {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let ext = path.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
    let stamp = jiff::Timestamp::try_from(at).map(|t| t.strftime("%Y-%m-%dT%H-%M-%S%.3f").to_string()).unwrap_or_default();
    path.with_file_name(format!("{stem}-{stamp}{ext}"))
}

/// Renames the current file to its backup name, opens a new one, and prunes the backups.
fn rotate(path: &Path, rotation: Rotation) -> std::io::Result<File> {
    let mut backup = backup_name(path, SystemTime::now());
    // Two rotations in one millisecond: the later one waits its turn rather than overwrite.
    while backup.exists() {
        std::thread::sleep(Duration::from_millis(1));
        backup = backup_name(path, SystemTime::now());
    }
    std::fs::rename(path, &backup)?;
    let file = OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
    prune(path, rotation);
    Ok(file)
}

/// The backups of `path` on disk, oldest first (their names sort by time).
pub fn backups(path: &Path) -> Vec<PathBuf> {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let ext = path.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().map(|n| n.to_string_lossy()).is_some_and(|n| n.starts_with(&format!("{stem}-")) && n.ends_with(&ext) && n.len() == stem.len() + 24 + ext.len()))
        .collect();
    found.sort();
    found
}

fn prune(path: &Path, rotation: Rotation) {
    let mut kept = backups(path);
    if rotation.max_age_days > 0 {
        let cutoff = SystemTime::now() - Duration::from_secs(rotation.max_age_days * 86_400);
        kept.retain(|p| {
            let old = std::fs::metadata(p).and_then(|m| m.modified()).is_ok_and(|m| m < cutoff);
            if old {
                let _ = std::fs::remove_file(p);
            }
            !old
        });
    }
    if rotation.max_backups > 0 && kept.len() > rotation.max_backups {
        for p in &kept[..kept.len() - rotation.max_backups] {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backups_are_named_as_upstreams() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_654_542_123);
        assert_eq!(backup_name(Path::new("/var/log/audit.log"), at), PathBuf::from("/var/log/audit-2025-12-02T05-49-02.123.log"));
    }

    #[test]
    fn past_the_size_the_file_rotates_and_only_the_newest_backups_stay() {
        let dir = std::env::temp_dir().join(format!("shardplane-audit-{}", uuid::Uuid::new_v4()));
        let path = dir.join("audit.log");
        let mut sink = Sink::open(&path, Rotation { max_size_mb: 1, max_backups: 2, max_age_days: 0 }).unwrap();
        let line = vec![b'x'; 100 * 1024];
        // 10 lines of 100 KiB fill a megabyte; 35 make three rotations.
        for _ in 0..35 {
            sink.write_line(&line).unwrap();
        }
        let kept = backups(&path);
        assert_eq!(kept.len(), 2, "{kept:?}");
        for b in &kept {
            assert_eq!(std::fs::metadata(b).unwrap().len(), 10 * (100 * 1024 + 1), "{b:?}");
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 5 * (100 * 1024 + 1));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
