#!/usr/bin/env bash
# `record --count` (IL probes, inlining on) against no profiler and against `--instrument --counts-only`
# (enter/leave hooks, inlining off) on apps/JsonBench, or with APP=compilelib on the C# compiler used
# as a library (apps/CompileLib, Roslyn from NuGet: in the default scope), interleaved rep by rep,
# medians.
#
#   [CLRPROF=target/debug/clrprof] [APP=jsonbench|compilelib] [ROUNDS=30] [CONFIGS=...] bench/count.sh [REPS=5]
#
# Configurations: plain (no profiler), count (`--count`, the default app scope), count-all
# (`--count --count-scope all`: CoreLib and the framework counted too), hooks
# (`--instrument --counts-only`). Every `record` keeps its other defaults (sampling at 100 Hz, events).
# Columns: the work's own time as JsonBench prints it (after start-up; CompileLib prints none, so its
# column is empty: read the wall time, start-up included), the process's wall time, each over plain's
# median. ROUNDS is JsonBench's rounds, or CompileLib's compilations (default 5 there). Debug builds optimise the agent (Cargo.toml), so a debug clrprof measures the
# agent as released.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-5}
ROUNDS_SET=${ROUNDS:-}
ROUNDS=${ROUNDS:-30}
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1
CLRPROF=${CLRPROF:-target/debug/clrprof}
[ -x "$CLRPROF" ] || { echo "count.sh: build first: cargo build -p clrprof -p clrprof-agent" >&2; exit 1; }
case ${APP:-jsonbench} in
    jsonbench) NAME=JsonBench ;;
    compilelib) NAME=CompileLib ROUNDS=${ROUNDS_SET:-5} ;;
    *) echo "count.sh: APP is jsonbench or compilelib, not ${APP}" >&2; exit 2 ;;
esac
dotnet build -nologo -v q -c Release "apps/$NAME" >/dev/null
DLL=apps/$NAME/bin/Release/net10.0/$NAME.dll
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
CONFIGS=${CONFIGS:-plain count count-all hooks}

run() {
    local cfg=$1 t0 t1 line
    t0=$(date +%s%N)
    case $cfg in
        plain) line=$(dotnet "$DLL" "$ROUNDS") ;;
        count) line=$("$CLRPROF" record -o "$OUT/t.clrprof" --count -- dotnet "$DLL" "$ROUNDS" 2>/dev/null) ;;
        count-all) line=$("$CLRPROF" record -o "$OUT/t.clrprof" --count --count-scope all -- dotnet "$DLL" "$ROUNDS" 2>/dev/null) ;;
        hooks) line=$("$CLRPROF" record -o "$OUT/t.clrprof" --instrument --counts-only -- dotnet "$DLL" "$ROUNDS" 2>/dev/null) ;;
    esac
    t1=$(date +%s%N)
    rm -f "$OUT/t.clrprof"
    local w
    w=$(sed -n 's/.*work_ms=\([0-9.]*\).*/\1/p' <<<"$line")
    echo "$cfg ${w:--} $(( (t1 - t0) / 1000000 ))"
}

for ((r = 1; r <= REPS; r++)); do
    for c in $CONFIGS; do run "$c"; done
done | tee "$OUT/all" >&2

median() { sort -n | awk '{a[NR]=$1} END {if (NR) print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
pw=$(awk '$1=="plain" && $2!="-" {print $2}' "$OUT/all" | median)
pt=$(awk '$1=="plain" {print $3}' "$OUT/all" | median)
printf '%-10s %10s %8s %10s %8s\n' config work_ms ratio wall_ms ratio
for c in $CONFIGS; do
    w=$(awk -v c="$c" '$1==c && $2!="-" {print $2}' "$OUT/all" | median)
    t=$(awk -v c="$c" '$1==c {print $3}' "$OUT/all" | median)
    if [ -n "$pw" ] && [ -n "$w" ]; then
        printf '%-10s %10.1f %7.2fx %10d %7.2fx\n' "$c" "$w" "$(echo "$w / $pw" | bc -l)" "$t" "$(echo "$t / $pt" | bc -l)"
    else
        printf '%-10s %10s %8s %10d %7.2fx\n' "$c" - - "$t" "$(echo "$t / $pt" | bc -l)"
    fi
done
