#!/usr/bin/env bash
# Sampling overhead: throughput and CPU cost of apps/SamplingBench with no profiler, clrprof at
# 100 Hz and 1 kHz, and the runtime's own EventPipe sampler through dotnet-trace (when installed),
# side by side in one run, interleaved, REPS repetitions each; prints medians and trace sizes.
#
#   bench/sampling.sh [SECONDS=8] [REPS=5]
#
# Needs a release build (`cargo build --release --workspace`).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-8}
REPS=${2:-5}
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1
CLRPROF=target/release/clrprof
[ -x "$CLRPROF" ] || { echo "build first: cargo build --release --workspace" >&2; exit 1; }
dotnet build -nologo -v q -c Release apps/SamplingBench >/dev/null
DLL=apps/SamplingBench/bin/Release/net10.0/SamplingBench.dll
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
DT=$(command -v dotnet-trace || ls "$HOME/.dotnet/tools/dotnet-trace" 2>/dev/null || true)

configs=(none clrprof-100 clrprof-1000)
[ -n "$DT" ] && configs+=(dotnet-trace-100 dotnet-trace-1000)

run() { # config workload rep -> "ops cpu_ms seconds trace_bytes"
    local cfg=$1 wl=$2 rep=$3 line size=0 f="$OUT/$1-$2-$3"
    case $cfg in
        none) line=$(dotnet "$DLL" "$wl" "$SECONDS_PER_RUN") ;;
        clrprof-*) line=$("$CLRPROF" record --rate "${cfg#clrprof-}" -o "$f.clrprof" -- dotnet "$DLL" "$wl" "$SECONDS_PER_RUN" 2>/dev/null)
                   size=$(stat -c %s "$f.clrprof") ;;
        dotnet-trace-100) line=$("$DT" collect --profile dotnet-sampled-thread-time --show-child-io -o "$f.nettrace" -- dotnet "$DLL" "$wl" "$SECONDS_PER_RUN" 2>/dev/null | grep '^ops=')
                   size=$(stat -c %s "$f.nettrace") ;;
        dotnet-trace-1000) line=$("$DT" collect --providers 'Microsoft-DotNETCore-SampleProfiler:0:5:SampleProfilerIntervalMS=1' --show-child-io -o "$f.nettrace" -- dotnet "$DLL" "$wl" "$SECONDS_PER_RUN" 2>/dev/null | grep '^ops=')
                   size=$(stat -c %s "$f.nettrace") ;;
    esac
    if ! grep -q '^ops=' <<<"$line"; then
        echo "run failed: $cfg $wl $rep (no result line; trace $size bytes)" >&2
    fi
    local ops cpu secs
    ops=$(sed -n 's/.*ops=\([0-9]*\).*/\1/p' <<<"$line")
    cpu=$(sed -n 's/.*cpu_ms=\([0-9]*\).*/\1/p' <<<"$line")
    secs=$(sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' <<<"$line")
    echo "$ops $cpu $secs $size"
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "# $(date -u +%FT%TZ) $(nproc) CPUs, ${SECONDS_PER_RUN}s per run, $REPS repetitions, configs: ${configs[*]}"
for wl in cpu server; do
    for rep in $(seq "$REPS"); do
        for cfg in "${configs[@]}"; do
            r=$(run "$cfg" "$wl" "$rep")
            echo "$wl $cfg $rep $r" | tee -a "$OUT/results"
        done
    done
done
echo
printf '%-8s %-18s %14s %10s %14s %12s %10s\n' workload config "ops/s (median)" "vs none" "CPU ms/kop" "vs none" "MB/min"
for wl in cpu server; do
    base_tp=""; base_cpu=""
    for cfg in "${configs[@]}"; do
        sel() { awk -v w="$wl" -v c="$cfg" '$1==w && $2==c' "$OUT/results"; }
        tp=$(sel | awk '{ if ($6>0) print $4/$6 }' | median)
        cpk=$(sel | awk '{ if ($4>0) print $5*1000/$4 }' | median)
        mbm=$(sel | awk '{ if ($6>0) print $7/1048576/$6*60 }' | median)
        [ -z "$base_tp" ] && { base_tp=$tp; base_cpu=$cpk; }
        dtp=$(awk -v a="$tp" -v b="$base_tp" 'BEGIN{printf "%+.1f%%", (a/b-1)*100}')
        dcpu=$(awk -v a="$cpk" -v b="$base_cpu" 'BEGIN{printf "%+.1f%%", (a/b-1)*100}')
        printf '%-8s %-18s %14.0f %10s %14.2f %12s %10.2f\n' "$wl" "$cfg" "$tp" "$dtp" "$cpk" "$dcpu" "$mbm"
    done
done
