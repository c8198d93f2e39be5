//! Prints every record of a trace, one per line (debugging aid):
//! `cargo run -p clrprof-trace --example dump -- trace.clrprof`.

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: dump TRACE");
        std::process::exit(2);
    };
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
    };
    let mut dec = match clrprof_trace::Decoder::new(std::io::BufReader::new(file)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
    };
    while let Ok(Some(r)) = dec.next_record() {
        println!("{r:?}");
    }
    if let Some(t) = dec.truncation() {
        eprintln!("truncated: {t}");
    }
}
