#!/usr/bin/env bash
# The JSON report of traces with many threads (per-thread tables): time, CPU and peak memory of
# `clrprof report --format json` for this build and optionally a baseline binary, interleaved, REPS
# rounds; prints every run (the machine is shared: compare user CPU within a round).
#
#   bench/threads_json.sh [REPS=3]     CLRPROF=/path/to/clrprof (default target/release/clrprof)
#                                      BASELINE=/path/to/old/clrprof to compare
#
# The traces are recorded once into target/bench-traces/ (delete them to record again):
#   churn5k.clrprof   apps/Stress churn 5000 8 under --instrument --no-sample (5,000 threads)
#   churn20k.clrprof  apps/Stress churn 20000 8 under --instrument --no-sample (20,000 threads)
# Each run's output is compared with the first binary's: the reports must be byte-identical.
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
for n in 5000 20000; do
    t="$DIR/churn$((n / 1000))k.clrprof"
    if [ ! -s "$t" ]; then
        dotnet build -nologo -v q -c Release apps/Stress >/dev/null
        "$CLRPROF" record --agent "$AGENT" --instrument --no-sample -o "$t" -- \
            dotnet apps/Stress/bin/Release/net10.0/Stress.dll churn "$n" 8 >/dev/null
    fi
done
bins=("current=$CLRPROF")
[ -n "${BASELINE:-}" ] && bins=("baseline=$BASELINE" "${bins[@]}")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "round trace binary elapsed_s user_s max_rss_kb"
for r in $(seq "$REPS"); do
    for t in churn5k churn20k; do
        first=""
        for b in "${bins[@]}"; do
            name=${b%%=*} bin=${b#*=}
            /usr/bin/time -o "$out/time" -f "%e %U %M" "$bin" report --format json "$DIR/$t.clrprof" -o "$out/$name.json"
            echo "$r $t $name $(cat "$out/time")"
            if [ -z "$first" ]; then first=$name; else cmp -s "$out/$first.json" "$out/$name.json" || echo "  DIFFERENT OUTPUT: $first vs $name"; fi
        done
    done
done
