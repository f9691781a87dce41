//! Directories that outlive a server's restarts but not the tests.
//!
//! A server's own watchdog (see [`server`](crate::server)) removes the
//! server's directory when it kills the server, so whatever a restart should
//! find again (etcd's data, a Redis Cluster node's `nodes.conf`) lives in a
//! [`KeptDir`] instead: removed when dropped or, should the test process end
//! without dropping it (a panic that aborts, `SIGKILL`), by a watchdog of its
//! own when the pipe from the test process closes.

use std::io;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};

/// A directory removed when dropped or when the test process ends, however
/// it ends.
pub struct KeptDir {
    dir: PathBuf,
    /// Closing its standard input makes it remove `dir`.
    watchdog: Option<(Child, ChildStdin)>,
}

impl KeptDir {
    /// Creates `dir` (and its parents) and starts the watchdog that removes
    /// it when the test process ends.
    pub fn new(dir: PathBuf) -> io::Result<KeptDir> {
        std::fs::create_dir_all(&dir)
            .map_err(|e| io::Error::new(e.kind(), format!("creating {}: {e}", dir.display())))?;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#"cat >/dev/null; rm -rf "$1""#)
            .arg("sh")
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("starting the remover of {}: {e}", dir.display()),
                )
            })?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| io::Error::other("the remover's standard input was not piped"))?;
        Ok(KeptDir {
            dir,
            watchdog: Some((child, stdin)),
        })
    }
}

impl Drop for KeptDir {
    fn drop(&mut self) {
        if let Some((mut child, stdin)) = self.watchdog.take() {
            drop(stdin);
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
