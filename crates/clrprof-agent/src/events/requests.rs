//! Requests, waits and the thread pool (`CLRPROF_ASYNC=1`): ASP.NET Core's requests with their
//! endpoint and status, threads' waits on wait handles with the waiting stack, and the thread
//! pool's workers.
//!
//! Providers and events (payloads as the runtime writes them, little-endian, strings UTF-16z):
//! - `Microsoft.AspNetCore.Hosting` (ASP.NET Core's `HostingEventSource`; its events have no
//!   keyword, so any keyword enables them): `RequestStart` id 3 {method, path} and `RequestStop`
//!   id 4 {} (older versions repeat method and path), Start/Stop opcodes: with the activity
//!   tracker on (`TasksFlowActivityIds` of `TplEventSource`, asked here too) each request gets its
//!   own EventSource activity id, delivered with both events, which pairs them even when they
//!   come from different threads.
//! - `Microsoft-Extensions-Logging` keyword `FormattedMessage` (0x4), level Informational:
//!   `FormattedMessage` {i32 Level, i32 FactoryID, LoggerName, i32 EventId, EventName,
//!   FormattedMessage} (EventPipe gives this provider's events ids of its own, 156 on .NET 10:
//!   lines are told by their logger name and text, whatever the id). Two lines are kept: `Executing endpoint '<display name>'` of
//!   `Microsoft.AspNetCore.Routing.EndpointMiddleware` (the route: a minimal API's display name
//!   is `HTTP: GET /items/{id:int}`; the hosting events give the path only) and `Request finished
//!   … - <status> …` of `Microsoft.AspNetCore.Hosting.Diagnostics`. They carry the activity id of
//!   the request's logging scope, nested in the request's (the model finds the request by the
//!   id's path). The app must keep the EventSource logger (a default host has it); every other
//!   line is dropped after its logger name is compared.
//! - `Microsoft-Windows-DotNETRuntime`: keyword `WaitHandle` (0x40000000000, verbose, .NET 9 and
//!   later) `WaitHandleWaitStart` id 301 {u8 WaitSource, ptr AssociatedObjectID, u16
//!   ClrInstanceID} and `WaitHandleWaitStop` id 302 {u16 ClrInstanceID}; keyword `Threading`
//!   (0x10000) `ThreadPoolWorkerThreadStart` id 50 / `Stop` id 51 {u32 ActiveWorkerThreadCount,
//!   u32 RetiredWorkerThreadCount, u16 ClrInstanceID} and
//!   `ThreadPoolWorkerThreadAdjustmentAdjustment` id 55 {f64 AverageThroughput, u32
//!   NewWorkerThreadCount, u32 Reason, u16 ClrInstanceID}.
//!
//! Every event is delivered synchronously on the thread that wrote it: the payload is parsed and
//! its record written at once (a request, a log line, a wait: none of these is per await). A wait
//! walks the waiting thread's stack (`DoStackSnapshot` of the current thread), as contention does:
//! the thread is about to block anyway.

use clrprof_sys::CallbackResult;
use clrprof_trace::{RequestEndpoint, RequestStarted, RequestStopped, ThreadPoolWorkers, WaitEnded, WaitStarted};

use super::payload::Payload;
use super::providers::{Delivered, ProviderRequest, RUNTIME, TASKS};
use crate::config::{AllocMode, Config};
use crate::context::Context;
use crate::os::os_tid;

pub(crate) const HOSTING: &str = "Microsoft.AspNetCore.Hosting";
pub(crate) const LOGGING: &str = "Microsoft-Extensions-Logging";

const LEVEL_INFORMATIONAL: u32 = 4;
const LEVEL_VERBOSE: u32 = 5;
/// Any keyword: the hosting events have none.
const KEYWORD_HOSTING: u64 = 0x1;
const KEYWORD_LOGGING_FORMATTED: u64 = 0x4;
const KEYWORD_FLOW_ACTIVITY_IDS: u64 = 0x80;
const KEYWORD_WAIT_HANDLE: u64 = 0x400_0000_0000;
const KEYWORD_THREADING: u64 = 0x1_0000;

