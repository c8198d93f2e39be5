#!/usr/bin/env bash
# Reading big traces: time and peak memory of `clrprof report` (hot spots, JSON, call tree) and
# `clrprof export -f collapsed` on large real traces, for this build and optionally a baseline
# clrprof binary, interleaved, REPS repetitions each; prints medians.
#
#   bench/report.sh [REPS=5]          BASELINE=/path/to/old/clrprof to compare
#
# The traces are recorded once into target/bench-traces/ (delete it to record them again):
#   sampled.clrprof       apps/SamplingBench cpu (10 busy threads) for 60 s at 1 kHz requested
#   instrumented.clrprof  apps/JsonBench 30 under --instrument (call-tree deltas)
#   flow.clrprof          apps/JsonBench 20 under --instrument --flow (~250 MB, 14 M flow events)
# Needs a release build (`cargo build --release --workspace`) and GNU time (/usr/bin/time).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-5}
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1
CLRPROF=$PWD/target/release/clrprof
[ -x "$CLRPROF" ] || { echo "build first: cargo build --release --workspace" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "needs GNU time: apt-get install time" >&2; exit 1; }
DIR=target/bench-traces
mkdir -p "$DIR"
if [ ! -s "$DIR/sampled.clrprof" ]; then
    dotnet build -nologo -v q -c Release apps/SamplingBench >/dev/null
    "$CLRPROF" record --rate 1000 -o "$DIR/sampled.clrprof" -- \
        dotnet apps/SamplingBench/bin/Release/net10.0/SamplingBench.dll cpu 60 >/dev/null
fi
if [ ! -s "$DIR/instrumented.clrprof" ]; then
    dotnet build -nologo -v q -c Release apps/JsonBench >/dev/null
    "$CLRPROF" record --instrument -o "$DIR/instrumented.clrprof" -- \
        dotnet apps/JsonBench/bin/Release/net10.0/JsonBench.dll 30 >/dev/null
fi
if [ ! -s "$DIR/flow.clrprof" ]; then
    dotnet build -nologo -v q -c Release apps/JsonBench >/dev/null
    "$CLRPROF" record --instrument --flow -o "$DIR/flow.clrprof" -- \
        dotnet apps/JsonBench/bin/Release/net10.0/JsonBench.dll 20 >/dev/null
fi

bins=("current=$CLRPROF")
[ -n "${BASELINE:-}" ] && bins=("baseline=$BASELINE" "${bins[@]}")
# Native frames are named from this machine's files by both binaries alike.
cases=("hotspots|report @"
       "json|report @ --format json"
       "calltree|report @ --view calltree --depth 8"
       "collapsed|export @ -f collapsed -o -")
# TRACES="flow" limits the run to some of them.
traces=(${TRACES:-sampled instrumented flow})
# The flow trace's JSON report lists every one of its 14 M flow events: left out.
skip() { [ "$1 $2" = "flow json" ]; }

declare -A secs rss
for trace in "${traces[@]}"; do
    f="$DIR/$trace.clrprof"
    for rep in $(seq "$REPS"); do
        for c in "${cases[@]}"; do
            name=${c%%|*}; args=${c#*|}
            skip "$trace" "$name" && continue
            for b in "${bins[@]}"; do
                label=${b%%=*}; bin=${b#*=}
                # shellcheck disable=SC2086
                /usr/bin/time -f '%e %M' -o "$DIR/time.out" "$bin" ${args/@/$f} >/dev/null 2>&1
                out=$(tail -1 "$DIR/time.out")
                key="$trace $name $label"
                secs[$key]+="${out% *} "
                rss[$key]+="${out#* } "
            done
        done
    done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
printf '%-13s %-10s %-9s %10s %12s %8s\n' trace case binary "median s" "peak RSS MB" "MB/s"
[ "$REPS" -gt 0 ] || exit 0
for trace in "${traces[@]}"; do
    size=$(stat -c %s "$DIR/$trace.clrprof")
    for c in "${cases[@]}"; do
        name=${c%%|*}
        skip "$trace" "$name" && continue
        for b in "${bins[@]}"; do
            label=${b%%=*}
            key="$trace $name $label"
            s=$(median <<<"${secs[$key]}")
            m=$(median <<<"${rss[$key]}")
            printf '%-13s %-10s %-9s %10.2f %12.0f %8.0f\n' "$trace" "$name" "$label" "$s" "$(echo "$m/1024" | bc -l)" \
                "$(echo "$size/1048576/$s" | bc -l)"
        done
    done
    printf '%-13s size %.0f MB\n' "$trace" "$(echo "$size/1048576" | bc -l)"
done
