//! Targets in another container: a process in another mount namespace (a container seen from
//! the host, or from a sidecar that shares its PID namespace) sees another filesystem, and in
//! another PID namespace another pid for itself.
//!
//! - [`Namespaces`] says which of the target's namespaces differ from ours (`/proc/PID/ns/*`)
//!   and its pid inside its own PID namespace (the last `NSpid:` of `/proc/PID/status`): the
//!   runtime names its diagnostics socket with that pid.
//! - [`Staging`] is the target's temporary directory (its `TMPDIR`, else /tmp) opened through
//!   `/proc/PID/root`: the agent library is copied there, the control socket is bound there and
//!   the agent writes its trace (and log) there, each under the path the target sees. The
//!   directory stays open as a file descriptor, so the trace can be moved out even after the
//!   target exited (its mount lives as long as the descriptor). Everything placed there is
//!   removed when the `Staging` is dropped: at the end of the session, on errors and after Ctrl-C.
//!
//! The agent copy keeps one name per agent build (`clrprof-agent-{size}-{mtime}.so`): the runtime
//! loads it with `dlopen`, which finds an already loaded library by its name, so a second attach
//! to the same process reuses the image the first one left loaded (the agent is linked with
//! `-z nodelete`) instead of loading one more copy.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Which of a process's namespaces differ from ours.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Namespaces {
    /// Another mount namespace: another filesystem.
    pub mount: bool,
    /// Another PID namespace: `inner_pid` differs from the pid seen here.
    pub pid: bool,
    /// Another user namespace: its user ids map to others here.
    pub user: bool,
    /// The process's pid in its own PID namespace.
    pub inner_pid: u32,
}

impl Namespaces {
    /// The namespaces of `pid`, given its `/proc/PID/status`. `Err` with the reason in words when
    /// they cannot be read (another user's process without the right to inspect it).
    pub fn of(pid: u32, status: &str) -> Result<Namespaces, String> {
        let differs = |kind: &str| -> Result<bool, String> {
            let ours = std::fs::read_link(format!("/proc/self/ns/{kind}"));
            let theirs = std::fs::read_link(format!("/proc/{pid}/ns/{kind}"));
            match (ours, theirs) {
                (Ok(a), Ok(b)) => Ok(a != b),
                (_, Err(e)) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(format!(
                    "cannot inspect the namespaces of process {pid} (/proc/{pid}/ns/{kind}: permission denied): that needs CAP_SYS_PTRACE (root on the host has it; root in a container does not by default), or the same user id as the process with every capability it holds"
                )),
                // No namespace files (a kernel without them): one namespace for all.
                _ => Ok(false),
            }
        };
        Ok(Namespaces {
            mount: differs("mnt")?,
            pid: differs("pid")?,
            user: differs("user")?,
            inner_pid: inner_pid(status).unwrap_or(pid),
        })
    }
}

/// The pid of a process in its own PID namespace: the last of its `NSpid:` ids (the first is the
/// pid in the namespace of this `/proc`).
pub fn inner_pid(status: &str) -> Option<u32> {
    let ids = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    ids.split_whitespace().last()?.parse().ok()
}

/// The target's temporary directory, opened through `/proc/PID/root`, and what was placed there.
#[derive(Debug)]
pub struct Staging {
    dir: File,
    /// The directory as the target sees it.
    inside: PathBuf,
    /// Names placed in it by this session, removed on drop.
    placed: Vec<String>,
    /// The user and group new files get (the target's, in another user namespace).
    owner: Option<(u32, u32)>,
}

/// Runs `f` with the file-system user and group ids `owner` (this thread only), then restores
/// ours. In another user namespace, a file created by a user that namespace does not map (root
/// of the host, for one) is refused (`EOVERFLOW`): files are created as the target's user.
fn as_owner<T>(owner: Option<(u32, u32)>, f: impl FnOnce() -> T) -> T {
    let Some((uid, gid)) = owner else { return f() };
    // Safety: setfsuid/setfsgid change this thread's file-system ids only; they are restored below.
    let (old_gid, old_uid) = unsafe { (libc::setfsgid(gid), libc::setfsuid(uid)) };
    let r = f();
    unsafe {
        libc::setfsuid(old_uid as u32);
        libc::setfsgid(old_gid as u32);
    }
    r
}

