#!/usr/bin/env bash
# Sampling overhead measured by CPU time for a fixed amount of work (survives a shared machine better
# than throughput): apps/OverheadBench runs BUSY threads that share a fixed amount of work (WORK=1200
# is about 3 s of wall time on a quiet 2 vCPU guest, whatever BUSY: each thread does WORK × CPUs /
# BUSY units, about 2.5 ms of one core each) beside BLOCKED threads that wait, and prints
# the work's wall time, the process's CPU, the busy threads' own CPU (the signal handler's time is in
# it), CPU per thread group (the sampler thread, the writer, the runtime's threads) and the unit costs
# of the sampler's primitives measured in the same process (clock reads, /proc reads).
#
#   [SHAPES="2:0 10:0 2:200 64:0 2:62 2:254 2:998"] [WORK=1200] [CONFIGS="plain default no-sample floor"]
#   [CLRPROF=target/release/clrprof] [BASE=DIR] [KEEP=FILE] [RESULTS=FILE] bench/overhead.sh [REPS=5]
#
# SHAPES are BUSY:BLOCKED[:WAKE_MS] (blocked threads wake every WAKE_MS ms when given). Configurations:
#   plain      no profiler
#   default    `clrprof record` with its defaults (100 Hz CPU and wall sampling)
#   no-sample  `record --no-sample` (every recorder but the sampler)
#   floor      `record` with CLRPROF_SAMPLER_FLOOR=1: the same timers and signals, a handler that
#              returns at once (what any per-thread CPU-timer sampler pays at this rate)
#   rate-N     `record --rate N`
#   base       `record` with BASE/clrprof (and the agent beside it): another build, for before/after
# Configurations run interleaved (rep by rep, shape by shape); the table shows medians. Columns:
#   work       plain's median work wall time / this configuration's (throughput ratio; the load of a
#              shared machine moves it, read the CPU columns there)
#   cpu        process CPU of this configuration / plain's (whole process, start-up included)
#   busy+      the busy threads' extra CPU over plain's, % (handler + walk + signal delivery)
#   ns/sample  that extra CPU per CPU sample (samples = busy CPU / period): over plain; "-floor" over
#              the floor's (the handler's own work)
#   sampler    the sampler thread's CPU per second of the process's life, ms/s, and per wall tick per
#              thread looked at, ns (from the trace's SamplerStats)
#   writer     the writer thread's CPU, ms/s
#   runtime    the runtime's own threads (EventPipe, tiered compilation, ...), ms/s
# Needs a build of clrprof and its agent (debug builds optimise the agent: `cargo build -p clrprof
# -p clrprof-agent`), and of the trace dump example (`cargo build -p clrprof-trace --example dump`,
# same profile).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-5}
SHAPES=${SHAPES:-2:0 10:0 2:200 64:0 2:62 2:254 2:998}
WORK=${WORK:-1200}
CONFIGS=${CONFIGS:-plain default no-sample floor}
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1
if [ -z "${CLRPROF:-}" ]; then
    CLRPROF=target/release/clrprof
    [ -x "$CLRPROF" ] || CLRPROF=target/debug/clrprof
fi
[ -x "$CLRPROF" ] || { echo "overhead.sh: build first: cargo build -p clrprof -p clrprof-agent" >&2; exit 1; }
DUMP=$(dirname "$CLRPROF")/examples/dump
[ -x "$DUMP" ] || { echo "overhead.sh: build the dump example: cargo build -p clrprof-trace --example dump" >&2; exit 1; }
dotnet build -nologo -v q -c Release apps/OverheadBench >/dev/null
DLL=apps/OverheadBench/bin/Release/net10.0/OverheadBench.dll
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<" $2"; }

