#!/usr/bin/env bash
# Heap snapshot cost on apps/HeapLeak's scale mode: for each heap size (live objects), the app is
# started, builds its heap and waits; `clrprof heap PID` is then run REPS times on it. For each
# snapshot: the pause (the agent's measure: the induced collection and the heap walk, as the
# duration of the heap-dump session's start; and the app's own, the longest gap its 1 ms ticker
# saw; and the part of it the agent spent taking the events), the objects and bytes the snapshot holds, the trace's size per object, and the target's
# memory: resident before, after, and its peak during the snapshot (VmHWM, reset before each one
# through /proc/PID/clear_refs). Prints one line per snapshot, then for each size the floor: the
# time of a plain full blocking collection of the same heap (GC.Collect in the app, 3 times).
#
#   bench/heap.sh [REPS=3] [SIZES="1000000 5000000 10000000"] [PROFILE=debug]
# (the agent is optimised in debug builds too: see Cargo.toml)
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-3}
SIZES=${2:-"1000000 5000000 10000000"}
PROFILE=${3:-debug}
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1
CLRPROF=target/$PROFILE/clrprof
AGENT=target/$PROFILE/libclrprof_agent.so
[ -x "$CLRPROF" ] || { echo "build first: cargo build -p clrprof -p clrprof-agent" >&2; exit 1; }
dotnet build -nologo -v q -c Release apps/HeapLeak >/dev/null
OUT=$(mktemp -d)
APP=
cleanup() {
    [ -n "$APP" ] && kill "$APP" 2>/dev/null || true
    exec 3>&- 2>/dev/null || true
    rm -rf "$OUT"
}
trap cleanup EXIT
kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
printf 'objects\trep\tsnap_objects\tsnap_MB\tpause_ms(agent)\tin_agent_ms\tpause_ms(app)\tms_per_M_obj\tms_per_GB\tRSS_before_MB\tRSS_after_MB\tpeak_MB\tadded_peak_MB\ttrace_MB\tbytes_per_obj\n'
for N in $SIZES; do
    rm -f "$OUT/in" && mkfifo "$OUT/in"
    dotnet apps/HeapLeak/bin/Release/net10.0/HeapLeak.dll scale "$N" <"$OUT/in" >"$OUT/app.out" 2>&1 &
    APP=$!
    exec 3>"$OUT/in"
    for _ in $(seq 600); do grep -q '^ready' "$OUT/app.out" && break; sleep 0.2; done
    echo >&3 # reset the app's pause ticker after the build
    sleep 1
    for r in $(seq "$REPS"); do
        before=$(kb "$APP" VmRSS)
        echo 5 >"/proc/$APP/clear_refs"
        "$CLRPROF" heap "$APP" --agent "$AGENT" -o "$OUT/h.clrprof" 2>"$OUT/cli.err" || { cat "$OUT/cli.err"; exit 1; }
        peak=$(kb "$APP" VmHWM)
        after=$(kb "$APP" VmRSS)
        echo >&3
        sleep 0.5
        app_pause=$(grep '^pause' "$OUT/app.out" | tail -1 | sed 's/.*max_ms=//')
        line=$(grep 'heap snapshot:' "$OUT/cli.err")
        objs=$(echo "$line" | sed -E 's/.*snapshot: ([0-9]+) objects.*/\1/')
        bytes=$(echo "$line" | sed -E 's/.*objects, ([0-9]+) bytes.*/\1/')
        pause=$(echo "$line" | sed -E 's/.*paused ([0-9.]+) ms.*/\1/')
        inagent=$(echo "$line" | sed -E 's/.*\(([0-9.]+) ms of it in the agent.*/\1/')
        size=$(stat -c %s "$OUT/h.clrprof")
        awk -v n="$N" -v r="$r" -v o="$objs" -v b="$bytes" -v p="$pause" -v ia="$inagent" -v ap="$app_pause" -v rb="$before" -v ra="$after" -v pk="$peak" -v s="$size" 'BEGIN {
            printf "%d\t%d\t%d\t%.0f\t%.1f\t%s\t%s\t%.1f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.1f\t%.2f\n", n, r, o, b/1048576, p, ia, ap, p/(o/1e6), p/(b/1073741824), rb/1024, ra/1024, pk/1024, (pk-rb)/1024, s/1048576, s/o }'
    done
    for _ in 1 2 3; do echo gc >&3; sleep 0.5; done
    sleep 1
    echo "# $N objects: plain full blocking GC ms: $(grep '^gc ms=' "$OUT/app.out" | sed 's/gc ms=//' | tr '\n' ' ')"
    exec 3>&-
    wait "$APP" || true
    APP=
done
