//! The independent reader of OTLP profiles: Debian's `protoc --decode` on the schema written from
//! the specification (testdata/otlp, the version the export is pinned to), its text output parsed
//! into a tree, and the sums the tests compare with `clrprof report`.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

/// A decoded message: its fields in order (scalars as protoc prints them, strings unquoted).
#[derive(Debug, Default)]
pub struct Msg {
    pub fields: Vec<(String, Val)>,
}

#[derive(Debug)]
pub enum Val {
    Scalar(String),
    Msg(Msg),
}

impl Msg {
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Msg> + 'a {
        self.fields.iter().filter(move |(k, _)| k == name).filter_map(|(_, v)| match v {
            Val::Msg(m) => Some(m),
            Val::Scalar(_) => None,
        })
    }
    pub fn msg(&self, name: &str) -> Option<&Msg> {
        self.fields.iter().find_map(|(k, v)| match v {
            Val::Msg(m) if k == name => Some(m),
            _ => None,
        })
    }
    pub fn scalars<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.fields.iter().filter(move |(k, _)| k == name).filter_map(|(_, v)| match v {
            Val::Scalar(s) => Some(s.as_str()),
            Val::Msg(_) => None,
        })
    }
    pub fn int(&self, name: &str) -> i64 {
        self.scalars(name).next().map_or(0, |s| s.parse().unwrap_or_else(|_| panic!("{name}: {s}")))
    }
}

/// Decodes an `ExportProfilesServiceRequest` with protoc; panics with protoc's message if the
/// bytes do not parse.
pub fn decode(body: &[u8]) -> Msg {
    let schema = super::repo_root().join("testdata/otlp");
    let mut child = Command::new("protoc")
        .arg(format!("-I{}", schema.display()))
        .arg("--decode=opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest")
        .arg("opentelemetry/proto/collector/profiles/v1development/profiles_service.proto")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("`protoc` is needed to check OTLP exports: run scripts/bootstrap (it installs protobuf-compiler)");
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "protoc --decode failed: {}", String::from_utf8_lossy(&out.stderr));
    parse(&String::from_utf8_lossy(&out.stdout))
}

/// protoc's text format: `name {` … `}` blocks and `name: value` lines.
fn parse(text: &str) -> Msg {
    let mut stack: Vec<(String, Msg)> = vec![(String::new(), Msg::default())];
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(name) = line.strip_suffix(" {") {
            stack.push((name.to_string(), Msg::default()));
        } else if line == "}" {
            let (name, m) = stack.pop().unwrap();
            stack.last_mut().unwrap().1.fields.push((name, Val::Msg(m)));
        } else {
            let (k, v) = line.split_once(": ").unwrap_or_else(|| panic!("protoc line {line:?}"));
            let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(v);
            stack.last_mut().unwrap().1.fields.push((k.to_string(), Val::Scalar(unescape(v))));
        }
    }
    assert_eq!(stack.len(), 1, "unbalanced protoc output");
    stack.pop().unwrap().1
}

