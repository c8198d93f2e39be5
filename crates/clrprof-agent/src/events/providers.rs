//! The providers of the in-process EventPipe session: which providers the session enables (the
//! runtime's, plus those the recorders ask for) and which provider a delivered event came from.
//!
//! `EventPipeEventDelivered` names its provider by an opaque handle (`EVENTPIPE_PROVIDER`, the
//! runtime's provider object, alive as long as the provider). The handle is turned into a known
//! [`Provider`] once by `ICorProfilerInfo12::EventPipeGetProviderInfo` (its name) and cached in a
//! small lock-free table ([`ProviderCache`]), so an event costs a scan of a few words before it is
//! handed to its module ([`delivered`]).
//!
//! To add a provider: a variant of [`Provider`] and its name in `NAMES`, the module's
//! `(name, keywords, level)` in [`requested`], and an arm in [`delivered`]. Keywords of the same
//! provider asked by several modules are OR-ed (the level is the highest asked): a module may add
//! runtime keywords by asking for `Microsoft-Windows-DotNETRuntime` itself.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use clrprof_sys::CallbackResult;

use super::Events;
use crate::context::Context;
use crate::sampler::Sampler;

/// The providers the agent understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Provider {
    /// `Microsoft-Windows-DotNETRuntime` (`super::eventpipe`).
    Runtime = 1,
    /// `Microsoft-Windows-DotNETRuntimePrivate` (`FailFast`, `super::eventpipe`).
    RuntimePrivate = 2,
    /// `System.Threading.Tasks.TplEventSource` (`super::tasks`).
    Tasks = 3,
    /// `Microsoft.AspNetCore.Hosting` (`super::requests`).
    Hosting = 4,
    /// `Microsoft-Extensions-Logging` (`super::requests`).
    Logging = 5,
    /// Any other provider: its events are ignored.
    Other = 255,
}

pub(crate) const RUNTIME: &str = "Microsoft-Windows-DotNETRuntime";
pub(crate) const RUNTIME_PRIVATE: &str = "Microsoft-Windows-DotNETRuntimePrivate";
pub(crate) const TASKS: &str = "System.Threading.Tasks.TplEventSource";

const NAMES: &[(&str, Provider)] = &[
    (RUNTIME, Provider::Runtime),
    (RUNTIME_PRIVATE, Provider::RuntimePrivate),
    (TASKS, Provider::Tasks),
    (super::requests::HOSTING, Provider::Hosting),
    (super::requests::LOGGING, Provider::Logging),
];

impl Provider {
    fn from_u8(v: u8) -> Option<Provider> {
        Some(match v {
            1 => Provider::Runtime,
            2 => Provider::RuntimePrivate,
            3 => Provider::Tasks,
            4 => Provider::Hosting,
            5 => Provider::Logging,
            255 => Provider::Other,
            _ => return None,
        })
    }

    /// The provider of this name (EventPipe compares provider names case-insensitively).
    pub(crate) fn of_name(name: &str) -> Provider {
        NAMES.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map_or(Provider::Other, |&(_, p)| p)
    }
}

/// What a module asks the session to enable on one provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProviderRequest {
    pub(crate) name: &'static str,
    pub(crate) keywords: u64,
    pub(crate) level: u32,
}

/// The providers the recorders other than the runtime's own ask for, for this configuration.
pub(crate) fn requested(s: &Context, runtime_major: u16) -> Vec<ProviderRequest> {
    let mut v = Vec::new();
    v.extend(super::tasks::providers(&s.config, runtime_major));
    v.extend(super::requests::providers(&s.config, runtime_major));
    v
}

/// The requests merged per provider (case-insensitive names): keywords OR-ed, the highest level,
/// in the order of first request.
pub(crate) fn merge(requests: &[ProviderRequest]) -> Vec<ProviderRequest> {
    let mut out: Vec<ProviderRequest> = Vec::new();
    for r in requests {
        match out.iter_mut().find(|o| o.name.eq_ignore_ascii_case(r.name)) {
            Some(o) => {
                o.keywords |= r.keywords;
                o.level = o.level.max(r.level);
            }
            None => out.push(*r),
        }
    }
    out
}

const CACHE_SLOTS: usize = 32;

/// Provider handles already named: lock-free, filled once per provider (a session has a handful).
#[derive(Default)]
pub(crate) struct ProviderCache {
    handles: [AtomicUsize; CACHE_SLOTS],
    kinds: [AtomicU8; CACHE_SLOTS],
}

