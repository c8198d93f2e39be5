#!/usr/bin/env bash
# The IL probe's cost per call: apps/Calls `many N [THREADS]` (a loop calling the tiny `NoInlining`
# `Counted.Tiny` N times per thread) with no profiler, with the agent loaded and nothing counted, under
# `record --count` (IL probes: one `lock xadd` per call on the method's counter) and under
# `record --instrument --counts-only` (enter/leave hooks, for reference); on one thread, and on THREADS
# threads calling the same counted method at once (all increment one shared counter: contention).
# Interleaved rep by rep, medians.
#
#   [CLRPROF=target/debug/clrprof] [N=200000000] [THREADS=2] bench/probe-cost.sh [REPS=5]
#
# Configurations: plain (no profiler), agent (`record --no-sample`: the agent loaded, no probe),
# count (`record --count --no-sample`: every Calls method probed, Tiny among them), hooks
# (`record --instrument --counts-only --no-sample`). No sampling, so that only the probes differ.
# Columns: the loop's time as Calls prints it (start-up left out; with threads, from their common
# start to the last one's end), its ratio to plain's median, and the nanoseconds each call adds over
# plain ((loop_ms - plain's loop_ms) / N: per call of one thread, the threads running at once).
# Debug builds optimise the agent (Cargo.toml), so a debug clrprof measures the agent as released.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-5}
N=${N:-200000000}
THREADS=${THREADS:-2}
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1
CLRPROF=${CLRPROF:-target/debug/clrprof}
[ -x "$CLRPROF" ] || { echo "probe-cost.sh: build first: cargo build -p clrprof -p clrprof-agent" >&2; exit 1; }
dotnet build -nologo -v q -c Release apps/Calls >/dev/null
DLL=apps/Calls/bin/Release/net10.0/Calls.dll
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
CONFIGS="plain agent count hooks"

run() {
    local cfg=$1 threads=$2 line
    local app=(dotnet "$DLL" many "$N" "$threads")
    case $cfg in
        plain) line=$("${app[@]}") ;;
        agent) line=$("$CLRPROF" record -o "$OUT/t.clrprof" --no-sample -- "${app[@]}" 2>/dev/null) ;;
        count) line=$("$CLRPROF" record -o "$OUT/t.clrprof" --no-sample --count -- "${app[@]}" 2>/dev/null) ;;
        hooks) line=$("$CLRPROF" record -o "$OUT/t.clrprof" --no-sample --instrument --counts-only -- "${app[@]}" 2>/dev/null) ;;
    esac
    rm -f "$OUT/t.clrprof"
    local ms
    ms=$(sed -n 's/.*loop_ms=\([0-9.]*\).*/\1/p' <<<"$line")
    [ -n "$ms" ] || { echo "probe-cost.sh: $cfg ($threads threads) printed no loop_ms: $line" >&2; exit 1; }
    echo "$cfg $threads $ms"
}

for ((r = 1; r <= REPS; r++)); do
    for t in 1 "$THREADS"; do
        for c in $CONFIGS; do run "$c" "$t"; done
    done
done | tee "$OUT/all" >&2

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
echo "apps/Calls many $N: medians of $REPS interleaved reps"
printf '%-8s %7s %12s %8s %14s\n' config threads loop_ms ratio ns_per_call
for t in 1 "$THREADS"; do
    p=$(awk -v t="$t" '$1=="plain" && $2==t {print $3}' "$OUT/all" | median)
    for c in $CONFIGS; do
        m=$(awk -v c="$c" -v t="$t" '$1==c && $2==t {print $3}' "$OUT/all" | median)
        printf '%-8s %7s %12.1f %7.2fx %+14.2f\n' "$c" "$t" "$m" "$(echo "$m / $p" | bc -l)" \
            "$(echo "($m - $p) * 1000000 / $N" | bc -l)"
    done
done
