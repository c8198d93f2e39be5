#!/usr/bin/env bash
# Cost of `record --async` on an ASP.NET Core service under wrk, side by side with plain and with
# `record`: apps/AsyncWeb served on loopback, wrk on one route (PATHS, default /items/1 — a handler
# that computes a little and awaits nothing of its own; /delay/1 awaits Task.Delay), after WARMUP
# seconds of the same load. Configurations, interleaved REPS times (each a fresh server):
#   plain    no profiler
#   record   clrprof record (defaults: sampling, runtime events)
#   async    clrprof record --async (adds the task library's events, the hosting events, the
#            logging events that name routes, and on .NET 9+ the wait events)
# Prints each run's requests per second as it goes, then the medians and the ratios to plain and
# to record, and the --async trace's size per request.
#
#   [NO_BUILD=1] [WARMUP=5] [CONN=16] [PIN=CPUS] [PATHS=/items/1] bench/async_web.sh [SECONDS=10] [REPS=5]
#
# PIN=0 pins the server (and the profiler's threads) to CPU 0 with taskset, leaving the others to
# wrk. Needs wrk (`apt-get install wrk`, done by scripts/bootstrap) and a release build (BIN=DIR
# with NO_BUILD=1 takes clrprof and the agent from DIR instead: a smoke run on a debug build).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
REPS=${2:-5}
WARMUP=${WARMUP:-5}
CONN=${CONN:-16}
PATHS=${PATHS:-/items/1}
CONFIGS="plain record async"
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1
command -v wrk >/dev/null || { echo "async_web.sh: wrk not found (apt-get install wrk)" >&2; exit 1; }
[ -n "${NO_BUILD:-}" ] || cargo build --release -q -p clrprof -p clrprof-agent
dotnet build -nologo -v q -c Release apps/AsyncWeb >/dev/null
BIN=${BIN:-target/release}
CLRPROF=$BIN/clrprof
AGENT=$BIN/libclrprof_agent.so
DLL=apps/AsyncWeb/bin/Release/net10.0/AsyncWeb.dll
TMP=$(mktemp -d)
PID=
cleanup() {
    [ -n "$PID" ] && kill -TERM "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

# A free loopback port.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# run CONFIG -> "req/s requests trace_bytes"
run() {
    local cfg=$1 pre=() url out="$TMP/$1.out" trace="$TMP/$1.clrprof" rps total=0 p
    [ -n "${PIN:-}" ] && pre=(taskset -c "$PIN")
    url="http://127.0.0.1:$(port)"
    rm -f "$trace"
    case $cfg in
        plain) "${pre[@]}" dotnet "$DLL" serve "$url" >"$out" 2>&1 & ;;
        record) "${pre[@]}" "$CLRPROF" record -o "$trace" --agent "$AGENT" -- dotnet "$DLL" serve "$url" >"$out" 2>&1 & ;;
        async) "${pre[@]}" "$CLRPROF" record -o "$trace" --agent "$AGENT" --async -- dotnet "$DLL" serve "$url" >"$out" 2>&1 & ;;
    esac
    PID=$!
    for _ in $(seq 600); do
        grep -q '^listening on' "$out" && break
        sleep 0.1
    done
    grep -q '^listening on' "$out" || { echo "async_web.sh: $cfg did not start" >&2; cat "$out" >&2; exit 1; }
    for p in $PATHS; do
        [ "$WARMUP" -gt 0 ] && wrk -t1 -c"$CONN" -d"${WARMUP}s" "$url$p" >/dev/null
    done
    rps=0
    for p in $PATHS; do
        r=$(wrk -t1 -c"$CONN" -d"${SECS}s" "$url$p" | sed -n 's/^Requests\/sec: *//p')
        rps=$(awk -v a="$rps" -v b="$r" 'BEGIN {print a + b}')
    done
    kill -TERM "$PID"
    wait "$PID" || true
    PID=
    total=$(sed -n 's/^requests=//p' "$out" | tail -1)
    echo "$rps ${total:-0} $(stat -c %s "$trace" 2>/dev/null || echo 0)"
}

declare -A RES
for rep in $(seq "$REPS"); do
    for cfg in $CONFIGS; do
        r=$(run "$cfg")
        echo "rep $rep $cfg: req/s requests trace_bytes = $r" >&2
        RES[$cfg]+="$r"$'\n'
    done
done

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
base=$(awk 'NF{print $1}' <<<"${RES[plain]}" | median)
rec=$(awk 'NF{print $1}' <<<"${RES[record]}" | median)
echo
echo "AsyncWeb $PATHS, wrk -t1 -c$CONN, ${WARMUP}s warm-up + ${SECS}s measured, $REPS interleaved runs each (medians)"
printf '%-8s %10s %9s %10s %14s\n' config req/s vs_plain vs_record "trace B/req"
for cfg in $CONFIGS; do
    r=$(awk 'NF{print $1}' <<<"${RES[$cfg]}" | median)
    bpr=$(awk 'NF && $2 > 0 {print $3 / $2}' <<<"${RES[$cfg]}" | median)
    printf '%-8s %10.0f %+8.1f%% %+9.1f%% %14.0f\n' "$cfg" "$r" \
        "$(awk -v a="$r" -v b="$base" 'BEGIN {print (a/b-1)*100}')" \
        "$(awk -v a="$r" -v b="$rec" 'BEGIN {print (a/b-1)*100}')" "${bpr:-0}"
done
