//! OpenTelemetry profiles (OTLP, the `v1development` profiles signal): an
//! `ExportProfilesServiceRequest` in binary protobuf, the body `collect --otlp` POSTs to
//! `/v1development/profiles` and what `export -f otlp` writes to a file. Pinned to one version of
//! the specification ([`PROTO_COMMIT`]); the messages are in [`proto`].
//!
//! One resource (the process: `service.name`, `process.pid`, `process.command_line`, the host and
//! the run's labels), one scope
//! (`clrprof`), and one profile per sample type the trace holds — the pinned version carries one
//! sample type per profile — all sharing one dictionary. The samples are pprof's (the same rows,
//! see [`crate::pprof`]): one per (thread, stack) with `thread.id`/`thread.name` attributes, plus
//! exception stacks (`exception.type`) and lock-contention stacks. Locations are leaf first, one
//! per frame, with the source line where the profile was built with lines. Traces carry no
//! OpenTelemetry trace or span ids (the agent sees EventSource activity ids only), so no sample
//! has a link and the link table holds only its zero entry.

pub mod proto;

use std::collections::HashMap;
use std::io::Write;

use clrprof_model::{FrameId, Profile, StackId};
use clrprof_query::select::Threads;
use prost::Message;

use super::pprof::{self, Label};
use super::{ExportInput, Exporter, Result};
use proto::{AnyValue, KeyValue, Value};

/// The commit of github.com/open-telemetry/opentelemetry-proto whose
/// `opentelemetry/proto/profiles/v1development/profiles.proto` the messages follow.
pub const PROTO_COMMIT: &str = "0017787b2250737abc8d74ca4fb62210114b7ea9";

/// The OTLP/HTTP path of the profiles signal in the pinned version.
pub const HTTP_PATH: &str = "/v1development/profiles";

/// The content type of an OTLP/HTTP binary protobuf body.
pub const CONTENT_TYPE: &str = "application/x-protobuf";

pub struct Otlp;

impl Exporter for Otlp {
    fn extension(&self) -> &'static str {
        "otlp.pb"
    }

    fn stacks_needed(&self) -> clrprof_query::weighted_stacks::Needed {
        clrprof_query::weighted_stacks::Needed::None
    }

    fn write(&self, inp: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        out.write_all(&encode(inp.profile, &inp.threads).0)?;
        Ok(())
    }
}

/// The request of `p` for a thread selection, encoded, and its number of samples (over all
/// profiles).
pub fn encode(p: &Profile, threads: &Threads) -> (Vec<u8>, usize) {
    let r = request(p, threads);
    let n = r
        .resource_profiles
        .iter()
        .flat_map(|r| &r.scope_profiles)
        .flat_map(|s| &s.profiles)
        .map(|p| p.sample.len())
        .sum();
    (r.encode_to_vec(), n)
}

/// The tables being built; index 0 of each is the zero value (the specification requires it of
/// mappings, links and strings; it is kept for the others so that 0 reads as unset everywhere).
struct Dict<'a> {
    p: &'a Profile,
    d: proto::ProfilesDictionary,
    strings: HashMap<String, i32>,
    attrs: HashMap<(String, String), i32>,
    locations: HashMap<FrameId, i32>,
    functions: HashMap<(String, String, String), i32>,
    mappings: HashMap<String, i32>,
}