const EVENT_REQUEST_START: u32 = 3;
const EVENT_REQUEST_STOP: u32 = 4;
/// `FormattedMessage`'s id in the manifest; EventPipe numbers this provider's events itself (its
/// events are self-describing), so lines are told by their payload, not by id.
#[cfg(test)]
const EVENT_FORMATTED_MESSAGE: u32 = 1;
const EVENT_WAIT_START: u32 = 301;
const EVENT_WAIT_STOP: u32 = 302;
const EVENT_WORKER_START: u32 = 50;
const EVENT_WORKER_STOP: u32 = 51;
const EVENT_ADJUSTMENT: u32 = 55;
/// `GCAllocationTick`: verbose, so it arrives once this module raises the runtime provider's
/// level; dropped here unless the allocation recorder asked for it.
const EVENT_ALLOCATION_TICK: u32 = 10;

const ENDPOINT_LOGGER: &str = "Microsoft.AspNetCore.Routing.EndpointMiddleware";
const FINISHED_LOGGER: &str = "Microsoft.AspNetCore.Hosting.Diagnostics";

/// Whether the allocation recorder takes `GCAllocationTick` (sampled allocations before .NET 10);
/// set when the session starts (one session per process).
static TAKES_ALLOCATION_TICKS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The providers this module needs for `config` (nothing without `CLRPROF_ASYNC`).
pub(crate) fn providers(config: &Config, runtime_major: u16) -> Vec<ProviderRequest> {
    TAKES_ALLOCATION_TICKS
        .store(config.alloc == AllocMode::Sampled && runtime_major < 10, std::sync::atomic::Ordering::Relaxed);
    if !config.asynchrony {
        return Vec::new();
    }
    let mut runtime = KEYWORD_THREADING;
    let mut level = LEVEL_INFORMATIONAL;
    if runtime_major >= 9 {
        runtime |= KEYWORD_WAIT_HANDLE;
        level = LEVEL_VERBOSE;
    }
    vec![
        ProviderRequest { name: HOSTING, keywords: KEYWORD_HOSTING, level: LEVEL_INFORMATIONAL },
        ProviderRequest { name: LOGGING, keywords: KEYWORD_LOGGING_FORMATTED, level: LEVEL_INFORMATIONAL },
        ProviderRequest { name: TASKS, keywords: KEYWORD_FLOW_ACTIVITY_IDS, level: LEVEL_INFORMATIONAL },
        ProviderRequest { name: RUNTIME, keywords: runtime, level },
    ]
}

/// Whether UTF-16 code units spell the ASCII `s`, without decoding.
fn is(units: &[u8], s: &str) -> bool {
    units.len() == 2 * s.len() && units.chunks_exact(2).zip(s.bytes()).all(|(c, b)| c[0] == b && c[1] == 0)
}

/// A hosting event's record.
pub(crate) fn hosting(e: &Delivered, ts: u64, tid: u32) -> Option<clrprof_trace::Record> {
    let activity = e.activity.to_le_bytes().to_vec();
    let mut p = Payload::new(e.data);
    match e.event_id {
        EVENT_REQUEST_START => {
            let method = p.utf16z()?;
            let path = p.utf16z()?;
            Some(RequestStarted { ts, os_tid: tid, activity, method, path }.into())
        }
        EVENT_REQUEST_STOP => Some(RequestStopped { ts, os_tid: tid, activity }.into()),
        _ => None,
    }
}

/// A log line's record when it is one of the two kept.
pub(crate) fn log_line(e: &Delivered, ts: u64, tid: u32) -> Option<clrprof_trace::Record> {
    let mut p = Payload::new(e.data);
    let _level = p.u32()?;
    let _factory = p.u32()?;
    let logger = p.units()?;
    let endpoint = is(logger, ENDPOINT_LOGGER);
    if !endpoint && !is(logger, FINISHED_LOGGER) {
        return None;
    }
    let _event_id = p.u32()?;
    let _event_name = p.units()?;
    let message = p.utf16z()?;
    let activity = e.activity.to_le_bytes().to_vec();
    if endpoint {
        let name = message.strip_prefix("Executing endpoint '")?.strip_suffix('\'')?;
        return Some(RequestEndpoint { ts, os_tid: tid, activity, endpoint: name.to_string(), status: 0 }.into());
    }
    let status = finished_status(&message)?;
    Some(RequestEndpoint { ts, os_tid: tid, activity, endpoint: String::new(), status }.into())
}

