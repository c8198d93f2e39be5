#!/usr/bin/env bash
# Export time, peak memory and output size per format on the traces of bench/report.sh
# (target/bench-traces/; run that script once first to record them). REPS runs each, medians.
#
#   bench/export.sh [REPS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-3}
CLRPROF=$PWD/target/release/clrprof
DIR=target/bench-traces
[ -x "$CLRPROF" ] || { echo "build first: cargo build --release --workspace" >&2; exit 1; }
[ -s "$DIR/sampled.clrprof" ] || { echo "record the traces first: bench/report.sh 0" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
printf '%-13s %-11s %9s %12s %12s\n' trace format "median s" "peak RSS MB" "output KB"
for trace in sampled instrumented flow; do
    for f in collapsed svg html speedscope pprof chrome firefox; do
        # The flow trace's 14 M calls as Chrome begin/end events, or its samples-less Firefox
        # profile, are left out.
        [ "$trace" = flow ] && [ "$f" = chrome ] && continue
        secs=""; rss=""
        for _ in $(seq "$REPS"); do
            /usr/bin/time -f '%e %M' -o "$OUT/time" "$CLRPROF" export "$DIR/$trace.clrprof" -f "$f" -o "$OUT/out" >/dev/null 2>&1 || true
            read -r s m < "$OUT/time"
            secs+="$s "; rss+="$m "
        done
        size=$(stat -c %s "$OUT/out" 2>/dev/null || echo 0)
        printf '%-13s %-11s %9.2f %12.0f %12.1f\n' "$trace" "$f" "$(median <<<"$secs")" \
            "$(echo "$(median <<<"$rss")/1024" | bc -l)" "$(echo "$size/1024" | bc -l)"
        rm -f "$OUT/out"
    done
done