impl<'a> Dict<'a> {
    fn new(p: &'a Profile) -> Dict<'a> {
        let d = proto::ProfilesDictionary {
            mapping_table: vec![Default::default()],
            location_table: vec![Default::default()],
            function_table: vec![Default::default()],
            link_table: vec![Default::default()],
            string_table: vec![String::new()],
            attribute_table: vec![Default::default()],
            attribute_units: Vec::new(),
        };
        let strings = HashMap::from([(String::new(), 0)]);
        Dict {
            p,
            d,
            strings,
            attrs: HashMap::new(),
            locations: HashMap::new(),
            functions: HashMap::new(),
            mappings: HashMap::new(),
        }
    }

    fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.d.string_table.len() as i32;
        self.d.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn attr(&mut self, key: &str, v: &Label) -> i32 {
        let k = match v {
            Label::Str(s) => (key.to_string(), format!("s{s}")),
            Label::Num(n) => (key.to_string(), format!("i{n}")),
        };
        if let Some(&i) = self.attrs.get(&k) {
            return i;
        }
        let i = self.d.attribute_table.len() as i32;
        self.d.attribute_table.push(key_value(key, v));
        self.attrs.insert(k, i);
        i
    }

    /// The mapping of a module file name: a native library's first executable mapping (range,
    /// offset), a managed module's path and base address, else the name alone.
    fn mapping(&mut self, module: &str) -> i32 {
        if module.is_empty() {
            return 0;
        }
        if let Some(&i) = self.mappings.get(module) {
            return i;
        }
        let p = self.p;
        let native = p.sampling.mappings.iter().find(|m| m.path.rsplit('/').next().unwrap_or(&m.path) == module);
        let managed = p.modules.iter().find(|m| m.file_name() == module);
        let mut m = proto::Mapping::default();
        let file = if let Some(n) = native {
            m.memory_start = n.start;
            m.memory_limit = n.end;
            m.file_offset = n.file_offset;
            n.path.as_str()
        } else if let Some(md) = managed {
            m.memory_start = md.base_address;
            md.path.as_str()
        } else {
            module
        };
        m.filename_strindex = self.string(file);
        let i = self.d.mapping_table.len() as i32;
        self.d.mapping_table.push(m);
        self.mappings.insert(module.to_string(), i);
        i
    }

    /// The function of a frame: the frames of one method at different lines share it.
    fn function(&mut self, f: FrameId) -> i32 {
        let fr = &self.p.costs.stacks.frames[f.0 as usize];
        let file = fr.line.as_ref().map_or(fr.module.as_str(), |l| l.file.as_str());
        let key = (fr.name.clone(), fr.signature.clone(), file.to_string());
        if let Some(&i) = self.functions.get(&key) {
            return i;
        }
        let system = if fr.signature.is_empty() { fr.name.clone() } else { format!("{} {}", fr.name, fr.signature) };
        let func = proto::Function {
            name_strindex: self.string(&key.0),
            system_name_strindex: self.string(&system),
            filename_strindex: self.string(&key.2),
            start_line: 0,
        };
        let i = self.d.function_table.len() as i32;
        self.d.function_table.push(func);
        self.functions.insert(key, i);
        i
    }

    fn location(&mut self, f: FrameId) -> i32 {
        if let Some(&i) = self.locations.get(&f) {
            return i;
        }
        let fr = &self.p.costs.stacks.frames[f.0 as usize];
        let (module, line) = (fr.module.clone(), fr.line.as_ref().map_or(0, |l| l.line as i64));
        let loc = proto::Location {
            mapping_index: self.mapping(&module),
            address: self.p.sampling.addresses.get(&f).copied().unwrap_or(0),
            line: vec![proto::Line { function_index: self.function(f), line, column: 0 }],
            is_folded: false,
            attribute_indices: Vec::new(),
        };
        let i = self.d.location_table.len() as i32;
        self.d.location_table.push(loc);
        self.locations.insert(f, i);
        i
    }
}

fn key_value(key: &str, v: &Label) -> KeyValue {
    let value = match v {
        Label::Str(s) => Value::String(s.clone()),
        Label::Num(n) => Value::Int(*n as i64),
    };
    KeyValue { key: key.to_string(), value: Some(AnyValue { value: Some(value) }) }
}

/// The semantic-convention name of a pprof label.
fn attribute_key(label: &str) -> &str {
    match label {
        "thread id" => "thread.id",
        "thread name" => "thread.name",
        "exception" => "exception.type",
        other => other,
    }
}

/// The service name of a command line: the managed entry assembly's file stem
/// (`dotnet /app/Shop.dll` → `Shop`), else the executable's file name.
pub fn service_name(command_line: &str) -> String {
    let words: Vec<&str> = command_line.split_whitespace().collect();
    let pick = words.iter().find(|w| w.ends_with(".dll")).or(words.first()).copied().unwrap_or("");
    let file = pick.rsplit('/').next().unwrap_or(pick);
    let name = file.strip_suffix(".dll").unwrap_or(file);
    if name.is_empty() {
        "clrprof".to_string()
    } else {
        name.to_string()
    }
}

/// A 16-byte id that is the same for the same trace and sample type (FNV-1a over both), never
/// all zero.
fn profile_id(p: &Profile, kind: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    for seed in [0xcbf2_9ce4_8422_2325u64, 0x6c62_272e_07bb_0142] {
        let mut h = seed;
        let bytes = p.process.pid.to_le_bytes().into_iter().chain(p.process.start_unix_ns.to_le_bytes());
        for b in bytes.chain(kind.bytes()) {
            h ^= b as u64;
            h = h.wrapping_mul(0x100_0000_01b3);
        }
        out.extend_from_slice(&h.to_be_bytes());
    }
    if out.iter().all(|&b| b == 0) {
        out[15] = 1;
    }
    out
}

/// The request of `p` for a thread selection.
pub fn request(p: &Profile, threads: &Threads) -> proto::ExportProfilesServiceRequest {
    let pprof::Rows { types, rows } = pprof::rows(p, threads, None);
    let mut dict = Dict::new(p);
    let st = &p.costs.stacks;
    // Every row's attributes and locations (leaf first), interned once.
    let attrs: Vec<Vec<i32>> =
        rows.iter().map(|r| r.labels.iter().map(|(k, v)| dict.attr(attribute_key(k), v)).collect()).collect();
    let mut stack_locations: HashMap<StackId, Vec<i32>> = HashMap::new();
    for r in &rows {
        if let std::collections::hash_map::Entry::Vacant(e) = stack_locations.entry(r.stack) {
            e.insert(st.frames_of(r.stack).iter().rev().map(|f| dict.location(*f)).collect());
        }
    }
    let (from, to) = p.span();
    let mut profiles = Vec::new();
    for (k, (name, unit)) in types.iter().enumerate() {
        let value_type = proto::ValueType {
            type_strindex: dict.string(name),
            unit_strindex: dict.string(unit),
            aggregation_temporality: proto::AGGREGATION_TEMPORALITY_DELTA,
        };
        let period = match *name {
            "cpu" if p.sampling.cpu_rate_hz > 0 => 1_000_000_000 / p.sampling.cpu_rate_hz as i64,
            "wall" if p.sampling.wall_rate_hz > 0 => 1_000_000_000 / p.sampling.wall_rate_hz as i64,
            _ => 1,
        };
        let mut prof = proto::Profile {
            sample_type: Some(value_type.clone()),
            period_type: Some(value_type),
            period,
            time_nanos: p.process.start_unix_ns + from,
            duration_nanos: to.saturating_sub(from),
            profile_id: profile_id(p, name),
            ..Default::default()
        };
        // A stack's slice of `location_indices`, shared by the samples of the stack.
        let mut slices: HashMap<StackId, (i32, i32)> = HashMap::new();
        for (r, a) in rows.iter().zip(&attrs) {
            let v = r.values[k];
            if v == 0 {
                continue;
            }
            let (start, len) = *slices.entry(r.stack).or_insert_with(|| {
                let locs = &stack_locations[&r.stack];
                let start = prof.location_indices.len() as i32;
                prof.location_indices.extend_from_slice(locs);
                (start, locs.len() as i32)
            });
            prof.sample.push(proto::Sample {
                locations_start_index: start,
                locations_length: len,
                values: vec![v],
                attribute_indices: a.clone(),
                link_index: 0,
                timestamps_unix_nano: Vec::new(),
            });
        }
        profiles.push(prof);
    }
    let text = |k: &str, v: String| KeyValue { key: k.into(), value: Some(AnyValue { value: Some(Value::String(v)) }) };
    let pr = &p.process;
    let service = if pr.service.is_empty() { service_name(&pr.command_line) } else { pr.service.clone() };
    let mut resource = vec![
        text("service.name", service),
        KeyValue { key: "process.pid".into(), value: Some(AnyValue { value: Some(Value::Int(pr.pid as i64)) }) },
    ];
    if !pr.command_line.is_empty() {
        resource.push(text("process.command_line", pr.command_line.clone()));
    }
    if !pr.runtime_version.is_empty() {
        resource.push(text("process.runtime.name", ".NET".into()));
        resource.push(text("process.runtime.version", pr.runtime_version.clone()));
    }
    if !pr.host.is_empty() {
        resource.push(text("host.name", pr.host.clone()));
    }
    // The run's own labels (`CLRPROF_LABELS`), as given; a label never repeats a key above.
    for (k, v) in &pr.labels {
        if !resource.iter().any(|a| &a.key == k) {
            resource.push(text(k, v.clone()));
        }
    }
    proto::ExportProfilesServiceRequest {
        resource_profiles: vec![proto::ResourceProfiles {
            resource: Some(proto::Resource { attributes: resource, dropped_attributes_count: 0 }),
            scope_profiles: vec![proto::ScopeProfiles {
                scope: Some(proto::InstrumentationScope {
                    name: "clrprof".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
        dictionary: Some(dict.d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_names() {
        assert_eq!(service_name("dotnet /app/bin/Shop.Web.dll --port 80"), "Shop.Web");
        assert_eq!(service_name("/usr/bin/myapp -x"), "myapp");
        assert_eq!(service_name(""), "clrprof");
    }
}
