#!/usr/bin/env bash
# The CPU sampler's cost per sample on the sampled thread, from `perf record` of apps/OverheadBench
# (BUSY threads of fixed work): the share of the busy threads' perf samples that lies in the agent's
# signal handler (libclrprof_agent.so) and in the kernel, for plain runs, the floor (timers and
# signals, a handler that returns at once: CLRPROF_SAMPLER_FLOOR=1) and `record`, at a high CPU
# sampling rate so that the handler's share is large enough to count. Per sample:
#   ns = share × the busy threads' CPU time / CPU samples taken (busy CPU × RATE)
# The kernel's extra share over plain is signal delivery (timer expiry, signal frame, sigreturn);
# the agent's share is the handler and its walk.
#
#   [RATE=5000] [BUSY=2] [WORK=600] [FREQ=2999] [REPS=3] bench/overhead-perf.sh
#
# Needs perf (`apt-get install linux-perf`) and a build of clrprof and its agent.
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${RATE:-5000}
BUSY=${BUSY:-2}
WORK=${WORK:-600}
FREQ=${FREQ:-2999}
REPS=${REPS:-3}
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1
command -v perf >/dev/null || { echo "overhead-perf.sh: perf not found (apt-get install linux-perf)" >&2; exit 1; }
if [ -z "${CLRPROF:-}" ]; then
    CLRPROF=target/release/clrprof
    [ -x "$CLRPROF" ] || CLRPROF=target/debug/clrprof
fi
dotnet build -nologo -v q -c Release apps/OverheadBench >/dev/null
DLL=apps/OverheadBench/bin/Release/net10.0/OverheadBench.dll
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg), rate $RATE Hz, $BUSY busy threads, WORK=$WORK, perf -F $FREQ, $CLRPROF"
printf '%-8s %4s %10s %10s %10s %12s %12s\n' config rep busy_ms "kernel %" "agent %" "kernel ns/smp" "agent ns/smp"
for rep in $(seq "$REPS"); do
    for cfg in plain floor default; do
        case $cfg in
            plain) cmd=(dotnet "$DLL" "$BUSY" 0 "$WORK") ;;
            floor) cmd=(env CLRPROF_SAMPLER_FLOOR=1 "$CLRPROF" record --rate "$RATE" -o "$OUT/t.clrprof" -- dotnet "$DLL" "$BUSY" 0 "$WORK") ;;
            default) cmd=("$CLRPROF" record --rate "$RATE" -o "$OUT/t.clrprof" -- dotnet "$DLL" "$BUSY" 0 "$WORK") ;;
        esac
        line=$(perf record -q -F "$FREQ" -o "$OUT/perf.data" -- "${cmd[@]}" 2>/dev/null | grep work_ms=)
        busy_ns=$(sed -n 's/.* busy_cpu_ns=\([0-9]*\).*/\1/p' <<<" $line")
        # Samples of the busy threads by shared object (comm busy-N; `--comm` does not filter
        # with `--sort dso` in every perf version, so the comm is a sort key here).
        shares=$(perf report -i "$OUT/perf.data" --no-children --sort comm,dso --stdio 2>/dev/null |
            awk '/%/ && $2 ~ /^busy-/ { p=$1; sub(/%/,"",p); if ($3=="[kernel.kallsyms]") k+=p; else if ($3=="libclrprof_agent.so") a+=p; t+=p }
                 END { if (t>0) printf "%.4f %.4f", k/t*100, a/t*100; else print "0 0" }')
        read -r k a <<<"$shares"
        # ns per sample on the sampled threads: share × busy CPU / samples (busy CPU s × rate).
        nk=$(awk -v s="$k" -v b="$busy_ns" -v r="$RATE" 'BEGIN{ printf "%.0f", s/100*b/(b/1e9*r) }')
        na=$(awk -v s="$a" -v b="$busy_ns" -v r="$RATE" 'BEGIN{ printf "%.0f", s/100*b/(b/1e9*r) }')
        printf '%-8s %4s %10.0f %10s %10s %12s %12s\n' "$cfg" "$rep" "$(awk -v b="$busy_ns" 'BEGIN{print b/1e6}')" "$k" "$a" "$nk" "$na"
    done
done
echo "(ns/smp: ns per CPU sample at RATE; plain's kernel share is the floor without any timer)"
