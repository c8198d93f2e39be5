//! Operating-system helpers shared by the recorders: the calling thread's kernel tid, thread
//! CPU-time clocks, `/proc` reading (thread state, run-queue wait, stack mappings, stack pointers of
//! threads off the CPU) and safe reads of this process's own memory. Nothing here is called from
//! the signal handler.

use std::collections::HashMap;
use std::sync::Mutex;

/// The calling thread's kernel tid (cached per thread).
pub(crate) fn os_tid() -> u32 {
    thread_local! { static TID: u32 = unsafe_gettid(); }
    TID.try_with(|t| *t).unwrap_or_else(|_| unsafe_gettid())
}

pub(crate) fn unsafe_gettid() -> u32 {
    // Safety: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Whether `fd` has something to read (data, or its end) within `timeout`: `Some(true)`;
/// `Some(false)` when the time ran out or a signal came first; `None` on an error.
pub(crate) fn readable_within(fd: &impl std::os::fd::AsRawFd, timeout: std::time::Duration) -> Option<bool> {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
    // Safety: one valid pollfd for the duration of the call; the descriptor is borrowed, open.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    match r {
        0 => Some(false),
        r if r > 0 => Some(true),
        _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => Some(false),
        _ => None,
    }
}

/// CPU time of a thread of this process, read from its CPU-time clock (no signal involved).
pub(crate) fn thread_cpu_ns(tid: u32) -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: a per-thread CPU clock id; clock_gettime writes `ts` or fails.
    let r = unsafe { libc::clock_gettime(thread_clock(tid), &mut ts) };
    (r == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Time a thread of this process has waited on a run queue for a CPU, ns (the second field of
/// `/proc/self/task/<tid>/schedstat`). Not for the signal path.
pub(crate) fn thread_runq_ns(tid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    text.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// The kernel's CPU-time clock of thread `tid`: `CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED` on `~tid`.
pub(crate) fn thread_clock(tid: u32) -> libc::clockid_t {
    ((!(tid as libc::clockid_t)) << 3) | 6
}

/// CPU time of the calling thread.
/// CPU time of the whole process (every thread, the agent's included), nanoseconds.
pub(crate) fn process_cpu_ns() -> Option<u64> {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: clock_gettime writes the timespec it is given.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    (r == 0).then(|| t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64)
}

pub(crate) fn own_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: clock_gettime writes `ts`.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Open `/proc/self/task/<tid>/stat` and `schedstat` files, re-read with `pread` (cheaper than
/// opening each time).
#[derive(Default)]
pub(crate) struct StatFiles {
    files: HashMap<u32, std::fs::File>,
    schedstat: HashMap<u32, std::fs::File>,
    syscall: HashMap<u32, std::fs::File>,
}

/// Where a thread off the CPU waits in the kernel: its system call's number and first argument
/// (the futex, the file descriptor) and its user stack pointer and instruction pointer at the
/// call (`/proc/self/task/<tid>/syscall`). The same site twice on one thread is the same wait
/// reached through the same call chain: the stack pointer pins the depth of the frames above.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WaitSite {
    pub(crate) nr: u64,
    pub(crate) arg1: u64,
    pub(crate) sp: u64,
    pub(crate) pc: u64,
}

/// The [`WaitSite`] in a `syscall` file's text: None while the thread runs (`running`) or when it
/// was preempted outside a system call (`-1 SP PC`).
pub(crate) fn parse_wait_site(text: &str) -> Option<WaitSite> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    let [nr, arg1, _, _, _, _, _, sp, pc] = fields.as_slice() else { return None };
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    let site = WaitSite { nr: nr.parse().ok()?, arg1: hex(arg1)?, sp: hex(sp)?, pc: hex(pc)? };
    (site.sp != 0 && site.pc != 0).then_some(site)
}

/// Opens `/proc/self/task/<tid>/<name>` for reading, relative to a descriptor of
/// `/proc/self/task` opened once (the full path when that cannot be opened).
fn open_task_file(tid: u32, name: &str) -> Option<std::fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    static TASK_DIR: std::sync::OnceLock<Option<std::fs::File>> = std::sync::OnceLock::new();
    let dir = TASK_DIR.get_or_init(|| std::fs::File::open("/proc/self/task").ok());
    let Some(dir) = dir else { return std::fs::File::open(format!("/proc/self/task/{tid}/{name}")).ok() };
    let path = std::ffi::CString::new(format!("{tid}/{name}")).ok()?;
    // Safety: `path` is a NUL-terminated string and `dir` an open directory for the process's life.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    // Safety: `fd` was just opened here and is owned by the returned file alone.
    (fd >= 0).then(|| unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Most stat files kept open.
pub(crate) const MAX_STAT_FILES: usize = 256;

impl StatFiles {
    /// Reads the start of the thread's file `name` (`stat`, `schedstat`, `syscall`) into `buf`.
    /// The files of the first [`MAX_STAT_FILES`] threads asked about stay open (until the thread
    /// is forgotten); the others are opened for each read and closed. (Clearing the whole cache
    /// when it was full made every read an open and a close once threads outnumbered it: the
    /// sampler looks at threads round robin, so each file was evicted before it was read again.)
    /// Opened relative to `/proc/self/task`, kept open, which saves resolving `/proc/self`.
    fn read(cache: &mut HashMap<u32, std::fs::File>, tid: u32, name: &str, buf: &mut [u8]) -> Option<usize> {
        use std::os::unix::fs::FileExt;
        if let Some(f) = cache.get(&tid) {
            return f.read_at(buf, 0).ok();
        }
        let f = open_task_file(tid, name)?;
        let n = f.read_at(buf, 0).ok()?;
        if cache.len() < MAX_STAT_FILES {
            cache.insert(tid, f);
        }
        Some(n)
    }

    /// Whether a thread is running or waiting for a CPU (state `R`).
    pub(crate) fn runnable(&mut self, tid: u32) -> Option<bool> {
        let mut buf = [0u8; 512];
        let n = Self::read(&mut self.files, tid, "stat", &mut buf)?;
        let text = &buf[..n];
        let close = text.iter().rposition(|&b| b == b')')?;
        Some(text.get(close + 2) == Some(&b'R'))
    }

    /// Time the thread has spent waiting on a run queue, ns (the second field of `schedstat`).
    pub(crate) fn runq_wait_ns(&mut self, tid: u32) -> Option<u64> {
        let mut buf = [0u8; 96];
        let n = Self::read(&mut self.schedstat, tid, "schedstat", &mut buf)?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        text.split_ascii_whitespace().nth(1)?.parse().ok()
    }

    /// Where the thread waits in a system call now ([`WaitSite`]); None while it runs.
    pub(crate) fn wait_site(&mut self, tid: u32) -> Option<WaitSite> {
        let mut buf = [0u8; 256];
        let n = Self::read(&mut self.syscall, tid, "syscall", &mut buf)?;
        parse_wait_site(std::str::from_utf8(&buf[..n]).ok()?)
    }

    pub(crate) fn forget(&mut self, tid: u32) {
        self.files.remove(&tid);
        self.schedstat.remove(&tid);
        self.syscall.remove(&tid);
    }
}

/// Copies this process's memory at `addr` into `buf` through the kernel (written to a pipe and
/// read back): false, not a fault, when it is not mapped. Code found by address at attach
/// (`GetFunctionFromIP`) may lie in an image a collectible context has since unloaded. (A pipe,
/// not `process_vm_readv`, which container seccomp profiles may refuse.)
pub(crate) fn read_own_memory(addr: u64, buf: &mut [u8]) -> bool {
    static PIPE: std::sync::OnceLock<Option<Mutex<(i32, i32)>>> = std::sync::OnceLock::new();
    let pipe = PIPE.get_or_init(|| {
        let mut fds = [0i32; 2];
        // Safety: `fds` has room for the two descriptors.
        let ok = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } == 0;
        ok.then(|| Mutex::new((fds[0], fds[1])))
    });
    let Some(Ok(fds)) = pipe.as_ref().map(|m| m.lock()) else { return false };
    // Safety: the kernel reads `buf.len()` bytes at `addr` and fails with EFAULT where they are
    // not mapped; `buf` is ours to fill.
    unsafe {
        let written = libc::write(fds.1, addr as *const libc::c_void, buf.len());
        if written <= 0 {
            return false;
        }
        // What was written is read back in any case: the pipe stays empty for the next read.
        let read = libc::read(fds.0, buf.as_mut_ptr().cast(), written as usize);
        written == buf.len() as isize && read == written
    }
}

/// The user stack pointer of a thread that is not on a CPU right now: blocked in a system call
/// (`NR ARG1 … ARG6 SP PC`) or preempted (`-1 SP PC`); None while it runs (`running`).
pub(crate) fn syscall_sp(tid: u32) -> Option<u64> {
    let sys = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).ok()?;
    parse_syscall_sp(&sys)
}

pub(crate) fn parse_syscall_sp(text: &str) -> Option<u64> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    let sp = match fields.as_slice() {
        ["-1", sp, _pc] => sp,
        [_nr, _, _, _, _, _, _, sp, _pc] => sp,
        _ => return None,
    };
    u64::from_str_radix(sp.trim_start_matches("0x"), 16).ok().filter(|&sp| sp != 0)
}