/// The status code of ASP.NET Core's `Request finished {Protocol} {Method} {Url} - {StatusCode}
/// {ContentLength} {ContentType} {Elapsed}ms` (the URL holds no space).
fn finished_status(message: &str) -> Option<u32> {
    let rest = message.strip_prefix("Request finished ")?;
    let mut words = rest.split(' ');
    words.find(|w| *w == "-")?;
    words.next()?.parse().ok()
}

/// A runtime event of this module's: its record, or `Some(None)` for an event this module drops;
/// `None` for the events of other modules.
fn runtime_record(
    e: &Delivered,
    ts: u64,
    tid: u32,
    takes_allocation_ticks: bool,
) -> Option<Option<clrprof_trace::Record>> {
    let mut p = Payload::new(e.data);
    Some(match e.event_id {
        EVENT_WAIT_START => {
            let source = p.u8().unwrap_or(0);
            let activity = if e.activity == 0 { Vec::new() } else { e.activity.to_le_bytes().to_vec() };
            Some(WaitStarted { ts, os_tid: tid, source, stack: Vec::new(), activity }.into())
        }
        EVENT_WAIT_STOP => Some(WaitEnded { ts, os_tid: tid }.into()),
        EVENT_WORKER_START | EVENT_WORKER_STOP => {
            let kind = (e.event_id == EVENT_WORKER_STOP) as u8;
            let (count, retired) = (p.u32(), p.u32());
            count.map(|count| {
                ThreadPoolWorkers { ts, os_tid: tid, kind, count, retired: retired.unwrap_or(0), reason: 0 }.into()
            })
        }
        EVENT_ADJUSTMENT => {
            let _throughput = p.take(8);
            let (count, reason) = (p.u32(), p.u32());
            count
                .zip(reason)
                .map(|(count, reason)| ThreadPoolWorkers { ts, os_tid: tid, kind: 2, count, retired: 0, reason }.into())
        }
        EVENT_ALLOCATION_TICK if !takes_allocation_ticks => None,
        _ => return None,
    })
}

/// An event of the hosting or logging provider.
pub(crate) fn delivered(s: &Context, e: &Delivered, logging: bool) -> CallbackResult {
    let ts = s.now();
    let r = if logging { log_line(e, ts, os_tid()) } else { hosting(e, ts, os_tid()) };
    match &r {
        Some(clrprof_trace::Record::RequestStarted(_)) => s.triggers.request_started(ts, e.activity),
        Some(clrprof_trace::Record::RequestStopped(_)) => s.triggers.request_stopped(ts, e.activity),
        _ => {}
    }
    if let Some(r) = r {
        s.emit(r);
    }
    Ok(())
}

