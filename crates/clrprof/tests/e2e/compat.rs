//! A trace written by a newer clrprof of the same format version (records of types this version
//! does not know, fields appended to known records) is still reported, with a note saying what
//! was skipped. Runs without .NET, on a checked-in trace.

use crate::common::*;

use std::process::Command;

use clrprof_trace::{encode_block, Field, ThreadCreated};

#[test]
fn newer_records_are_skipped_with_a_note() {
    let root = repo_root();
    let mut bytes = std::fs::read(root.join("testdata/traces/v1/sampled.clrprof")).unwrap();
    let mut payload = Vec::new();
    for (tag, body) in [(4000u16, &[1u8, 2, 3][..]), (4001, &[][..]), (4000, &[7][..])] {
        payload.extend_from_slice(&tag.to_le_bytes());
        payload.extend_from_slice(&(body.len() as u32).to_le_bytes());
        payload.extend_from_slice(body);
    }
    // A known record with a field appended by the newer writer.
    let mut body = Vec::new();
    for v in [1u64, 0xabc, 99] {
        v.put(&mut body);
    }
    payload.extend_from_slice(&ThreadCreated::TAG.to_le_bytes());
    payload.extend_from_slice(&(body.len() as u32).to_le_bytes());
    payload.extend_from_slice(&body);
    bytes.extend(encode_block(&payload));
    let dir = scratch("compat");
    let path = dir.join("newer.clrprof");
    std::fs::write(&path, &bytes).unwrap();

    let out = Command::new(clrprof_exe())
        .arg("report")
        .arg(&path)
        .args(["--view", "tables", "--no-native-symbols"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        all.contains("3 records of unknown types skipped (written by a newer clrprof): tags 4000 (2), 4001 (1)"),
        "{all}"
    );
    assert!(all.contains("0xabc"), "the thread of the extended record is listed: {all}");
    let _ = std::fs::remove_dir_all(dir);
}
