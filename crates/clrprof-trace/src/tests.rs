use super::*;

fn sample() -> Vec<Record> {
    vec![
        ProcessStart {
            pid: 42,
            start_unix_ns: 1_700_000_000_000_000_000,
            command_line: "dotnet app.dll \u{00e9}".into(),
            runtime_version: "10.0.12".into(),
            runtime_major: 10,
            info_version: 15,
            event_mask_low: 0x1234,
            event_mask_high: 0x10,
            agent_version: "0.1.0".into(),
            config: "rate=100".into(),
            host: "web-1".into(),
            service: "shop".into(),
            labels: "env=prod\n".into(),
        }
        .into(),
        ThreadCreated { ts: 5, id: 0xdead }.into(),
        ThreadNamed { ts: 6, id: 0xdead, name: "Worker \u{1F600}".into() }.into(),
        FunctionCompiled {
            ts: 7,
            id: 1,
            os_tid: 99,
            class: 2,
            module: 3,
            token: 0x0600_0001,
            name: "Ns.Outer+Inner.Method".into(),
            class_name: "Ns.Outer+Inner".into(),
            signature: "void (int)".into(),
            code_start: 0x7f00_0000_0000,
            code_size: 120,
            jit_ns: 5000,
            kind: code_kind::JIT,
            il_size: 12,
        }
        .into(),
        ProcessExit { end_unix_ns: 9, exit_code: Some(3), signal: None }.into(),
    ]
}

fn file_of(blocks: &[Vec<Record>]) -> Vec<u8> {
    let mut f = header().to_vec();
    for b in blocks {
        f.extend(encode_records(b.iter()));
    }
    f
}

#[test]
fn round_trip_across_blocks() {
    let recs = sample();
    let f = file_of(&[recs[..2].to_vec(), recs[2..].to_vec()]);
    let (got, trunc) = read_all(&f[..]).unwrap();
    assert_eq!(got, recs);
    assert_eq!(trunc, None);
}

#[test]
fn truncated_trace_is_read_up_to_the_damage() {
    let recs = sample();
    let f = file_of(&[recs[..2].to_vec(), recs[2..].to_vec()]);
    let first_block_end = HEADER_LEN + encode_records(recs[..2].iter()).len();
    for cut in first_block_end..f.len() {
        let (got, trunc) = read_all(&f[..cut]).unwrap();
        assert_eq!(got, recs[..2].to_vec(), "cut at {cut}");
        if cut > first_block_end {
            let t = trunc.unwrap();
            assert_eq!(t.offset, first_block_end as u64);
        } else {
            assert!(trunc.is_none());
        }
    }
    // Cut inside the first block: nothing but a truncation.
    let (got, trunc) = read_all(&f[..HEADER_LEN + 3]).unwrap();
    assert!(got.is_empty());
    assert!(trunc.is_some());
}