/// A runtime event: `true` when this module took it (the runtime's own recorder then skips it).
pub(crate) fn runtime(s: &Context, e: &Delivered) -> bool {
    if !s.config.asynchrony && e.event_id != EVENT_ALLOCATION_TICK {
        return false;
    }
    let ticks = TAKES_ALLOCATION_TICKS.load(std::sync::atomic::Ordering::Relaxed);
    let Some(r) = runtime_record(e, s.now(), os_tid(), ticks) else { return false };
    match r {
        Some(clrprof_trace::Record::WaitStarted(mut w)) => {
            // The thread is about to block: walk its stack now.
            w.stack = super::stack::current_stack(s);
            s.emit(w);
        }
        Some(r) => s.emit(r),
        None => {}
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::events::payload::utf16z_bytes as utf16z;

    fn event(id: u32, data: &[u8], activity: u128) -> Delivered<'_> {
        Delivered { provider: 1, event_id: id, version: 0, data, activity, related_activity: 0, ips: &[], thread: 0 }
    }

    fn log_payload(logger: &str, message: &str) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend_from_slice(&2u32.to_le_bytes());
        d.extend_from_slice(&1u32.to_le_bytes());
        d.extend(utf16z(logger));
        d.extend_from_slice(&0u32.to_le_bytes());
        d.extend(utf16z("SomeEvent"));
        d.extend(utf16z(message));
        d
    }

    #[test]
    fn parses_the_hosting_events() {
        let mut d = utf16z("GET");
        d.extend(utf16z("/items/4"));
        match hosting(&event(EVENT_REQUEST_START, &d, 7), 5, 9) {
            Some(clrprof_trace::Record::RequestStarted(r)) => {
                assert_eq!((r.method.as_str(), r.path.as_str(), r.os_tid), ("GET", "/items/4", 9));
                assert_eq!(clrprof_trace::activity_id(&r.activity), 7);
            }
            other => panic!("{other:?}"),
        }
        assert!(hosting(&event(EVENT_REQUEST_START, &d[..7], 7), 5, 9).is_none(), "cut short");
        assert!(matches!(
            hosting(&event(EVENT_REQUEST_STOP, &[], 7), 6, 9),
            Some(clrprof_trace::Record::RequestStopped(_))
        ));
    }

    #[test]
    fn keeps_the_endpoint_and_status_lines_only() {
        let d = log_payload(ENDPOINT_LOGGER, "Executing endpoint 'HTTP: GET /items/{id:int} => Item'");
        match log_line(&event(EVENT_FORMATTED_MESSAGE, &d, 3), 1, 2) {
            Some(clrprof_trace::Record::RequestEndpoint(r)) => {
                assert_eq!((r.endpoint.as_str(), r.status), ("HTTP: GET /items/{id:int} => Item", 0))
            }
            other => panic!("{other:?}"),
        }
        let d = log_payload(
            FINISHED_LOGGER,
            "Request finished HTTP/1.1 GET http://127.0.0.1:40411/items/4 - 404 0 - 3.1200ms",
        );
        match log_line(&event(EVENT_FORMATTED_MESSAGE, &d, 3), 1, 2) {
            Some(clrprof_trace::Record::RequestEndpoint(r)) => assert_eq!((r.endpoint.as_str(), r.status), ("", 404)),
            other => panic!("{other:?}"),
        }
        let d = log_payload(FINISHED_LOGGER, "Request starting HTTP/1.1 GET http://x/ - - -");
        assert!(log_line(&event(EVENT_FORMATTED_MESSAGE, &d, 3), 1, 2).is_none());
        let d = log_payload("Microsoft.EntityFrameworkCore.Database.Command", "Executed DbCommand (1ms)");
        assert!(log_line(&event(EVENT_FORMATTED_MESSAGE, &d, 3), 1, 2).is_none());
    }

    #[test]
    fn parses_the_pool_and_wait_events() {
        let mut d = Vec::new();
        d.extend_from_slice(&12.5f64.to_le_bytes());
        d.extend_from_slice(&9u32.to_le_bytes());
        d.extend_from_slice(&6u32.to_le_bytes());
        d.extend_from_slice(&0u16.to_le_bytes());
        match runtime_record(&event(EVENT_ADJUSTMENT, &d, 0), 1, 2, false) {
            Some(Some(clrprof_trace::Record::ThreadPoolWorkers(t))) => {
                assert_eq!((t.kind, t.count, t.reason), (2, 9, clrprof_trace::pool_reason::STARVATION))
            }
            other => panic!("{other:?}"),
        }
        let mut d = Vec::new();
        d.extend_from_slice(&4u32.to_le_bytes());
        d.extend_from_slice(&1u32.to_le_bytes());
        match runtime_record(&event(EVENT_WORKER_STOP, &d, 0), 1, 2, false) {
            Some(Some(clrprof_trace::Record::ThreadPoolWorkers(t))) => {
                assert_eq!((t.kind, t.count, t.retired), (1, 4, 1))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            runtime_record(&event(EVENT_WAIT_START, &[1, 0, 0], 0), 1, 2, false),
            Some(Some(clrprof_trace::Record::WaitStarted(w))) if w.source == 1 && w.activity.is_empty()
        ));
        // The wait's own activity id (the thread's at the wait) is kept: it names the request.
        assert!(matches!(
            runtime_record(&event(EVENT_WAIT_START, &[0, 0, 0], 7), 1, 2, false),
            Some(Some(clrprof_trace::Record::WaitStarted(w))) if clrprof_trace::activity_id(&w.activity) == 7
        ));
        assert!(matches!(runtime_record(&event(EVENT_ALLOCATION_TICK, &[], 0), 1, 2, false), Some(None)));
        assert!(runtime_record(&event(EVENT_ALLOCATION_TICK, &[], 0), 1, 2, true).is_none());
        assert!(runtime_record(&event(1, &[], 0), 1, 2, false).is_none(), "GC start is the runtime recorder's");
    }
}