impl ProviderCache {
    /// The provider of `handle`; `name_of` (the runtime's `EventPipeGetProviderInfo`) is asked
    /// once per handle. A provider whose name cannot be read is `Other` (not cached: asked again).
    pub(crate) fn provider(&self, handle: usize, name_of: impl FnOnce(usize) -> Option<String>) -> Provider {
        if handle == 0 {
            return Provider::Other;
        }
        for i in 0..CACHE_SLOTS {
            match self.handles[i].load(Ordering::Acquire) {
                0 => break,
                h if h == handle => {
                    if let Some(p) = Provider::from_u8(self.kinds[i].load(Ordering::Acquire)) {
                        return p;
                    }
                    break; // being filled by another thread: ask the runtime
                }
                _ => {}
            }
        }
        let Some(name) = name_of(handle) else { return Provider::Other };
        let p = Provider::of_name(&name);
        for i in 0..CACHE_SLOTS {
            match self.handles[i].compare_exchange(0, handle, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    self.kinds[i].store(p as u8, Ordering::Release);
                    break;
                }
                Err(h) if h == handle => break, // another thread cached it
                Err(_) => {}
            }
        }
        p
    }
}

/// One event as delivered by `EventPipeEventDelivered`, its pointers read.
pub(crate) struct Delivered<'a> {
    pub(crate) provider: usize,
    pub(crate) event_id: u32,
    pub(crate) version: u32,
    pub(crate) data: &'a [u8],
    /// The thread's EventSource activity id (the GUID's 16 bytes as in memory, read as a
    /// little-endian `u128`; 0 when none).
    #[allow(dead_code)] // read by the modules that follow activities
    pub(crate) activity: u128,
    #[allow(dead_code)]
    pub(crate) related_activity: u128,
    /// The event's stack when the runtime passed one (in-process sessions mostly do not).
    pub(crate) ips: &'a [usize],
    /// The `ThreadID` of the thread that wrote the event (0 when not given).
    pub(crate) thread: usize,
}

/// Reads a GUID the runtime passes by pointer as a `u128` (0 for a null pointer).
///
/// # Safety
/// `p` is null or points to 16 readable bytes.
pub(crate) unsafe fn guid(p: *const std::ffi::c_void) -> u128 {
    if p.is_null() {
        return 0;
    }
    let mut b = [0u8; 16];
    // Safety: the caller guarantees 16 readable bytes.
    unsafe { std::ptr::copy_nonoverlapping(p as *const u8, b.as_mut_ptr(), 16) };
    u128::from_le_bytes(b)
}

/// Hands an event to the module of its provider.
pub(crate) fn delivered(s: &Context, ev: &Events, sampler: Option<&Sampler>, e: &Delivered) -> CallbackResult {
    let since = std::time::Instant::now();
    let provider = ev.providers.provider(e.provider, |h| s.info.event_pipe_get_provider_info(h).ok());
    match provider {
        Provider::Runtime if super::requests::runtime(s, e) => Ok(()),
        Provider::Runtime | Provider::RuntimePrivate => {
            super::eventpipe::delivered(s, &ev.eventpipe(), sampler, e.event_id, e.version, e.data, e.ips)
        }
        Provider::Tasks if e.event_id == super::flow::EVENT_SET_ACTIVITY_ID => {
            super::flow::set_activity_id(e, since);
            Ok(())
        }
        Provider::Tasks => {
            super::flow::observe(s, e);
            super::tasks::delivered(s, &ev.tasks, e)
        }
        Provider::Hosting => super::requests::delivered(s, e, false),
        Provider::Logging => super::requests::delivered(s, e, true),
        Provider::Other => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_matched_without_case() {
        assert_eq!(Provider::of_name("system.threading.tasks.TplEventSource"), Provider::Tasks);
        assert_eq!(Provider::of_name(RUNTIME), Provider::Runtime);
        assert_eq!(Provider::of_name("Microsoft-Windows-DotNETRuntimeRundown"), Provider::Other);
    }

    #[test]
    fn each_handle_is_named_once() {
        let c = ProviderCache::default();
        let mut asked = 0;
        for _ in 0..3 {
            let p = c.provider(0x1000, |_| {
                asked += 1;
                Some(TASKS.to_string())
            });
            assert_eq!(p, Provider::Tasks);
        }
        assert_eq!(asked, 1);
        assert_eq!(c.provider(0x2000, |_| Some(RUNTIME.into())), Provider::Runtime);
        assert_eq!(c.provider(0x1000, |_| panic!("cached")), Provider::Tasks);
        assert_eq!(c.provider(0x3000, |_| None), Provider::Other, "a name that cannot be read");
        assert_eq!(c.provider(0x3000, |_| Some(RUNTIME_PRIVATE.into())), Provider::RuntimePrivate);
        assert_eq!(c.provider(0, |_| panic!("null handle")), Provider::Other);
    }

    #[test]
    fn requests_of_one_provider_are_merged() {
        let r = |name, keywords, level| ProviderRequest { name, keywords, level };
        let m = merge(&[r(RUNTIME, 1, 4), r(TASKS, 0x80, 4), r("microsoft-windows-dotnetruntime", 0x4000, 5)]);
        assert_eq!(m, vec![r(RUNTIME, 0x4001, 5), r(TASKS, 0x80, 4)]);
    }
}