pub(crate) fn stack_bounds_of(tid: u32) -> Option<(u64, u64)> {
    let sp = syscall_sp(tid)?;
    stack_mapping(&std::fs::read_to_string("/proc/self/maps").ok()?, sp)
}

/// The writable mapping of `maps` (`/proc/PID/maps` text) that contains `sp`.
pub(crate) fn stack_mapping(maps: &str, sp: u64) -> Option<(u64, u64)> {
    maps.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        let (range, perms) = (it.next()?, it.next()?);
        let (a, b) = range.split_once('-')?;
        let (a, b) = (u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?);
        (a <= sp && sp < b && perms.starts_with("rw") && b - a >= 128 << 10).then_some((a, b))
    })
}

pub(crate) fn current_stack_bounds() -> Option<(u64, u64)> {
    // Safety: pthread_getattr_np fills `attr`, which is destroyed after use; getstack only reads it.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let r = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        (r == 0 && !addr.is_null()).then(|| (addr as u64, addr as u64 + size as u64))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn own_memory_is_read_without_faulting() {
        use super::read_own_memory;
        let src = [1u8, 2, 3, 4, 5];
        let mut b = [0u8; 5];
        assert!(read_own_memory(src.as_ptr() as u64, &mut b));
        assert_eq!(b, src);
        // Nothing mapped at page 1; then the pipe still gives the right bytes.
        assert!(!read_own_memory(0x1000, &mut b));
        // A range running off the end of a mapping: part of it was copied, and read back.
        // Safety: a fresh anonymous mapping of two pages, the second unmapped again.
        let page = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            libc::munmap((p as *mut u8).add(4096).cast(), 4096);
            p as u64
        };
        let mut d = [0u8; 16];
        assert!(!read_own_memory(page + 4096 - 8, &mut d));
        let mut c = [0u8; 3];
        assert!(read_own_memory(src[2..].as_ptr() as u64, &mut c));
        assert_eq!(c, [3, 4, 5]);
    }

    #[test]
    fn the_writable_mapping_holding_sp_is_the_stack() {
        let maps = "7f0000000000-7f0000001000 ---p 00000000 00:00 0 \n7f0000001000-7f0000081000 rw-p 00000000 00:00 0 \n7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]\n";
        assert_eq!(super::stack_mapping(maps, 0x7f0000080000), Some((0x7f0000001000, 0x7f0000081000)));
        assert_eq!(super::stack_mapping(maps, 0x7ffc00020ff8), Some((0x7ffc00000000, 0x7ffc00021000)));
        assert_eq!(super::stack_mapping(maps, 0x7f0000000800), None);
    }

    #[test]
    fn stack_pointers_of_threads_off_cpu() {
        let blocked = "202 0x7f00000010a0 0x80 0x0 0x0 0x0 0x0 0x7f0000080f00 0x7f43ca2c010\n";
        assert_eq!(super::parse_syscall_sp(blocked), Some(0x7f0000080f00));
        assert_eq!(super::parse_syscall_sp("-1 0x7ffc00020ff8 0x7f43ca2c010\n"), Some(0x7ffc00020ff8));
        assert_eq!(super::parse_syscall_sp("running\n"), None);
    }

    #[test]
    fn wait_sites_of_threads_in_a_system_call() {
        use super::{parse_wait_site, WaitSite};
        let blocked = "202 0x7f00000010a0 0x80 0x0 0x0 0x0 0x0 0x7f0000080f00 0x7f43ca2c010\n";
        let site = WaitSite { nr: 202, arg1: 0x7f00000010a0, sp: 0x7f0000080f00, pc: 0x7f43ca2c010 };
        assert_eq!(parse_wait_site(blocked), Some(site));
        // Preempted outside a system call, running, or unreadable: no site.
        assert_eq!(parse_wait_site("-1 0x7ffc00020ff8 0x7f43ca2c010\n"), None);
        assert_eq!(parse_wait_site("running\n"), None);
        assert_eq!(parse_wait_site("202 0x10 0x80 0x0 0x0 0x0\n"), None);
        // A real one: this thread's sleeping helper is in a system call, with its stack there.
        let child = std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(300)));
        std::thread::sleep(std::time::Duration::from_millis(100));
        let mut files = super::StatFiles::default();
        let tid = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .find(|&t| files.wait_site(t).is_some_and(|s| s.nr == libc::SYS_clock_nanosleep as u64));
        assert!(tid.is_some(), "no thread found sleeping in clock_nanosleep");
        child.join().unwrap();
    }

    /// More threads than files kept open: every thread's files are still read (the ones past the
    /// cache opened for each read), the cache keeps its first threads and never grows past its
    /// bound, and a forgotten thread's place goes to another.
    #[test]
    fn stat_files_of_more_threads_than_kept_open() {
        use super::{StatFiles, MAX_STAT_FILES};
        let n = MAX_STAT_FILES + 40;
        let stop = std::sync::Arc::new(std::sync::Barrier::new(n + 1));
        let (tx, rx) = std::sync::mpsc::channel();
        let threads: Vec<_> = (0..n)
            .map(|_| {
                let (stop, tx) = (stop.clone(), tx.clone());
                std::thread::spawn(move || {
                    // Safety: gettid has no preconditions.
                    tx.send(unsafe { libc::syscall(libc::SYS_gettid) } as u32).unwrap();
                    stop.wait();
                })
            })
            .collect();
        let tids: Vec<u32> = (0..n).map(|_| rx.recv().unwrap()).collect();
        let mut files = StatFiles::default();
        for round in 0..2 {
            for &tid in &tids {
                assert!(files.runq_wait_ns(tid).is_some(), "round {round}: schedstat of {tid}");
                assert!(files.runnable(tid).is_some(), "round {round}: stat of {tid}");
            }
            assert_eq!((files.files.len(), files.schedstat.len()), (MAX_STAT_FILES, MAX_STAT_FILES));
            assert!(tids[..MAX_STAT_FILES].iter().all(|t| files.files.contains_key(t)), "the first threads stay");
        }
        files.forget(tids[0]);
        files.runnable(tids[n - 1]).unwrap();
        assert!(files.files.contains_key(&tids[n - 1]) && files.files.len() == MAX_STAT_FILES);
        // Gone threads read as nothing.
        assert_eq!(files.runnable(u32::MAX - 1), None);
        stop.wait();
        threads.into_iter().for_each(|t| t.join().unwrap());
    }
}
