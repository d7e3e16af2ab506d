//! Watching the config files: a polling thread that reloads when the content of the config,
//! a proto or an element source changes (including a file appearing where the element search
//! would find it first), once the files have stopped changing.
//!
//! Polling rather than inotify: it needs no dependency, behaves the same on every platform
//! and file system (network mounts, Kubernetes ConfigMap symlink swaps), and the files are a
//! few kilobytes read once a second.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use sha2::{Digest as _, Sha256};

use crate::engine::{Inner, ReloadBy};

/// Stops and joins the polling thread when dropped.
pub(crate) struct Watcher {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

/// The content of every watched file (a missing file counts as a content of its own).
fn fingerprint(files: &[PathBuf]) -> [u8; 32] {
    let contents: Vec<Option<Vec<u8>>> = files.iter().map(|f| std::fs::read(f).ok()).collect();
    fingerprint_of(
        files
            .iter()
            .zip(&contents)
            .map(|(f, c)| (f.as_path(), c.as_deref())),
    )
}

/// The fingerprint of files whose content is already in hand (`None`: the file is missing).
/// Paths must come in the same order as the version's `files` (sorted).
pub(crate) fn fingerprint_of<'a>(
    files: impl IntoIterator<Item = (&'a Path, Option<&'a [u8]>)>,
) -> [u8; 32] {
    let mut h = Sha256::new();
    for (path, content) in files {
        h.update(path.as_os_str().as_encoded_bytes());
        match content {
            Some(bytes) => {
                h.update([1]);
                h.update((bytes.len() as u64).to_le_bytes());
                h.update(bytes);
            }
            None => h.update([0]),
        }
    }
    h.finalize().into()
}

impl Watcher {
    pub(crate) fn start(engine: Weak<Inner>, every: Duration) -> Watcher {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stop_seen = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("weft-config-watch".into())
            .spawn(move || {
                // The baseline is what the current version was built from, not what the
                // files hold when this thread first runs: a write in between is a change.
                let mut seen = match engine.upgrade() {
                    Some(e) => e.watched().1,
                    None => return,
                };
                // A change is acted on once the files read the same at two polls in a row:
                // a config written in several pieces (`cat >`, `kubectl cp`) can parse when
                // cut short, and must not be installed half written.
                let mut settling: Option<[u8; 32]> = None;
                loop {
                    let (lock, cvar) = &*stop_seen;
                    let stopped = lock.lock().unwrap_or_else(PoisonError::into_inner);
                    let (stopped, _) = cvar
                        .wait_timeout_while(stopped, every, |s| !*s)
                        .unwrap_or_else(PoisonError::into_inner);
                    if *stopped {
                        return;
                    }
                    drop(stopped);
                    let Some(e) = engine.upgrade() else { return };
                    let before = e.watched();
                    let now = fingerprint(&before.0);
                    if now == seen {
                        settling = None;
                        continue;
                    }
                    if settling.replace(now) != Some(now) {
                        continue;
                    }
                    settling = None;
                    // A failed reload (a broken element) keeps the old version and is
                    // reported; the next change to the files tries again.
                    let _ = e.reload(None, ReloadBy::Watcher);
                    // Compare next with what this reload read, installed or not: a write
                    // during the reload is then seen at the next poll, an unchanged or
                    // failed build is not retried on the same content, and after a failure
                    // the files the new config lists are watched. A reload that failed
                    // before reading them (the config does not parse) read nothing new: wait
                    // for the watched files to change again.
                    let after = e.watched();
                    seen = if after == before { now } else { after.1 };
                }
            })
            .ok();
        Watcher { stop, thread }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let (lock, cvar) = &*self.stop;
        *lock.lock().unwrap_or_else(PoisonError::into_inner) = true;
        cvar.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
