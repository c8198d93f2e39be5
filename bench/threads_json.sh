#!/usr/bin/env bash
# The JSON report of traces with many threads: time, CPU, peak memory and size of
# `clrprof report --format json` (and of `--per-thread`, every thread's hot spots and timeline row)
# for this build and optionally a baseline binary, interleaved, REPS rounds; prints every run (the
# machine is shared: compare user CPU within a round).
#
#   bench/threads_json.sh [REPS=3]     CLRPROF=/path/to/clrprof (default target/release/clrprof)
#                                      BASELINE=/path/to/old/clrprof to compare
#
# The traces are recorded once into target/bench-traces/ (delete them to record again):
#   churn5k.clrprof   apps/Stress churn 5000 8 under --instrument --no-sample (5,000 threads)
#   churn20k.clrprof  apps/Stress churn 20000 8 under --instrument --no-sample (20,000 threads)
#   churn20ks.clrprof apps/Stress churn 20000 8 under --instrument, sampled (the timeline's threads)
# Each run's output is compared with the first binary's: the reports must be byte-identical (a
# baseline without --per-thread is run without it for both modes; compare with its `full` mode, which
# differs from a baseline before schema 3 in `schema_version` alone).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-3}
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1
CLRPROF=${CLRPROF:-$PWD/target/release/clrprof}
[ -x "$CLRPROF" ] || { echo "build first: cargo build --release -p clrprof -p clrprof-agent" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "needs GNU time: apt-get install time" >&2; exit 1; }
AGENT=$(dirname "$CLRPROF")/libclrprof_agent.so
DIR=target/bench-traces
mkdir -p "$DIR"
for spec in 5k:5000:--no-sample 20k:20000:--no-sample 20ks:20000:; do
    IFS=: read -r name n sample <<<"$spec"
    t="$DIR/churn$name.clrprof"
    if [ ! -s "$t" ]; then
        dotnet build -nologo -v q -c Release apps/Stress >/dev/null
        "$CLRPROF" record --agent "$AGENT" --instrument $sample -o "$t" -- \
            dotnet apps/Stress/bin/Release/net10.0/Stress.dll churn "$n" 8 >/dev/null
    fi
done
bins=("current=$CLRPROF")
[ -n "${BASELINE:-}" ] && bins=("baseline=$BASELINE" "${bins[@]}")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "round trace mode binary elapsed_s user_s max_rss_kb json_bytes trace_bytes"
for r in $(seq "$REPS"); do
    for t in churn5k churn20k churn20ks; do
        for mode in default full; do
            first=""
            for b in "${bins[@]}"; do
                name=${b%%=*} bin=${b#*=}
                flag=()
                if [ "$mode" = full ] && "$bin" report --help | grep -q -- --per-thread; then flag=(--per-thread); fi
                /usr/bin/time -o "$out/time" -f "%e %U %M" "$bin" report --format json "${flag[@]}" "$DIR/$t.clrprof" -o "$out/$name.json"
                echo "$r $t $mode $name $(cat "$out/time") $(stat -c %s "$out/$name.json") $(stat -c %s "$DIR/$t.clrprof")"
                if [ -z "$first" ]; then first=$name; else cmp -s "$out/$first.json" "$out/$name.json" || echo "  DIFFERENT OUTPUT: $first vs $name"; fi
            done
        done
    done
done
