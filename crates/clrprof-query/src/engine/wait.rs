//! Functions that wait rather than work (blocked, sleeping, polling): the viewer greys them, as
//! VsPerfView greyed its wait functions as false positives. Matched on a function's display name.

/// Frames that wait rather than work (blocked, sleeping, polling), greyed in the viewer. Matched
/// on the function's display name: a managed prefix, or the symbol after `module!` for native
/// frames.
pub const WAIT_FUNCTIONS: &[&str] = &[
    "System.Threading.Thread.Sleep",
    "System.Threading.Thread.SleepInternal",
    "System.Threading.Thread.Join",
    "System.Threading.Monitor.Wait",
    "System.Threading.Monitor.Enter",
    "System.Threading.Monitor.ReliableEnter",
    "System.Threading.Monitor.TryEnter",
    "System.Threading.WaitHandle.Wait",
    "System.Threading.WaitHandle.WaitOne",
    "System.Threading.WaitHandle.WaitAny",
    "System.Threading.WaitHandle.WaitAll",
    "System.Threading.WaitHandle.WaitMultiple",
    "System.Threading.WaitHandle.WaitOneNoCheck",
    "System.Threading.WaitHandle.WaitOneCore",
    "System.Threading.ManualResetEventSlim.Wait",
    "System.Threading.SemaphoreSlim.Wait",
    "System.Threading.SemaphoreSlim.WaitUntilCountOrTimeout",
    "System.Threading.SpinWait.SpinOnce",
    "System.Threading.LowLevelLifoSemaphore.Wait",
    "System.Threading.LowLevelLifoSemaphore.WaitForSignal",
    "System.Threading.LowLevelMonitor.Wait",
    "System.Threading.LowLevelSpinWaiter.Wait",
    "System.Threading.PortableThreadPool.GateThread.GateThreadStart",
    "System.Threading.Tasks.Task.Wait",
    "System.Threading.Tasks.Task.InternalWait",
    "System.Threading.Tasks.Task.SpinThenBlockingWait",
    "System.Threading.Tasks.Task.WaitAll",
    "System.Threading.Tasks.Task.WaitAny",
    "System.Runtime.CompilerServices.TaskAwaiter.GetResult",
    "System.Net.Sockets.Socket.Receive",
    "System.Net.Sockets.Socket.Accept",
    "System.Net.Sockets.Socket.Poll",
    "System.Net.Sockets.Socket.Select",
    "System.Net.Sockets.SocketAsyncEngine.EventLoop",
    "System.Console.ReadLine",
    "Interop+Sys.WaitForSocketEvents",
    "Interop+Sys.Read",
    "Interop+Sys.Poll",
    "Interop+Sys.LowLevelMonitor_Wait",
    "Interop+Sys.LowLevelMonitor_TimedWait",
];

/// Native symbols that block (libc and the kernel entry points).
pub const WAIT_SYMBOLS: &[&str] = &[
    "futex",
    "__futex_abstimed_wait_common",
    "__futex_abstimed_wait_common64",
    "futex_wait",
    "syscall",
    "pthread_cond_wait",
    "pthread_cond_timedwait",
    "pthread_cond_clockwait",
    "__pthread_cond_wait",
    "__pthread_cond_timedwait",
    "pthread_join",
    "pthread_mutex_lock",
    "__lll_lock_wait",
    "sem_wait",
    "sem_timedwait",
    "epoll_wait",
    "epoll_pwait",
    "poll",
    "ppoll",
    "__poll",
    "select",
    "pselect",
    "nanosleep",
    "clock_nanosleep",
    "__clock_nanosleep",
    "usleep",
    "sleep",
    "read",
    "recv",
    "recvfrom",
    "recvmsg",
    "accept",
    "accept4",
    "waitpid",
    "wait4",
    "sigtimedwait",
];

/// True when a function (display name) waits rather than works.
pub fn is_wait(name: &str) -> bool {
    if let Some((_, sym)) = name.split_once('!') {
        let sym = sym.split('(').next().unwrap_or(sym).trim();
        return WAIT_SYMBOLS.contains(&sym);
    }
    // Managed names: `Type.Method`, overloads `Type.Method(params)`, generics `Method<T>`.
    let base = name.split(['(', '<']).next().unwrap_or(name);
    WAIT_FUNCTIONS.iter().any(|w| base == *w || base.strip_prefix(w).is_some_and(|r| r.starts_with('.')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_functions_are_known() {
        assert!(is_wait("System.Threading.Thread.Sleep"));
        assert!(is_wait("System.Threading.Monitor.Wait(object, int)"));
        assert!(is_wait("libc.so.6!__futex_abstimed_wait_common"));
        assert!(!is_wait("System.Threading.Thread.Start"));
        assert!(!is_wait("libc.so.6!memcpy"));
    }
}