impl Staging {
    /// Opens `inside` (a directory of the target, as the target sees it) through `/proc/PID/root`;
    /// the files placed there are created as `owner` (user, group) when given.
    pub fn open(pid: u32, inside: &Path, owner: Option<(u32, u32)>) -> Result<Staging, String> {
        let host = Path::new(&format!("/proc/{pid}/root")).join(inside.strip_prefix("/").unwrap_or(inside));
        match File::open(&host) {
            Ok(dir) if dir.metadata().is_ok_and(|m| m.is_dir()) => {
                Ok(Staging { dir, inside: inside.to_path_buf(), placed: Vec::new(), owner })
            }
            Ok(_) => Err(format!("{} (the temporary directory of process {pid}) is not a directory", host.display())),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(format!(
                "cannot enter the filesystem of process {pid} through {} (permission denied): attaching into another container needs CAP_SYS_PTRACE (root on the host has it; root in a container does not by default), or the same user id as the process with every capability it holds",
                host.display()
            )),
            Err(e) => Err(format!(
                "cannot open the temporary directory {} of process {pid} through {} ({e})",
                inside.display(),
                host.display()
            )),
        }
    }

    /// `name` in the directory, as this process reaches it (through the open descriptor).
    pub fn host(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}/{name}", self.dir.as_raw_fd()))
    }

    /// `name` in the directory, as the target sees it.
    pub fn inside(&self, name: &str) -> PathBuf {
        self.inside.join(name)
    }

    /// A Unix socket listening at `name` (placed by this session).
    pub fn listen(&mut self, name: &str) -> std::io::Result<std::os::unix::net::UnixListener> {
        self.place(name);
        let path = self.host(name);
        as_owner(self.owner, || {
            let _ = std::fs::remove_file(&path);
            std::os::unix::net::UnixListener::bind(&path)
        })
    }

    /// Marks `name` as placed by this session: it is removed on drop.
    pub fn place(&mut self, name: &str) {
        self.placed.push(name.to_string());
    }

    /// Copies the agent library into the directory (once per agent build and directory) and
    /// returns its path as the target sees it. A copy already there (another session's, of the
    /// same build) is used as it is and left to that session to remove.
    pub fn agent(&mut self, agent: &Path) -> Result<PathBuf, String> {
        let m = std::fs::metadata(agent).map_err(|e| format!("cannot read the agent {}: {e}", agent.display()))?;
        let name =
            format!("clrprof-agent-{:x}-{:x}.so", m.len(), m.mtime() as u64 * 1_000_000_000 + m.mtime_nsec() as u64);
        if std::fs::metadata(self.host(&name)).is_ok_and(|c| c.len() == m.len()) {
            return Ok(self.inside(&name));
        }
        // Written under a temporary name, then renamed: a copy another process has mapped is
        // never overwritten in place.
        let tmp = format!(".{name}.{}", std::process::id());
        self.place(&tmp);
        let copied = File::open(agent).and_then(|mut from| {
            let mut to = as_owner(self.owner, || {
                std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o644).open(self.host(&tmp))
            })?;
            std::io::copy(&mut from, &mut to)?;
            to.set_permissions(std::fs::Permissions::from_mode(0o644))
        });
        copied.map_err(|e| format!("cannot copy the agent into {} of the target: {e}", self.inside.display()))?;
        as_owner(self.owner, || std::fs::rename(self.host(&tmp), self.host(&name)))
            .map_err(|e| format!("cannot place the agent copy {} in the target: {e}", self.inside(&name).display()))?;
        self.placed.pop();
        self.place(&name);
        Ok(self.inside(&name))
    }

    /// Moves the file the target wrote at `inside` (a path in the directory) to `to` on this side.
    pub fn bring_out(&mut self, inside: &Path, to: &Path) -> std::io::Result<()> {
        let name = self.name_of(inside)?;
        let from = self.host(&name);
        if std::fs::rename(&from, to).is_err() {
            std::fs::copy(&from, to)?;
            as_owner(self.owner, || std::fs::remove_file(&from))?;
        }
        self.placed.retain(|n| *n != name);
        Ok(())
    }

    /// Appends the file the target wrote at `inside` to `to` on this side, and removes it.
    pub fn append_out(&mut self, inside: &Path, to: &Path) -> std::io::Result<()> {
        let name = self.name_of(inside)?;
        let bytes = std::fs::read(self.host(&name))?;
        std::fs::OpenOptions::new().create(true).append(true).open(to)?.write_all(&bytes)?;
        as_owner(self.owner, || std::fs::remove_file(self.host(&name)))?;
        self.placed.retain(|n| *n != name);
        Ok(())
    }

    /// Whether the target's file at `inside` (a path in the directory) exists.
    pub fn exists(&self, inside: &Path) -> bool {
        self.name_of(inside).is_ok_and(|n| std::fs::symlink_metadata(self.host(&n)).is_ok())
    }

    fn name_of(&self, inside: &Path) -> std::io::Result<String> {
        match (inside.parent(), inside.file_name()) {
            (Some(p), Some(n)) if p == self.inside => Ok(n.to_string_lossy().into_owned()),
            _ => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} is not in the target's {}", inside.display(), self.inside.display()),
            )),
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        for name in &self.placed {
            let _ = as_owner(self.owner, || std::fs::remove_file(self.host(name)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_innermost_pid_is_the_last_nspid() {
        assert_eq!(inner_pid("Name:\tdotnet\nNSpid:\t81234\t57\t1\nUid:\t0\n"), Some(1));
        assert_eq!(inner_pid("NSpid:\t4242\n"), Some(4242));
        assert_eq!(inner_pid("Name:\tx\n"), None, "kernels before 4.1 have no NSpid");
    }

    #[test]
    fn this_process_shares_its_own_namespaces() {
        let pid = std::process::id();
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let ns = Namespaces::of(pid, &status).unwrap();
        assert_eq!(ns, Namespaces { mount: false, pid: false, user: false, inner_pid: pid });
    }

    #[test]
    fn staged_files_are_placed_reached_and_removed() {
        let dir = std::env::temp_dir().join(format!("clrprof-staging-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let agent = dir.join("agent.so");
        std::fs::write(&agent, b"not really a library").unwrap();
        let inside = dir.join("inside");
        std::fs::create_dir_all(&inside).unwrap();
        let listing = || {
            let mut v: Vec<String> =
                std::fs::read_dir(&inside).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into()).collect();
            v.sort();
            v
        };
        {
            // Our own process: /proc/self/root is the same filesystem.
            let mut s = Staging::open(std::process::id(), &inside, None).unwrap();
            let copy = s.agent(&agent).unwrap();
            assert_eq!(copy.parent(), Some(inside.as_path()));
            assert_eq!(std::fs::read(&copy).unwrap(), b"not really a library");
            assert_eq!(s.agent(&agent).unwrap(), copy, "one copy per build");
            std::fs::write(inside.join("trace.clrprof"), b"trace").unwrap();
            std::fs::write(inside.join("agent.log"), b"line\n").unwrap();
            s.place("trace.clrprof");
            s.place("agent.log");
            assert!(s.exists(&inside.join("trace.clrprof")));
            assert!(!s.exists(Path::new("/elsewhere/trace.clrprof")));
            s.bring_out(&inside.join("trace.clrprof"), &dir.join("out.clrprof")).unwrap();
            std::fs::write(dir.join("host.log"), b"first\n").unwrap();
            s.append_out(&inside.join("agent.log"), &dir.join("host.log")).unwrap();
            std::fs::write(inside.join("left-by-error"), b"x").unwrap();
            s.place("left-by-error");
            assert_eq!(listing().len(), 2, "{:?}", listing());
        }
        assert_eq!(listing(), Vec::<String>::new(), "everything placed is removed");
        assert_eq!(std::fs::read(dir.join("out.clrprof")).unwrap(), b"trace");
        assert_eq!(std::fs::read_to_string(dir.join("host.log")).unwrap(), "first\nline\n");
        assert!(Staging::open(std::process::id(), &dir.join("none"), None).unwrap_err().contains("cannot open"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