# run CONFIG BUSY BLOCKED WAKE -> one line of key=value figures
run() {
    local cfg=$1 busy=$2 blocked=$3 wake=$4 line trace="$OUT/t.clrprof" t0 t1 stats="" work
    work=$(( WORK * $(nproc) / busy ))
    [ "$work" -lt 1 ] && work=1
    rm -f "$trace"
    t0=$(date +%s%N)
    case $cfg in
        plain) line=$(dotnet "$DLL" "$busy" "$blocked" "$work" "$wake") ;;
        default) line=$("$CLRPROF" record -o "$trace" -- dotnet "$DLL" "$busy" "$blocked" "$work" "$wake" 2>/dev/null) ;;
        no-sample) line=$("$CLRPROF" record --no-sample -o "$trace" -- dotnet "$DLL" "$busy" "$blocked" "$work" "$wake" 2>/dev/null) ;;
        floor) line=$(CLRPROF_SAMPLER_FLOOR=1 "$CLRPROF" record -o "$trace" -- dotnet "$DLL" "$busy" "$blocked" "$work" "$wake" 2>/dev/null) ;;
        base) line=$("$BASE/clrprof" record -o "$trace" -- dotnet "$DLL" "$busy" "$blocked" "$work" "$wake" 2>/dev/null) ;;
        rate-*) line=$("$CLRPROF" record --rate "${cfg#rate-}" -o "$trace" -- dotnet "$DLL" "$busy" "$blocked" "$work" "$wake" 2>/dev/null) ;;
        *) echo "overhead.sh: unknown configuration $cfg" >&2; exit 1 ;;
    esac
    t1=$(date +%s%N)
    grep -q 'work_ms=' <<<"$line" || { echo "overhead.sh: $cfg $busy:$blocked failed" >&2; return 0; }
    if [ -f "$trace" ]; then
        # The last SamplerStats: wall ticks, the sampler thread's CPU, CPU samples.
        local s k
        s=$("$DUMP" "$trace" | grep 'SamplerStats' | tail -1)
        for k in cpu_samples wall_ticks threads sampler_cpu_ns; do
            stats="$stats $k=$(sed -n "s/.*[ {]$k: \([0-9]*\).*/\1/p" <<<"$s")"
        done
        stats="$stats trace_bytes=$(stat -c %s "$trace")"
    fi
    echo "$line life_ms=$(( (t1 - t0) / 1000000 ))$stats"
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print ""; else print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "# $(date -u +%FT%TZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), WORK=$WORK, $REPS reps, $CLRPROF, configs: $CONFIGS"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
# RESULTS=FILE (a KEEP=FILE of an earlier run, with the same SHAPES and CONFIGS) prints its table again.
[ -n "${RESULTS:-}" ] && { cp "$RESULTS" "$OUT/results"; REPS=0; }
for rep in $(seq "$REPS"); do
    for shape in $SHAPES; do
        IFS=: read -r busy blocked wake <<<"$shape"
        wake=${wake:-0}
        for cfg in $CONFIGS; do
            r=$(run "$cfg" "$busy" "$blocked" "$wake")
            [ -n "$r" ] && echo "shape=$shape cfg=$cfg rep=$rep $r" >>"$OUT/results"
        done
    done
    echo "# rep $rep done $(date -u +%T), load $(cut -d' ' -f1 /proc/loadavg)" >&2
done
[ -n "${KEEP:-}" ] && cp "$OUT/results" "$KEEP"

printf '\n%-10s %-10s %6s %6s %7s %10s %10s %9s %9s %8s %8s %8s\n' shape config work cpu busy+ ns/sample -floor "smp ms/s" "ns/thr" "wr ms/s" "rt ms/s" "KB/s"
for shape in $SHAPES; do
    sel() { grep "^shape=$shape cfg=$1 " "$OUT/results" || true; }
    med() { sel "$1" | while read -r l; do field "$2" "$l"; done | median; }
    IFS=: read -r busy blocked _ <<<"$shape"
    p_work=$(med plain work_ms); p_cpu=$(med plain proc_cpu_ns); p_busy=$(med plain busy_cpu_ns)
    f_busy=$(med floor busy_cpu_ns)
    for cfg in $CONFIGS; do
        [ -z "$(sel "$cfg")" ] && continue
        w=$(med "$cfg" work_ms); c=$(med "$cfg" proc_cpu_ns); b=$(med "$cfg" busy_cpu_ns)
        # Per-run derived figures, then medians.
        per() { sel "$cfg" | while read -r l; do awk -v l="$l" "BEGIN{n=split(l,a,\" \"); for(i=1;i<=n;i++){split(a[i],kv,\"=\"); v[kv[1]]=kv[2]} $1}"; done | median; }
        smp=$(per 'if (v["life_ms"]>0) print v["cpu_clrprof-sampler"]/1e6/(v["life_ms"]/1000)')
        wr=$(per 'if (v["life_ms"]>0) print (v["cpu_clrprof-writer"]+0)/1e6/(v["life_ms"]/1000)')
        rt=$(per 'if (v["life_ms"]>0) { s=0; for (k in v) if (k ~ /^cpu__NET/) s+=v[k]; print s/1e6/(v["life_ms"]/1000) }')
        kbs=$(per 'if (v["life_ms"]>0 && v["trace_bytes"]>0) print v["trace_bytes"]/1024/(v["life_ms"]/1000)')
        thr=$(per 'if (v["wall_ticks"]>0) { t=v["threads"]; if (t>64) t=64; if (t>0) print v["sampler_cpu_ns"]/v["wall_ticks"]/t }')
        # CPU samples: each busy thread's CPU timer fires once per 10 ms of its CPU (default rate).
        nsps=$(awk -v b="$b" -v p="$p_busy" 'BEGIN{ s=b/1e7; if (s>0 && p>0) printf "%.0f", (b-p)/s; else print "-" }')
        nspf=$(awk -v b="$b" -v f="$f_busy" 'BEGIN{ s=b/1e7; if (s>0 && f>0) printf "%.0f", (b-f)/s; else print "-" }')
        # Ratios against plain ("-" when plain was not run).
        ratio() { awk -v a="$1" -v b="$2" -v f="$3" 'BEGIN{ if (a>0 && b>0) printf f, (f ~ /%%/ ? (a/b-1)*100 : a/b); else print "-" }'; }
        printf '%-10s %-10s %6s %6s %7s %10s %10s %9.2f %9s %8.2f %8.2f %8s\n' "$shape" "$cfg" \
            "$(ratio "$p_work" "$w" '%.3f')" "$(ratio "$c" "$p_cpu" '%.3f')" "$(ratio "$b" "$p_busy" '%+.2f%%')" \
            "$nsps" "$nspf" "${smp:-0}" "${thr:--}" "${wr:-0}" "${rt:-0}" "${kbs:--}"
    done
done
echo
echo "unit costs (medians over every run): $(for k in clock_mono_ns clock_thread_ns proc_stat_ns proc_schedstat_ns; do
    printf '%s=%s ' "$k" "$(while read -r l; do field "$k" "$l"; done <"$OUT/results" | median)"; done)"
