#!/usr/bin/env bash
# clrprof view against speedscope, in the same headless chromium (Debian's, driven by playwright-core):
# for each size, a synthetic trace (crates/clrprof-trace/examples/synth.rs: SIZE_MB of CPU and wall
# samples on STACKS distinct stacks) is opened in `clrprof view` (release build) and, exported with
# `clrprof export -f speedscope`, in speedscope 1.25.0 (npm, installed here by `npm ci` from the
# committed bench/speedscope/package-lock.json). bench/speedscope/measure.mjs times the first drawn
# view (our flame graph / speedscope's flame chart) and reads the browser's memory after it: used JS
# heap after a GC, and the proportional set size of every chromium process.
# Usage: bench/view_vs_speedscope.sh [SIZE_MB:STACKS ...]   (default: 20:20000 100:100000 200:400000 1000:20000)
# ONLY=clrprof or ONLY=speedscope measures one side (the other's columns stay empty).
# Needs: chromium, node/npm (scripts/bootstrap installs both), a .NET-free machine is fine.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(20:20000 100:100000 200:400000 1000:20000)
OUT=${TMPDIR:-/tmp}/clrprof-view-vs-speedscope
mkdir -p "$OUT"
export CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
cargo build --release -q -p clrprof
cargo build --release -q -p clrprof-trace --example synth
(cd bench/speedscope && { [ -d node_modules/speedscope ] && cmp -s package-lock.json node_modules/.clrprof-lock; } ||
    { npm ci --no-audit --no-fund --loglevel=error >/dev/null && cp package-lock.json node_modules/.clrprof-lock; })
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GB", $2/1048576}' /proc/meminfo), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "chromium: $($CHROMIUM --version 2>/dev/null | head -1)"
echo "an empty page in the same browser: $(cd bench/speedscope && node measure.mjs blank)"
ONLY=${ONLY:-}
printf '| trace | stacks | speedscope JSON | clrprof: server ready | clrprof: first render | clrprof: JS heap / browser PSS | clrprof: viewer RSS | speedscope: first render | speedscope: JS heap / browser PSS |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
for size in "${SIZES[@]}"; do
    MB=${size%%:*}
    STACKS=${size##*:}
    TRACE=$OUT/t-$MB-$STACKS.clrprof
    JSON=$OUT/t-$MB-$STACKS.speedscope.json
    [ -f "$TRACE" ] || target/release/examples/synth testdata/traces/v1/sampled.clrprof "$TRACE" "$MB" "$STACKS" >/dev/null
    [ -f "$JSON" ] || target/release/clrprof export "$TRACE" -f speedscope -o "$JSON" 2>/dev/null
    ours='{}' theirs='{}' ready=0 rss=''
    if [ "$ONLY" != speedscope ]; then
        # clrprof view: time to a servable first view, then the page.
        rm -f "$OUT/url"
        start=$(date +%s.%N)
        target/release/clrprof view "$TRACE" --no-browser --no-native-symbols >"$OUT/url" 2>"$OUT/stderr" &
        PID=$!
        until [ -s "$OUT/url" ] && grep -q 'token=' "$OUT/url"; do
            kill -0 $PID 2>/dev/null || { cat "$OUT/stderr"; exit 1; }
            sleep 0.05
        done
        URL=$(head -1 "$OUT/url")
        until [ "$(curl -s -o /dev/null -w '%{http_code}' "${URL%%/?token=*}/api/meta?token=${URL##*token=}")" = 200 ]; do sleep 0.1; done
        ready=$(echo "$(date +%s.%N) - $start" | bc)
        ours=$(cd bench/speedscope && node measure.mjs clrprof "$URL" || true)
        rss=$(awk '/VmHWM/ {printf "%.0f MB", $2/1024}' /proc/$PID/status)
        kill $PID
        wait $PID 2>/dev/null || true
    fi
    [ "$ONLY" = clrprof ] || theirs=$(cd bench/speedscope && node measure.mjs speedscope "$JSON" || true)
    field() { echo "$1" | node -e "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>{const j=JSON.parse(s);const v=j['$2'];process.stdout.write(v===null||v===undefined?'':String(v))})"; }
    render() { if [ "$1" = '{}' ]; then printf 'not measured'; elif [ "$(field "$1" opened)" = true ]; then printf '%.1f s' "$(echo "$(field "$1" first_render_ms) / 1000" | bc -l)"; else printf 'did not open (%s)' "$(field "$1" error)"; fi; }
    printf '| %s MB | %s | %s MB | %.1f s | %s | %s / %s MB | %s | %s | %s / %s MB |\n' \
        "$(awk -v b="$(stat -c %s "$TRACE")" 'BEGIN {printf "%.0f", b/1e6}')" "$STACKS" \
        "$(awk -v b="$(stat -c %s "$JSON")" 'BEGIN {printf "%.1f", b/1e6}')" "$ready" \
        "$(render "$ours")" "$(field "$ours" js_heap_mb)" "$(field "$ours" browser_pss_mb)" "$rss" \
        "$(render "$theirs")" "$(field "$theirs" js_heap_mb)" "$(field "$theirs" browser_pss_mb)"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