/// protoc's C escapes of non-ASCII bytes (`\342\200\224`) back into UTF-8.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push(u8::from_str_radix(&s[i + 1..i + 4], 8).unwrap());
            i += 4;
        } else if b[i] == b'\\' && i + 1 < b.len() {
            out.push(b[i + 1]);
            i += 2;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What a request says, summed per sample type.
#[derive(Debug)]
pub struct Summary {
    /// Sample type name → (unit, samples, sum of values).
    pub types: BTreeMap<String, (String, usize, i64)>,
    /// Sample type name → leaf function name → sum of values (self weight).
    pub self_by_function: BTreeMap<String, BTreeMap<String, i64>>,
    /// Sample type name → function name → sum of values of the samples it is on (total weight).
    pub total_by_function: BTreeMap<String, BTreeMap<String, i64>>,
    pub strings: Vec<String>,
    /// Resource attributes (key, value as printed).
    pub resource: Vec<(String, String)>,
    /// Every (attribute key, value) the samples carry.
    pub sample_attributes: Vec<(String, String)>,
    /// (function name, file, line) of every location with a line.
    pub lines: Vec<(String, String, i64)>,
    pub link_table_len: usize,
}

fn any_value(m: &Msg) -> String {
    let v = m.msg("value");
    v.and_then(|v| v.fields.first()).map_or(String::new(), |(_, x)| match x {
        Val::Scalar(s) => s.clone(),
        Val::Msg(_) => "<message>".into(),
    })
}

pub fn summarize(req: &Msg) -> Summary {
    let dict = req.msg("dictionary").expect("a dictionary");
    let strings: Vec<String> = dict.scalars("string_table").map(str::to_string).collect();
    assert_eq!(strings.first().map(String::as_str), Some(""), "string_table[0] is the empty string");
    let functions: Vec<&Msg> = dict.all("function_table").collect();
    let locations: Vec<&Msg> = dict.all("location_table").collect();
    let attrs: Vec<&Msg> = dict.all("attribute_table").collect();
    let func_of_loc = |l: i64| -> (String, String, i64) {
        let loc = locations[l as usize];
        let line = loc.msg("line").expect("a line");
        let f = functions[line.int("function_index") as usize];
        (
            strings[f.int("name_strindex") as usize].clone(),
            strings[f.int("filename_strindex") as usize].clone(),
            line.int("line"),
        )
    };
    let rp: Vec<&Msg> = req.all("resource_profiles").collect();
    assert_eq!(rp.len(), 1, "one resource");
    let resource = rp[0]
        .msg("resource")
        .map(|r| {
            r.all("attributes").map(|a| (a.scalars("key").next().unwrap_or("").to_string(), any_value(a))).collect()
        })
        .unwrap_or_default();
    let mut s = Summary {
        types: BTreeMap::new(),
        self_by_function: BTreeMap::new(),
        total_by_function: BTreeMap::new(),
        strings: strings.clone(),
        resource,
        sample_attributes: Vec::new(),
        lines: (1..locations.len()).map(|i| func_of_loc(i as i64)).filter(|l| l.2 > 0).collect(),
        link_table_len: dict.all("link_table").count(),
    };
    for sp in rp[0].all("scope_profiles") {
        for p in sp.all("profiles") {
            let st = p.msg("sample_type").expect("a sample type");
            let name = strings[st.int("type_strindex") as usize].clone();
            let unit = strings[st.int("unit_strindex") as usize].clone();
            let idx: Vec<i64> = p.scalars("location_indices").map(|x| x.parse().unwrap()).collect();
            let (mut n, mut sum) = (0, 0);
            for sample in p.all("sample") {
                let v: i64 = sample.scalars("values").map(|x| x.parse::<i64>().unwrap()).sum();
                n += 1;
                sum += v;
                let (start, len) =
                    (sample.int("locations_start_index") as usize, sample.int("locations_length") as usize);
                let stack: Vec<String> = idx[start..start + len].iter().map(|&l| func_of_loc(l).0).collect();
                if let Some(leaf) = stack.first() {
                    *s.self_by_function.entry(name.clone()).or_default().entry(leaf.clone()).or_default() += v;
                }
                let mut seen: Vec<&String> = stack.iter().collect();
                seen.sort();
                seen.dedup();
                for f in seen {
                    *s.total_by_function.entry(name.clone()).or_default().entry(f.clone()).or_default() += v;
                }
                for a in sample.scalars("attribute_indices") {
                    let kv = attrs[a.parse::<usize>().unwrap()];
                    let pair = (kv.scalars("key").next().unwrap_or("").to_string(), any_value(kv));
                    if !s.sample_attributes.contains(&pair) {
                        s.sample_attributes.push(pair);
                    }
                }
            }
            let e = s.types.entry(name).or_insert((unit, 0, 0));
            e.1 += n;
            e.2 += sum;
        }
    }
    s
}
