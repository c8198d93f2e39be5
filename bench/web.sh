#!/usr/bin/env bash
# Trace growth of a busy web server: apps/Web (ASP.NET Core) under wrk, requests rotating over
# /lock, /json, /cpu and /throw (bench/web-mix.lua), recorded with clrprof's defaults and with
# --instrument, plus the same load without a profiler for throughput. For each run it prints the
# requests per second wrk saw, the trace's growth under steady load (bytes written during the
# measured SECONDS, after WARMUP seconds of the same load: JIT tiering and first-seen stacks are a
# start-up cost) and its size per second of the whole run; the last run of each configuration is
# broken down by record type (trace_stats). MIX (space-separated paths) replaces the request mix.
#
#   [PROFILE=debug] [NO_BUILD=1] [PIN=CPUS] [BASE=DIR] [WARMUP=10] [MIX="/lock /json"] bench/web.sh [SECONDS=10] [REPS=3] [CONFIGS="plain default instrument"]
#
# CONFIGS may also name no-sample, alloc-off, alloc-uncapped (every allocation sample kept), no-locks (the defaults less that recorder) and quiet
# (every recorder off). BASE=DIR adds configurations base-default and base-instrument: the same with DIR/clrprof (and the
# agent next to it), e.g. a build of an earlier commit, for before/after figures in one run.
# PIN=0,1 pins the server to those CPUs (taskset); WRK_PIN=1 pins wrk (unpinned otherwise): with
# PIN=0 WRK_PIN=1 the server (and the profiler's threads) and the load generator each get a CPU. Needs wrk
# (`apt-get install wrk`, done by scripts/bootstrap) and a release build (the script builds it).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
REPS=${2:-3}
CONFIGS=${3:-plain default instrument}
WARMUP=${WARMUP:-10}
export MIX=${MIX:-/lock /json?n=50 /cpu?n=2000 /throw}
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1
command -v wrk >/dev/null || { echo "web.sh: wrk not found (apt-get install wrk)" >&2; exit 1; }
# PROFILE=debug uses the debug build (its agent is optimised too); NO_BUILD=1 skips cargo.
PROFILE=${PROFILE:-release}
BIN=target/$PROFILE
if [ -z "${NO_BUILD:-}" ]; then
    flag=(--release); [ "$PROFILE" = debug ] && flag=()
    cargo build "${flag[@]}" -q -p clrprof -p clrprof-agent ${CARGO_FLAGS:-}
    cargo build "${flag[@]}" -q -p clrprof-trace --example trace_stats ${CARGO_FLAGS:-}