#[test]
fn bad_inputs_give_clear_errors_never_panics() {
    assert!(matches!(read_all(&b""[..]), Err(DecodeError::Empty)));
    assert!(matches!(read_all(&b"hello world, not a trace"[..]), Err(DecodeError::NotATrace)));
    assert!(matches!(read_all(&b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0"[..]), Err(DecodeError::NotATrace)));
    assert!(matches!(read_all(&MAGIC[..]), Err(DecodeError::Corrupt(_))));
    let mut newer = header();
    newer[8] = 2;
    let e = read_all(&newer[..]).unwrap_err();
    assert!(matches!(e, DecodeError::NewerVersion(2)));
    assert!(e.to_string().contains("newer"));

    // A flipped byte in a block fails its checksum.
    let mut f = file_of(&[sample()]);
    let n = f.len();
    f[n - 3] ^= 0x40;
    let e = read_all(&f[..]).unwrap_err();
    assert!(matches!(e, DecodeError::Corrupt(_)), "{e}");
    assert!(e.to_string().contains("checksum"));

    // An absurd block length is corruption, not an allocation.
    let mut f = header().to_vec();
    f.extend_from_slice(&u32::MAX.to_le_bytes());
    f.extend_from_slice(&[0; 4]);
    assert!(matches!(read_all(&f[..]), Err(DecodeError::Corrupt(_))));
}

#[test]
fn garbage_payloads_never_panic() {
    // A tiny deterministic generator: every payload either decodes or gives an error.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let valid = {
        let mut p = Vec::new();
        for r in sample() {
            r.encode(&mut p);
        }
        p
    };
    for i in 0..20_000 {
        let mut p = valid.clone();
        let flips = 1 + (next() % 4) as usize;
        for _ in 0..flips {
            let at = (next() as usize) % p.len();
            p[at] = next() as u8;
        }
        if i % 3 == 0 {
            let cut = (next() as usize) % p.len();
            p.truncate(cut);
        }
        let _ = decode_payload(&p);
        let _ = read_all(&file_of_payload(&p)[..]);
    }
}

fn file_of_payload(p: &[u8]) -> Vec<u8> {
    let mut f = header().to_vec();
    f.extend(encode_block(p));
    f
}

#[test]
fn unknown_tags_are_skipped_and_trailing_fields_ignored() {
    let mut p = Vec::new();
    p.extend_from_slice(&999u16.to_le_bytes());
    p.extend_from_slice(&3u32.to_le_bytes());
    p.extend_from_slice(&[1, 2, 3]);
    // A ThreadCreated with an extra appended field, as a newer minor version might write.
    let mut body = Vec::new();
    5u64.put(&mut body);
    7u64.put(&mut body);
    99u32.put(&mut body);
    p.extend_from_slice(&ThreadCreated::TAG.to_le_bytes());
    p.extend_from_slice(&(body.len() as u32).to_le_bytes());
    p.extend_from_slice(&body);
    let got = decode_payload(&p).unwrap();
    assert_eq!(got, vec![Record::Unknown { tag: 999, len: 3 }, ThreadCreated { ts: 5, id: 7 }.into()]);
}

#[test]
fn count_records_round_trip_and_old_readers_skip_them() {
    let recs: Vec<Record> = vec![
        CountInfo { capacity: 1 << 20, include: "Calls.*".into(), exclude: String::new(), scope: "all".into() }.into(),
        CountMethod {
            function: 0x7f00,
            module: 0x55,
            token: 0x0600_0002,
            slot: 0,
            reason: count_uncounted::COUNTED,
            name: "Ns.G<T>.M<U>".into(),
        }
        .into(),
        CountMethod {
            function: 0x7f08,
            module: 0x55,
            token: 0x0600_0003,
            slot: u32::MAX,
            reason: count_uncounted::INTRINSIC,
            name: String::new(),
        }
        .into(),
        CountDeltas { ts: 9, slots: vec![0, 7], counts: vec![21891, 1] }.into(),
    ];
    let f = file_of(std::slice::from_ref(&recs));
    let (got, _) = read_all(&f[..]).unwrap();
    assert_eq!(got, recs);
    // A reader that predates these tags sees them as `Unknown` records of their length and goes on.
    for r in &recs {
        let mut out = Vec::new();
        r.encode(&mut out);
        let len = u32::from_le_bytes([out[2], out[3], out[4], out[5]]);
        assert_eq!(Record::decode(r.tag() + 1000, &out[6..]).unwrap(), Record::Unknown { tag: r.tag() + 1000, len });
    }
}

#[test]
fn runtime_event_records_round_trip() {
    let recs: Vec<Record> = vec![
        ExceptionThrown {
            ts: 1,
            os_tid: 2,
            thread: 3,
            class: 4,
            type_name: "Ns.Boom".into(),
            stack: vec![5, 6],
            rethrow: true,
        }
        .into(),
        ExceptionPhase { ts: 2, os_tid: 2, phase: exception_phase::FILTER_ENTER, function: 6 }.into(),
        ExceptionCaught {
            ts: 3,
            os_tid: 2,
            function: 6,
            site: 5,
            search_frames: 2,
            filters: 1,
            unwind_frames: 2,
            finallies: 1,
        }
        .into(),
        ExceptionMonitoring { ts: 3, mode: exception_monitoring::PAUSED, observed: 20000 }.into(),
        GcStarted { ts: 4, os_tid: 7, generation: 2, reason: 1, sizes: vec![1, 2, 3, 4, 5] }.into(),
        GcFinished { ts: 5, os_tid: 7, sizes: vec![0, 0, 3, 4, 5] }.into(),
        RuntimeSuspended { ts: 3, os_tid: 7, reason: 1 }.into(),
        RuntimeResumed { ts: 6, os_tid: 7 }.into(),
        GcInfo { ts: 4, index: 9, generation: 2, reason: 1, kind: 0 }.into(),
        GcEnd { ts: 6, os_tid: 7, index: 9, generation: 2 }.into(),
        AllocationCounts { ts: 7, class: 8, type_name: "int[]".into(), count: 10, bytes: 400 }.into(),
        AllocationSample {
            ts: 8,
            os_tid: 2,
            class: 8,
            type_name: "int[]".into(),
            size: 40,
            amount: 0,
            source: 0,
            ips: vec![],
            stack: vec![5],
            walk_weight: 32,
            weight: 3,
        }
        .into(),
        ContentionStarted { ts: 9, os_tid: 2, stack: vec![6, 5] }.into(),
        ContentionEnded { ts: 10, os_tid: 2, duration_ns: 1 }.into(),
        ContentionStack { id: 1, stack: vec![6, 5] }.into(),
        ContentionCounts {
            ts: 0,
            interval_ns: 100_000_000,
            stacks: vec![1],
            counts: vec![3],
            wait_ns: vec![30],
            max_wait_ns: vec![20],
            unended: vec![1],
        }
        .into(),
        ExceptionStack { id: 1, stack: vec![6, 5] }.into(),
        ExceptionType { id: 1, class: 8, type_name: "System.Exception".into() }.into(),
        ExceptionCounts { ts: 0, interval_ns: 100_000_000, count: 0, packed: vec![], rethrown: vec![] }.into(),
        AllocationSamples {
            ts: 0,
            count: 0,
            packed: vec![],
            walk_weights: vec![],
            weights: vec![],
            thinned: 0,
            stacks: vec![],
        }
        .into(),
        AllocationStack { id: 1, ips: vec![7], stack: vec![6, 5] }.into(),
    ];
    let bytes = file_of(std::slice::from_ref(&recs));
    let mut d = Decoder::new(&bytes[..]).unwrap();
    let mut back = Vec::new();
    while let Some(r) = d.next_record().unwrap() {
        back.push(r);
    }
    assert_eq!(back, recs);
    assert_eq!(exception_phase::name(exception_phase::CATCHER_ENTER), "catch-enter");
}

#[test]
fn every_record_type_reads_bodies_written_before_its_trailing_fields() {
    let all = records::field_prefixes();
    assert!(all.len() >= 40, "one entry per record type");
    for cuts in &all {
        let (len, full) = cuts.last().unwrap().clone();
        let mut body = Vec::new();
        full.encode(&mut body);
        let body = &body[6..];
        assert_eq!(body.len(), len, "{}", full.name());
        // Cut exactly after each field: the missing trailing fields take their defaults.
        for (cut, want) in cuts {
            let got = Record::decode(full.tag(), &body[..*cut]);
            assert_eq!(got.as_ref().ok(), Some(want), "{} cut after {cut} bytes", full.name());
        }
        // Cut inside a field: corruption, never a default.
        for w in cuts.windows(2) {
            for cut in w[0].0 + 1..w[1].0 {
                match Record::decode(full.tag(), &body[..cut]) {
                    Err(DecodeError::Corrupt(_)) => {}
                    other => panic!("{} cut at {cut} (inside a field) gave {other:?}", full.name()),
                }
            }
        }
        // Bytes after the known fields (a field appended by a newer version) are ignored.
        let mut longer = body.to_vec();
        longer.extend_from_slice(&[9, 9, 9]);
        assert_eq!(Record::decode(full.tag(), &longer).unwrap(), full);
    }
}

#[test]
fn decoder_counts_skipped_unknown_tags() {
    let mut p = Vec::new();
    for (tag, body) in [(999u16, &[1u8, 2, 3][..]), (1000, &[][..]), (999, &[4][..])] {
        p.extend_from_slice(&tag.to_le_bytes());
        p.extend_from_slice(&(body.len() as u32).to_le_bytes());
        p.extend_from_slice(body);
    }
    Record::from(ThreadCreated { ts: 5, id: 7 }).encode(&mut p);
    let f = file_of_payload(&p);
    let mut d = Decoder::new(&f[..]).unwrap();
    assert!(d.skipped().is_empty());
    let mut known = 0;
    while let Some(r) = d.next_record().unwrap() {
        known += usize::from(!matches!(r, Record::Unknown { .. }));
    }
    assert_eq!(known, 1);
    assert_eq!(d.skipped().iter().map(|(t, n)| (*t, *n)).collect::<Vec<_>>(), vec![(999, 2), (1000, 1)]);
}

/// A delta whose node gaps and costs take varints of every length, the largest values included.
fn wide_delta() -> CallTreeDelta {
    CallTreeDelta {
        os_tid: 7,
        ts: 123,
        nodes: vec![0, 1, 5, 300, 70_000, u32::MAX - 1],
        calls: vec![1, 0, 127, 128, u64::MAX, 3],
        time_ns: vec![0, 1 << 40, 5, 16_383, 16_384, 9],
        suspended_ns: vec![0; 6],
        profiler_ns: vec![2, 3, 4, 5, 6, u64::MAX],
        tree: 4,
    }
}

#[test]
fn packed_call_tree_costs_hold_the_same_delta() {
    let d = wide_delta();
    let c = CallTreeCosts::pack(&d).unwrap();
    assert_eq!(c.unpack().unwrap(), d);
    // Through the format, and smaller than the plain record for small figures.
    let small = CallTreeDelta {
        os_tid: 1,
        ts: 5,
        nodes: (0..100).map(|i| i * 2).collect(),
        calls: vec![3; 100],
        time_ns: vec![40_000; 100],
        suspended_ns: vec![0; 100],
        profiler_ns: vec![900; 100],
        tree: 1,
    };
    let packed = CallTreeCosts::pack(&small).unwrap();
    let (plain, tight) =
        (encode_records([&Record::from(small.clone())]), encode_records([&Record::from(packed.clone())]));
    assert!(tight.len() * 3 < plain.len(), "{} vs {}", tight.len(), plain.len());
    let mut file = header().to_vec();
    file.extend(tight);
    match read_all(&file[..]).unwrap().0.as_slice() {
        [Record::CallTreeCosts(c)] => assert_eq!(c.unpack().unwrap(), small),
        other => panic!("{other:?}"),
    }
    // Nodes out of order or vectors of different lengths do not pack.
    assert!(CallTreeCosts::pack(&CallTreeDelta {
        nodes: vec![2, 1],
        calls: vec![1, 1],
        time_ns: vec![0, 0],
        suspended_ns: vec![0, 0],
        profiler_ns: vec![0, 0],
        ..Default::default()
    })
    .is_none());
    assert!(CallTreeCosts::pack(&CallTreeDelta { nodes: vec![1], ..Default::default() }).is_none());
    // Damaged packing: an error, never a panic.
    for cut in 0..packed.packed.len() {
        let mut c = packed.clone();
        c.packed.truncate(cut);
        assert!(c.unpack().is_err());
    }
    let mut c = packed.clone();
    c.count += 1;
    assert!(c.unpack().is_err());
    c.count = u32::MAX;
    assert!(c.unpack().is_err());
    let over = CallTreeCosts { count: 1, packed: vec![0xff; 11], ..Default::default() };
    assert!(over.unpack().is_err());
}

/// `each` and `each_staged` (a folding reader's way in) hand over exactly the nodes `unpack`
/// decodes, and on any packing `unpack` refuses they refuse too, having handed over none.
#[test]
fn packed_call_tree_costs_visited_as_unpacked() {
    let d = wide_delta();
    let visited = |c: &CallTreeCosts| {
        let mut seen = Vec::new();
        let r = c.each(|node, v| seen.push((node, v)));
        (r.is_ok(), seen)
    };
    let unpacked = |c: &CallTreeCosts| match c.unpack() {
        Ok(d) => (
            true,
            (0..d.nodes.len())
                .map(|k| (d.nodes[k], [d.calls[k], d.time_ns[k], d.suspended_ns[k], d.profiler_ns[k]]))
                .collect(),
        ),
        Err(_) => (false, Vec::new()),
    };
    let packed = CallTreeCosts::pack(&d).unwrap();
    assert_eq!(visited(&packed), unpacked(&packed));
    assert!(visited(&packed).0);
    let mut variants = Vec::new();
    for cut in 0..packed.packed.len() {
        let mut c = packed.clone();
        c.packed.truncate(cut);
        variants.push(c);
    }
    for at in 0..packed.packed.len() {
        for byte in [0x00, 0x01, 0x7f, 0x80, 0xff] {
            let mut c = packed.clone();
            c.packed[at] = byte;
            variants.push(c);
        }
    }
    for count in [0, 5, 7, u32::MAX] {
        variants.push(CallTreeCosts { count, ..packed.clone() });
    }
    // A node id past 32 bits; a varint of eleven bytes.
    let mut wide = Vec::new();
    for v in [1u64 << 33, 0, 0, 0, 0] {
        crate::records::put_varint(&mut wide, v);
    }
    variants.push(CallTreeCosts { count: 1, packed: wide, ..Default::default() });
    variants.push(CallTreeCosts {
        count: 1,
        packed: [vec![0xff; 10], vec![0, 0, 0, 0, 0]].concat(),
        ..Default::default()
    });
    // And random packings, mostly short varints.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut rand = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for _ in 0..5_000 {
        let len = rand(48) as usize;
        let packed = (0..len).map(|_| if rand(4) == 0 { 0x80 | rand(128) as u8 } else { rand(128) as u8 }).collect();
        variants.push(CallTreeCosts { count: rand(10) as u32, packed, ..Default::default() });
    }
    let mut refused = 0;
    let mut stage = vec![(9, [9; 4])];
    for c in &variants {
        let (ok, seen) = visited(c);
        assert_eq!((ok, seen.clone()), unpacked(c), "{:?}", c.packed);
        let mut staged = Vec::new();
        let r = c.each_staged(&mut stage, |node, v| staged.push((node, v)));
        assert_eq!((r.is_ok(), staged), (ok, seen.clone()), "staged: {:?}", c.packed);
        if !ok {
            assert!(seen.is_empty());
            refused += 1;
        }
    }
    assert!(refused > variants.len() / 2, "{refused} of {} refused", variants.len());
}

/// The sample records' direct decoding gives what the field-by-field one gives, for the body this
/// version writes, an older (shorter) one and a newer (longer) one.
#[test]
fn sample_records_decode_as_the_generic_decoder_does() {
    let recs: Vec<Record> = vec![
        CpuSample { ts: 1 << 40, os_tid: 7, stack: 0xdead_beef, count: 3, cpu_ns: u64::MAX - 1, activity: 0 }.into(),
        WallSample { ts: 5, os_tid: u32::MAX, stack: 1, count: u32::MAX, wall_ns: 1 << 50 }.into(),
    ];
    // A CPU sample with an activity is 4 bytes longer; without one it is written as before.
    let with = CpuSample { ts: 9, os_tid: 7, stack: 3, count: 2, cpu_ns: 5, activity: 17 };
    let mut p = Vec::new();
    Record::from(with.clone()).encode(&mut p);
    assert_eq!(p.len(), 6 + 32);
    assert_eq!(decode_payload(&p).unwrap(), vec![Record::from(with.clone())]);
    assert_eq!(Record::decode(CpuSample::TAG, &p[6..]).unwrap(), Record::from(with));
    for r in &recs {
        let mut p = Vec::new();
        r.encode(&mut p);
        assert_eq!(p.len(), 6 + 28);
        assert_eq!(decode_payload(&p).unwrap(), vec![r.clone()]);
        assert_eq!(Record::decode(r.tag(), &p[6..]).unwrap(), *r);
        // Newer: a field appended; older: the last field missing.
        let mut longer = p.clone();
        longer.extend_from_slice(&[1, 2, 3, 4]);
        longer[2..6].copy_from_slice(&32u32.to_le_bytes());
        assert_eq!(decode_payload(&longer).unwrap(), vec![Record::decode(r.tag(), &longer[6..]).unwrap()]);
        let mut shorter = p[..p.len() - 8].to_vec();
        shorter[2..6].copy_from_slice(&20u32.to_le_bytes());
        assert_eq!(decode_payload(&shorter).unwrap(), vec![Record::decode(r.tag(), &p[6..26]).unwrap()]);
    }
}

/// Records handed over one by one as they are decoded are the records a list gets; a damaged
/// block adds none of its records to a list, and a stream decoder that met it takes nothing more.
#[test]
fn records_handed_over_one_by_one_are_the_listed_ones() {
    let recs: Vec<Record> = vec![
        ThreadCreated { ts: 1, id: 2 }.into(),
        CpuSample { ts: 2, os_tid: 7, stack: 1, count: 1, cpu_ns: 10, activity: 0 }.into(),
        ThreadCreated { ts: 3, id: 4 }.into(),
    ];
    let mut bytes = header().to_vec();
    bytes.extend(encode_records(&recs[..2]));
    bytes.extend(encode_records(&recs[2..]));
    let mut each = Vec::new();
    let mut ends = Vec::new();
    let mut d = StreamDecoder::new();
    d.push_each(&bytes, |r| each.push(r), |o| ends.push(o)).unwrap();
    assert_eq!(each, recs);
    assert_eq!(ends.len(), 2);
    assert_eq!(*ends.last().unwrap(), bytes.len() as u64);
    // A block whose second record is cut inside a field (its checksum right).
    let mut payload = Vec::new();
    recs[0].encode(&mut payload);
    let mut bad = Vec::new();
    recs[1].encode(&mut bad);
    bad.truncate(6 + 10);
    bad[2..6].copy_from_slice(&10u32.to_le_bytes());
    payload.extend(bad);
    let mut damaged = header().to_vec();
    damaged.extend(encode_records(&recs[..1]));
    damaged.extend(encode_block(&payload));
    let mut out = Vec::new();
    let mut d = StreamDecoder::new();
    assert!(d.push(&damaged, &mut out).is_err());
    assert_eq!(out, recs[..1], "the whole block before, nothing of the damaged one");
    assert!(d.push(&[], &mut out).is_err());
}

#[test]
fn packed_exception_counts_hold_the_same_rows() {
    let row = |os_tid: u32, first_ns: u64, count: u64| ExceptionRow {
        os_tid,
        type_id: 2,
        site: 0x7f12_3456_7890,
        stack: 0,
        catcher: 0x7f12_3456_9000,
        first_ns,
        last_ns: first_ns + 99_999_999,
        count,
        search_frames: 4 * count,
        filters: count,
        unwind_frames: 4 * count,
        finallies: u64::MAX,
        rethrown: 0,
    };
    let rows = vec![row(1234, 500_000_000, 1), row(99_999, 500_000_001, 70_000), ExceptionRow::default()];
    let c = ExceptionCounts::pack(0, 100_000_000, &rows).unwrap();
    assert!(c.rethrown.is_empty(), "no rethrows, no list");
    assert_eq!(c.unpack().unwrap(), rows);
    // Rethrows per row, beside the packed varints; a list of another length is damage.
    let mut with = rows.clone();
    with[1].rethrown = 70_000;
    let mut c = ExceptionCounts::pack(0, 100_000_000, &with).unwrap();
    assert_eq!(c.rethrown, vec![0, 70_000, 0]);
    assert_eq!(c.unpack().unwrap(), with);
    c.rethrown.pop();
    assert!(c.unpack().is_err());
    let rows = &rows[..2];
    let c = ExceptionCounts::pack(500_000_000, 100_000_000, rows).unwrap();
    assert_eq!(c.unpack().unwrap(), rows);
    // A row of 150 exceptions takes fewer bytes than the `ExceptionCaught` of one.
    let busy = ExceptionRow {
        os_tid: 12_345,
        type_id: 1,
        site: 0x7f12_3456_7890,
        catcher: 0x7f12_3456_9000,
        first_ns: 512_345_678,
        last_ns: 592_345_678,
        count: 150,
        search_frames: 600,
        unwind_frames: 600,
        finallies: 150,
        ..Default::default()
    };
    let one = ExceptionCounts::pack(500_000_000, 100_000_000, &[busy]).unwrap();
    assert!(one.packed.len() <= 36, "{}", one.packed.len());
    let mut file = header().to_vec();
    file.extend(encode_records([&Record::from(c.clone())]));
    match read_all(&file[..]).unwrap().0.as_slice() {
        [Record::ExceptionCounts(back)] => assert_eq!(back.unpack().unwrap(), rows),
        other => panic!("{other:?}"),
    }
    // A row thrown before the interval, or ending before it began, does not pack.
    assert!(ExceptionCounts::pack(500_000_001, 100_000_000, rows).is_none());
    let mut bad = rows[0].clone();
    bad.last_ns = bad.first_ns - 1;
    assert!(ExceptionCounts::pack(0, 100_000_000, &[bad]).is_none());
    // Damaged packing: an error, never a panic.
    for cut in 0..c.packed.len() {
        let mut d = c.clone();
        d.packed.truncate(cut);
        assert!(d.unpack().is_err());
    }
    let mut d = c.clone();
    d.count += 1;
    assert!(d.unpack().is_err());
    d.count = u32::MAX;
    assert!(d.unpack().is_err());
    let over = ExceptionCounts {
        ts: u64::MAX,
        count: 1,
        packed: vec![0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0],
        ..Default::default()
    };
    assert!(over.unpack().is_err());
    let tid = ExceptionCounts {
        count: 1,
        packed: vec![0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ..Default::default()
    };
    assert!(tid.unpack().is_err(), "an os_tid beyond u32");
}

#[test]
fn packed_allocation_samples_hold_the_same_samples() {
    let sample = |ts: u64, name: &str, stack: Vec<u64>| AllocationSample {
        ts,
        os_tid: 4321,
        class: 0x7f00_1234_5678,
        type_name: name.into(),
        size: 24,
        amount: 0,
        source: 0,
        ips: vec![],
        walk_weight: if stack.is_empty() { 0 } else { 32 },
        stack,
        weight: 0,
    };
    let samples = vec![
        sample(2_000_000_123, "System.String", vec![0x7f00_0000_1000, 0x7f00_0000_2000]),
        sample(1_999_000_000, "", vec![]),
        AllocationSample { amount: u64::MAX, source: 1, ips: vec![1, u64::MAX], ..sample(2_500_000_000, "ü", vec![]) },
    ];
    let p = AllocationSamples::pack(&samples).unwrap();
    assert_eq!(p.ts, 1_999_000_000);
    assert_eq!(p.unpack().unwrap(), samples);
    // A sample without a name or stack: about a third of its record.
    let one = AllocationSamples::pack(&samples[1..2]).unwrap();
    let plain = encode_records([&Record::from(samples[1].clone())]).len();
    let tight = encode_records([&Record::from(one.clone())]).len();
    assert!(one.packed.len() * 2 < plain, "{} vs {plain}", one.packed.len());
    let mut file = header().to_vec();
    file.extend(encode_records([&Record::from(p.clone())]));
    match read_all(&file[..]).unwrap().0.as_slice() {
        [Record::AllocationSamples(back)] => assert_eq!(back.unpack().unwrap(), samples),
        other => panic!("{other:?}"),
    }
    assert!(tight > 0);
    assert_eq!(AllocationSamples::pack(&[]).unwrap().unpack().unwrap(), vec![]);
    // Damaged packing: an error, never a panic.
    for cut in 0..p.packed.len() {
        let mut d = p.clone();
        d.packed.truncate(cut);
        assert!(d.unpack().is_err(), "cut at {cut}");
    }
    let mut d = p.clone();
    d.count += 1;
    assert!(d.unpack().is_err());
    d.count = u32::MAX;
    assert!(d.unpack().is_err());
    // Walk weights: one per sample; none (an older agent) reads as 0, a count that differs is
    // damage.
    let mut old = p.clone();
    old.walk_weights.clear();
    let unknown: Vec<AllocationSample> =
        samples.iter().map(|a| AllocationSample { walk_weight: 0, ..a.clone() }).collect();
    assert_eq!(old.unpack().unwrap(), unknown);
    let mut d = p.clone();
    d.walk_weights.pop();
    assert!(d.unpack().is_err(), "a weight missing");
    let mut d = p.clone();
    d.walk_weights.push(1);
    assert!(d.unpack().is_err(), "a weight too many");
    let huge = AllocationSamples {
        count: 1,
        packed: vec![0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x0f, 0],
        ..Default::default()
    };
    assert!(huge.unpack().is_err(), "a list longer than the bytes left");
    let bad_utf8 = AllocationSamples { count: 1, packed: vec![0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0], ..Default::default() };
    assert!(bad_utf8.unpack().is_err());
}

#[test]
fn thinned_allocation_samples_keep_their_weights() {
    let s = |ts: u64, weight: u32| AllocationSample { ts, class: 7, size: 24, weight, ..Default::default() };
    // All of weight 1 (or 0): no weights written, read back as 0 (itself alone).
    let plain = AllocationSamples::pack(&[s(1, 1), s(2, 0)]).unwrap();
    assert!(plain.weights.is_empty());
    assert_eq!(plain.unpack().unwrap().iter().map(|a| a.weight).collect::<Vec<_>>(), [0, 0]);
    let samples = vec![s(1, 1), s(2, 40), s(3, u32::MAX)];
    let p = AllocationSamples { thinned: 12, ..AllocationSamples::pack(&samples).unwrap() };
    assert_eq!(p.unpack().unwrap(), samples);
    let mut file = header().to_vec();
    file.extend(encode_records([&Record::from(p.clone())]));
    match read_all(&file[..]).unwrap().0.as_slice() {
        [Record::AllocationSamples(back)] => {
            assert_eq!(back.thinned, 12);
            assert_eq!(back.unpack().unwrap(), samples);
        }
        other => panic!("{other:?}"),
    }
    let mut d = p.clone();
    d.weights.pop();
    assert!(d.unpack().is_err(), "a weight missing");
    d.weights.extend([1, 1]);
    assert!(d.unpack().is_err(), "a weight too many");
}

/// Reads `records` back from a trace file, resolving allocation stacks as a reader does.
fn read_allocation_samples(records: &[Record]) -> Result<Vec<AllocationSample>, DecodeError> {
    let mut file = header().to_vec();
    file.extend(encode_records(records.iter()));
    let mut stacks = AllocationStacks::default();
    let mut out = Vec::new();
    for r in read_all(&file[..]).unwrap().0 {
        match r {
            Record::AllocationStack(s) => stacks.define(&s),
            Record::AllocationSamples(p) => out.extend(p.unpack_with(&stacks)?),
            other => panic!("{other:?}"),
        }
    }
    Ok(out)
}

#[test]
fn interned_allocation_stacks_are_written_once_and_read_back_whole() {
    let s = |ts: u64, ips: Vec<u64>, stack: Vec<u64>| AllocationSample {
        ts,
        os_tid: 9,
        class: 0x7f00_0000_0040,
        size: 32,
        source: 2,
        amount: 16384,
        walk_weight: 1,
        ips,
        stack,
        ..Default::default()
    };
    let deep: Vec<u64> = (0..40).map(|i| 0x7f12_3456_0000 + i * 0x40).collect();
    let first = vec![
        s(10, vec![], deep.clone()),
        s(11, vec![], vec![]),
        s(12, vec![], deep.clone()),
        s(13, vec![1, 2], vec![]),
        s(14, vec![1, 2], vec![3]),
    ];
    let second = vec![s(20, vec![1, 2], vec![]), s(21, vec![], deep.clone()), s(22, vec![], vec![5])];
    let mut interner = AllocationStackInterner::default();
    let (defs1, r1) = interner.pack(first.clone()).unwrap();
    // Each distinct stack once, numbered from 1 in the order of first use; no stack, no id.
    assert_eq!(defs1.iter().map(|d| d.id).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(defs1[0].stack, deep);
    assert_eq!((defs1[1].ips.clone(), defs1[1].stack.clone()), (vec![1, 2], vec![]));
    let (defs2, r2) = interner.pack(second.clone()).unwrap();
    // Across records, only the new one.
    assert_eq!(defs2, [AllocationStack { id: 4, ips: vec![], stack: vec![5] }]);
    let mut stacks = AllocationStacks::default();
    for d in defs1.iter().chain(&defs2) {
        stacks.define(d);
    }
    let mut all = first.clone();
    all.extend(second.clone());
    let mut records: Vec<Record> = defs1.iter().cloned().map(Record::from).collect();
    records.push(r1.clone().into());
    records.extend(defs2.iter().cloned().map(Record::from));
    records.push(r2.clone().into());
    assert_eq!(read_allocation_samples(&records).unwrap(), all);
    // Smaller than inline: the deep stack is written once instead of three times.
    let interned = encode_records(records.iter()).len();
    let inline = encode_records([
        &Record::from(AllocationSamples::pack(&first).unwrap()),
        &AllocationSamples::pack(&second).unwrap().into(),
    ])
    .len();
    assert!(interned + 100 < inline, "{interned} vs {inline}");
    // Without the definitions the record cannot be read whole: damage, never a panic.
    let err = r1.unpack().unwrap_err().to_string();
    assert!(err.contains("allocation stack 1"), "{err}");
    assert!(r2.unpack_with(&AllocationStacks::default()).is_err());
    // A reference beyond the definitions, or one of a sample whose lists are inline too.
    let mut d = r2.clone();
    d.stacks[1] = 99;
    assert!(d.unpack_with(&stacks).is_err());
    let mut d = r2.clone();
    d.stacks.pop();
    assert!(d.unpack_with(&stacks).is_err(), "a reference missing");
    d.stacks.extend([0, 0]);
    assert!(d.unpack_with(&stacks).is_err(), "a reference too many");
    let inline_too = AllocationSamples::pack_refs(&second[..1], &[1]).map(|mut p| {
        p.packed = AllocationSamples::pack(&second[..1]).unwrap().packed;
        p
    });
    assert!(inline_too.unwrap().unpack_with(&stacks).is_err());
    // An older record (no `stacks` field: every stack inline) reads as before, with or without
    // definitions around it.
    let old = AllocationSamples::pack(&first).unwrap();
    assert!(old.stacks.is_empty());
    assert_eq!(old.unpack().unwrap(), first);
    assert_eq!(old.unpack_with(&stacks).unwrap(), first);
    let mut body = Vec::new();
    Record::from(old.clone()).encode(&mut body);
    // The body ends before `stacks` (an empty vector is still written, as its u32 length: cut it).
    let cut = &body[6..body.len() - 4];
    match Record::decode(AllocationSamples::TAG, cut).unwrap() {
        Record::AllocationSamples(back) => assert_eq!(back.unpack().unwrap(), first),
        other => panic!("{other:?}"),
    }
}

#[test]
fn allocation_stack_ids_start_again_when_the_interner_is_full() {
    let s = |f: u64| AllocationSample { ts: f, stack: vec![f], walk_weight: 1, ..Default::default() };
    let mut interner = AllocationStackInterner::new(3);
    let (d1, r1) = interner.pack(vec![s(1), s(2)]).unwrap();
    assert_eq!(d1.len(), 2);
    // Two more would pass the cap: forgotten before the record, so that no id of a record means
    // two stacks; the new definitions replace the old ones for the reader.
    let (d2, r2) = interner.pack(vec![s(3), s(1)]).unwrap();
    assert_eq!(d2.iter().map(|d| (d.id, d.stack[0])).collect::<Vec<_>>(), [(1, 3), (2, 1)]);
    let mut records: Vec<Record> = d1.into_iter().map(Record::from).collect();
    records.push(r1.into());
    records.extend(d2.into_iter().map(Record::from));
    records.push(r2.into());
    let back = read_allocation_samples(&records).unwrap();
    assert_eq!(back.iter().map(|a| a.stack.clone()).collect::<Vec<_>>(), [vec![1], vec![2], vec![3], vec![1]]);
}

/// Varints read back as written, one after another, at every distance from the end; an
/// eleven-byte varint, and one cut by the end, read as nothing.
#[test]
fn varints_read_back_whatever_bytes_follow_them() {
    use crate::records::{get_varint, put_varint};
    let mut values = vec![0, 1, 127, 128, 300, 16_383, 16_384, u32::MAX as u64, u64::MAX - 1, u64::MAX];
    values.extend((0..64).map(|k| 1u64 << k));
    values.extend((0..64).map(|k| (1u64 << k) - 1));
    let mut b = Vec::new();
    for &v in &values {
        put_varint(&mut b, v);
    }
    for start in 0..values.len() {
        // The same values read from a buffer that ends right after each one.
        let mut at = 0;
        for &v in &values[..start] {
            let _ = get_varint(&b, &mut at).unwrap();
            assert!(at <= b.len(), "{v}");
        }
        let mut end = at;
        let _ = get_varint(&b, &mut end);
        let mut near = at;
        assert_eq!(get_varint(&b[..end], &mut near), Some(values[start]), "the last value of a buffer");
        assert_eq!(near, end);
        let mut inner = at;
        assert_eq!(get_varint(&b, &mut inner), Some(values[start]));
        for cut in at..end {
            let mut c = at;
            assert_eq!(get_varint(&b[..cut], &mut c), None, "cut at {cut}");
        }
    }
    let long = [[0xffu8; 10].as_slice(), &[0x01; 12]].concat();
    for len in 10..long.len() {
        assert_eq!(get_varint(&long[..len], &mut 0), None, "eleven bytes");
    }
    let ten = [[0xffu8; 9].as_slice(), &[0x01], &[0; 10]].concat();
    assert_eq!(get_varint(&ten, &mut 0), Some(u64::MAX));
    assert_eq!(get_varint(&ten[..10], &mut 0), Some(u64::MAX));
}
