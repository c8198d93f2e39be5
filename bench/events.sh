#!/usr/bin/env bash
# Overhead of clrprof's runtime events (exceptions, GCs, allocations, locks) on an allocation-heavy
# and an exception-heavy workload (apps/Events: `bench-alloc N`, `bench-exceptions N`), side by side:
#   plain      no profiler
#   no-events  clrprof record --no-exceptions --no-gc --alloc off (loads/JIT/threads only)
#   default    clrprof record (exceptions with the storm rate limit, GC, sampled allocations)
#   exc-exact  clrprof record --exact-exceptions (every exception observed, no storm sampling)
#   alloc-exact clrprof record --alloc exact (ObjectAllocated for every object)
# Each configuration runs REPS times, interleaved; the script prints the median of the workload's
# own elapsed time (measured inside the app, startup excluded) and of the whole process's wall time.
#
# A third workload, `bench-exc-mixed`, does about 10 µs of work per iteration and throws every 10th
# iteration (about 10 000 exceptions a second), closer to a busy app than a throw-only loop.
#
# The throw-only loop defaults to 300 000 exceptions (about 2 s): past the rate limit's burst of
# 5 000, so "default" shows the sampled steady state and "exc-exact" the cost of observing each one.
#
# PIN=CPU runs every process on that one CPU (taskset): the agent's own threads then compete with
# the app, so the numbers show the whole CPU cost, and runs vary less on a noisy VM.
#
# Usage: [PIN=1] bench/events.sh [REPS] [ALLOC_N] [EXC_N] [MIXED_N]
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-7}
ALLOC_N=${2:-20000000}
EXC_N=${3:-300000}
MIXED_N=${4:-50000}
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1

cargo build --release -q -p clrprof -p clrprof-agent
dotnet build -nologo -v q -c Release apps/Events >/dev/null
CLRPROF=target/release/clrprof
AGENT=target/release/libclrprof_agent.so
DLL=apps/Events/bin/Release/net10.0/Events.dll
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# run CONFIG ARGS... -> prints "<workload ms> <wall ms>"
run() {
    local cfg=$1
    shift
    local start end out pre=()
    if [ -n "${PIN:-}" ]; then pre=(taskset -c "$PIN"); fi
    start=$(date +%s%N)
    case $cfg in
        plain) out=$("${pre[@]}" dotnet "$DLL" "$@") ;;
        no-events) out=$("${pre[@]}" "$CLRPROF" record -o "$TMP/t.clrprof" --agent "$AGENT" --no-exceptions --no-gc --alloc off -- dotnet "$DLL" "$@" 2>/dev/null) ;;
        default) out=$("${pre[@]}" "$CLRPROF" record -o "$TMP/t.clrprof" --agent "$AGENT" -- dotnet "$DLL" "$@" 2>/dev/null) ;;
        exc-exact) out=$("${pre[@]}" "$CLRPROF" record -o "$TMP/t.clrprof" --agent "$AGENT" --exact-exceptions -- dotnet "$DLL" "$@" 2>/dev/null) ;;
        alloc-exact) out=$("${pre[@]}" "$CLRPROF" record -o "$TMP/t.clrprof" --agent "$AGENT" --alloc exact -- dotnet "$DLL" "$@" 2>/dev/null) ;;
    esac
    end=$(date +%s%N)
    echo "$(echo "$out" | awk '{print $3}') $(((end - start) / 1000000))"
}

median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.1f\n", (a[NR/2]+a[NR/2+1])/2}'; }

CONFIGS="plain no-events default exc-exact alloc-exact"
for workload in "bench-alloc $ALLOC_N" "bench-exceptions $EXC_N" "bench-exc-mixed $MIXED_N"; do
    for cfg in $CONFIGS; do : >"$TMP/$cfg.txt"; done
    for ((i = 0; i < REPS; i++)); do
        for cfg in $CONFIGS; do
            # shellcheck disable=SC2086
            run "$cfg" $workload >>"$TMP/$cfg.txt"
        done
    done
    base=$(awk '{print $1}' "$TMP/plain.txt" | median)
    noev=$(awk '{print $1}' "$TMP/no-events.txt" | median)
    echo
    echo "$workload ($REPS runs each, medians)"
    printf '%-12s %12s %10s %12s %14s\n' config workload_ms vs_plain vs_no_events process_wall_ms
    for cfg in $CONFIGS; do
        w=$(awk '{print $1}' "$TMP/$cfg.txt" | median)
        t=$(awk '{print $2}' "$TMP/$cfg.txt" | median)
        printf '%-12s %12s %+9.1f%% %+11.1f%% %14s\n' "$cfg" "$w" \
            "$(echo "$w $base" | awk '{print ($1/$2-1)*100}')" \
            "$(echo "$w $noev" | awk '{print ($1/$2-1)*100}')" "$t"
    done
done