fi
dotnet build -nologo -v q -c Release apps/Web >/dev/null
CLRPROF=$BIN/clrprof
DLL=apps/Web/bin/Release/net10.0/Web.dll
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# run CONFIG REP -> "rps growth_Bps total_Bps"
run() {
    local cfg=$1 rep=$2 pre=() out="$TMP/$1-$2.out" trace="$TMP/$1.clrprof" pid url t0 t1 t2 s0 s1 end rps
    [ -n "${PIN:-}" ] && pre=(taskset -c "$PIN")
    local wrkpre=()
    [ -n "${WRK_PIN:-}" ] && wrkpre=(taskset -c "$WRK_PIN")
    rm -f "$trace"
    t0=$(date +%s%N)
    case $cfg in
        plain) "${pre[@]}" dotnet "$DLL" >"$out" 2>&1 & ;;
        default) "${pre[@]}" "$CLRPROF" record -o "$trace" -- dotnet "$DLL" >"$out" 2>&1 & ;;
        instrument) "${pre[@]}" "$CLRPROF" record --instrument -o "$trace" -- dotnet "$DLL" >"$out" 2>&1 & ;;
        # The defaults less one recorder, or with every recorder off: where the cost goes.
        no-sample) "${pre[@]}" "$CLRPROF" record --no-sample -o "$trace" -- dotnet "$DLL" >"$out" 2>&1 & ;;
        # The defaults with every allocation sample kept (no CLRPROF_ALLOC_RATE thinning).
        alloc-uncapped) CLRPROF_ALLOC_RATE=0 "${pre[@]}" "$CLRPROF" record -o "$trace" -- dotnet "$DLL" >"$out" 2>&1 & ;;
        alloc-off) "${pre[@]}" "$CLRPROF" record --alloc off -o "$trace" -- dotnet "$DLL" >"$out" 2>&1 & ;;
        no-locks) "${pre[@]}" "$CLRPROF" record --no-locks -o "$trace" -- dotnet "$DLL" >"$out" 2>&1 & ;;
        quiet) "${pre[@]}" "$CLRPROF" record --no-classes --no-sample --no-exceptions --no-gc --alloc off --no-locks \
            -o "$trace" -- dotnet "$DLL" >"$out" 2>&1 & ;;
        base-default) "${pre[@]}" "$BASE/clrprof" record -o "$trace" -- dotnet "$DLL" >"$out" 2>&1 & ;;
        base-instrument) "${pre[@]}" "$BASE/clrprof" record --instrument -o "$trace" -- dotnet "$DLL" >"$out" 2>&1 & ;;
        *) echo "unknown config $cfg" >&2; exit 1 ;;
    esac
    pid=$!
    for _ in $(seq 600); do
        url=$(sed -n 's/^listening on //p' "$out" | head -1)
        [ -n "$url" ] && break
        sleep 0.1
    done
    [ -n "$url" ] || { echo "web.sh: $cfg did not start" >&2; cat "$out" >&2; kill "$pid"; exit 1; }
    # Warm-up (JIT tiering, first exceptions and stacks) under the same load, not measured.
    [ "$WARMUP" -gt 0 ] && "${wrkpre[@]}" wrk -t2 -c16 -d"${WARMUP}s" -s bench/web-mix.lua "$url" >/dev/null
    s0=$(stat -c %s "$trace" 2>/dev/null || echo 0)
    [ -f "$trace" ] && cp "$trace" "$TMP/$cfg.start.clrprof"
    t1=$(date +%s%N)
    rps=$("${wrkpre[@]}" wrk -t2 -c16 -d"${SECS}s" -s bench/web-mix.lua "$url" | sed -n 's/^Requests\/sec: *//p')
    s1=$(stat -c %s "$trace" 2>/dev/null || echo 0)
    t2=$(date +%s%N)
    [ -f "$trace" ] && cp "$trace" "$TMP/$cfg.end.clrprof"
    kill -TERM "$pid"
    wait "$pid" || true
    end=$(date +%s%N)
    grep -q '^requests=' "$out" || echo "web.sh: $cfg rep $rep: the server did not report its requests" >&2
    local size
    size=$(stat -c %s "$trace" 2>/dev/null || echo 0)
    echo "$rps $(( (s1 - s0) * 1000000000 / (t2 - t1) )) $(( size * 1000000000 / (end - t0) ))"
}

declare -A RES
for rep in $(seq "$REPS"); do
    for cfg in $CONFIGS; do
        r=$(run "$cfg" "$rep")
        echo "rep $rep $cfg: rps growth_B/s total_B/s = $r" >&2
        RES[$cfg]+="$r"$'\n'
    done
done

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
printf '%-11s %10s %14s %14s\n' config req/s "growth KB/s" "total KB/s"
for cfg in $CONFIGS; do
    rps=$(awk 'NF{print $1}' <<<"${RES[$cfg]}" | median)
    g=$(awk 'NF{print $2/1000}' <<<"${RES[$cfg]}" | median)
    t=$(awk 'NF{print $3/1000}' <<<"${RES[$cfg]}" | median)
    printf '%-11s %10s %14s %14s\n' "$cfg" "$rps" "$g" "$t"
done
for cfg in $CONFIGS; do
    [ -f "$TMP/$cfg.clrprof" ] || continue
    echo "--- $cfg (last run): $(stat -c %s "$TMP/$cfg.clrprof") bytes; written under the measured load:"
    "$BIN"/examples/trace_stats "$TMP/$cfg.end.clrprof" 12 "$TMP/$cfg.start.clrprof"
done
