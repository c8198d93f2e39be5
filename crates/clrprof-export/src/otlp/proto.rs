//! The messages of the OpenTelemetry profiles signal that the export writes, as `prost` derives
//! (no build step, no `.proto` compiled at build time). Written from the specification at
//! [`super::PROTO_COMMIT`] of github.com/open-telemetry/opentelemetry-proto:
//! `opentelemetry/proto/profiles/v1development/profiles.proto` (dictionary layout: one sample type
//! per profile, shared tables in `ProfilesDictionary`), the `ExportProfilesServiceRequest` of
//! `collector/profiles/v1development` (resource profiles and the dictionary, as `ProfilesData`),
//! and the `KeyValue`/`AnyValue`/`InstrumentationScope`/`Resource` of `common/v1` and
//! `resource/v1`. Field numbers are the specification's; fields the export never sets are
//! declared anyway so that a reader of this file sees the whole message.

/// `collector.profiles.v1development.ExportProfilesServiceRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportProfilesServiceRequest {
    #[prost(message, repeated, tag = "1")]
    pub resource_profiles: Vec<ResourceProfiles>,
    #[prost(message, optional, tag = "2")]
    pub dictionary: Option<ProfilesDictionary>,
}

/// The tables shared by every profile of a request; index 0 of the mapping, link and string
/// tables is the zero value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProfilesDictionary {
    #[prost(message, repeated, tag = "1")]
    pub mapping_table: Vec<Mapping>,
    #[prost(message, repeated, tag = "2")]
    pub location_table: Vec<Location>,
    #[prost(message, repeated, tag = "3")]
    pub function_table: Vec<Function>,
    #[prost(message, repeated, tag = "4")]
    pub link_table: Vec<Link>,
    #[prost(string, repeated, tag = "5")]
    pub string_table: Vec<String>,
    #[prost(message, repeated, tag = "6")]
    pub attribute_table: Vec<KeyValue>,
    #[prost(message, repeated, tag = "7")]
    pub attribute_units: Vec<AttributeUnit>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ResourceProfiles {
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub scope_profiles: Vec<ScopeProfiles>,
    #[prost(string, tag = "3")]
    pub schema_url: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ScopeProfiles {
    #[prost(message, optional, tag = "1")]
    pub scope: Option<InstrumentationScope>,
    #[prost(message, repeated, tag = "2")]
    pub profiles: Vec<Profile>,
    #[prost(string, tag = "3")]
    pub schema_url: String,
}

/// One sample type's profile; samples point into `location_indices`, which point into the
/// dictionary's location table.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    #[prost(message, optional, tag = "1")]
    pub sample_type: Option<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(int32, repeated, tag = "3")]
    pub location_indices: Vec<i32>,
    #[prost(uint64, tag = "4")]
    pub time_nanos: u64,
    #[prost(uint64, tag = "5")]
    pub duration_nanos: u64,
    #[prost(message, optional, tag = "6")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "7")]
    pub period: i64,
    #[prost(int32, repeated, tag = "8")]
    pub comment_strindices: Vec<i32>,
    #[prost(bytes = "vec", tag = "9")]
    pub profile_id: Vec<u8>,
    #[prost(uint32, tag = "10")]
    pub dropped_attributes_count: u32,
    #[prost(string, tag = "11")]
    pub original_payload_format: String,
    #[prost(bytes = "vec", tag = "12")]
    pub original_payload: Vec<u8>,
    #[prost(int32, repeated, tag = "13")]
    pub attribute_indices: Vec<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeUnit {
    #[prost(int32, tag = "1")]
    pub attribute_key_strindex: i32,
    #[prost(int32, tag = "2")]
    pub unit_strindex: i32,
}

/// A sample's trace and span (16 and 8 bytes).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Link {
    #[prost(bytes = "vec", tag = "1")]
    pub trace_id: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub span_id: Vec<u8>,
}

/// `AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA`: the values cover the profile's own
/// interval only.
pub const AGGREGATION_TEMPORALITY_DELTA: i32 = 1;

#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    #[prost(int32, tag = "1")]
    pub type_strindex: i32,
    #[prost(int32, tag = "2")]
    pub unit_strindex: i32,
    /// An `AggregationTemporality` (an enum: a varint on the wire).
    #[prost(int32, tag = "3")]
    pub aggregation_temporality: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(int32, tag = "1")]
    pub locations_start_index: i32,
    #[prost(int32, tag = "2")]
    pub locations_length: i32,
    #[prost(int64, repeated, tag = "3")]
    pub values: Vec<i64>,
    #[prost(int32, repeated, tag = "4")]
    pub attribute_indices: Vec<i32>,
    #[prost(int32, tag = "5")]
    pub link_index: i32,
    #[prost(uint64, repeated, tag = "6")]
    pub timestamps_unix_nano: Vec<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub memory_start: u64,
    #[prost(uint64, tag = "2")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "3")]
    pub file_offset: u64,
    #[prost(int32, tag = "4")]
    pub filename_strindex: i32,
    #[prost(int32, repeated, tag = "5")]
    pub attribute_indices: Vec<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    #[prost(int32, tag = "1")]
    pub mapping_index: i32,
    #[prost(uint64, tag = "2")]
    pub address: u64,
    #[prost(message, repeated, tag = "3")]
    pub line: Vec<Line>,
    #[prost(bool, tag = "4")]
    pub is_folded: bool,
    #[prost(int32, repeated, tag = "5")]
    pub attribute_indices: Vec<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    #[prost(int32, tag = "1")]
    pub function_index: i32,
    #[prost(int64, tag = "2")]
    pub line: i64,
    #[prost(int64, tag = "3")]
    pub column: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    #[prost(int32, tag = "1")]
    pub name_strindex: i32,
    #[prost(int32, tag = "2")]
    pub system_name_strindex: i32,
    #[prost(int32, tag = "3")]
    pub filename_strindex: i32,
    #[prost(int64, tag = "4")]
    pub start_line: i64,
}

/// `common.v1.KeyValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

/// `common.v1.AnyValue` (the scalar cases the export uses).
#[derive(Clone, PartialEq, prost::Message)]
pub struct AnyValue {
    #[prost(oneof = "Value", tags = "1, 2, 3, 4")]
    pub value: Option<Value>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Value {
    #[prost(string, tag = "1")]
    String(String),
    #[prost(bool, tag = "2")]
    Bool(bool),
    #[prost(int64, tag = "3")]
    Int(i64),
    #[prost(double, tag = "4")]
    Double(f64),
}

/// `common.v1.InstrumentationScope`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InstrumentationScope {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
    #[prost(message, repeated, tag = "3")]
    pub attributes: Vec<KeyValue>,
    #[prost(uint32, tag = "4")]
    pub dropped_attributes_count: u32,
}

/// `resource.v1.Resource`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Resource {
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
    #[prost(uint32, tag = "2")]
    pub dropped_attributes_count: u32,
}
