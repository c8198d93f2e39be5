#!/usr/bin/env bash
# Cost of `record --async` (the task library's events for logical async stacks) on an async app
# at two await rates, side by side: apps/AsyncShape's bench mode runs PARALLEL loops that each
# await an async method which yields, then burn a fixed amount of CPU (so the profiler's cost shows
# as fewer awaits done in the same time). WORK_10K and WORK_100K set the CPU per await so that the
# plain run does about 10,000 and 100,000 awaits a second on the machine (check the plain figures
# printed). Configurations, interleaved REPS times:
#   plain    no profiler
#   record   clrprof record (defaults: sampling, runtime events)
#   async    clrprof record --async
# Prints the median awaits per second of each and the ratios to plain and to record.
#
# NO_BUILD=1 uses the release binaries as they are.
#
# Usage: [NO_BUILD=1] [RUN_SECONDS=3] [PARALLEL=2] [WORK_10K=20000] [WORK_100K=1000] bench/async.sh [REPS]
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-5}
SECONDS_RUN=${RUN_SECONDS:-3}
PARALLEL=${PARALLEL:-2}
WORK_10K=${WORK_10K:-20000}
WORK_100K=${WORK_100K:-1000}
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1

[ -n "${NO_BUILD:-}" ] || cargo build --release -q -p clrprof -p clrprof-agent
dotnet build -nologo -v q -c Release apps/AsyncShape >/dev/null
CLRPROF=target/release/clrprof
AGENT=target/release/libclrprof_agent.so
DLL=apps/AsyncShape/bin/Release/net10.0/AsyncShape.dll
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# run CONFIG WORK -> prints the awaits per second
run() {
    local out args=(bench "$SECONDS_RUN" "$2" "$PARALLEL")
    case $1 in
        plain) out=$(dotnet "$DLL" "${args[@]}") ;;
        record) out=$("$CLRPROF" record -o "$TMP/t.clrprof" --agent "$AGENT" -- dotnet "$DLL" "${args[@]}" 2>/dev/null) ;;
        async) out=$("$CLRPROF" record -o "$TMP/t.clrprof" --agent "$AGENT" --async -- dotnet "$DLL" "${args[@]}" 2>/dev/null) ;;
    esac
    echo "$out" | awk '/^awaits_per_s/ {print $2}'
    if [ "$1" = async ]; then ls -l "$TMP/t.clrprof" | awk '{print $5}' >>"$TMP/size.$2.txt"; fi
}

median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.1f\n", (a[NR/2]+a[NR/2+1])/2}'; }

CONFIGS="plain record async"
for work in "$WORK_10K" "$WORK_100K"; do
    for cfg in $CONFIGS; do : >"$TMP/$cfg.$work.txt"; done
    for ((i = 0; i < REPS; i++)); do
        for cfg in $CONFIGS; do
            run "$cfg" "$work" >>"$TMP/$cfg.$work.txt"
        done
    done
    base=$(median <"$TMP/plain.$work.txt")
    rec=$(median <"$TMP/record.$work.txt")
    echo
    echo "work $work per await, $PARALLEL loops, ${SECONDS_RUN}s ($REPS runs each, medians; trace of --async $(median <"$TMP/size.$work.txt") bytes)"
    printf '%-8s %14s %10s %11s\n' config awaits_per_s vs_plain vs_record
    for cfg in $CONFIGS; do
        r=$(median <"$TMP/$cfg.$work.txt")
        printf '%-8s %14s %+9.1f%% %+10.1f%%\n' "$cfg" "$r" \
            "$(echo "$r $base" | awk '{print ($1/$2-1)*100}')" "$(echo "$r $rec" | awk '{print ($1/$2-1)*100}')"
    done
done
