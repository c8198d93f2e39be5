#!/usr/bin/env bash
# The viewer at scale: writes a synthetic trace of SIZE_MB (the records of a real sampled trace, its
# samples repeated over a long run on many distinct stacks: crates/clrprof-trace/examples/synth.rs),
# starts `clrprof view` on it (release build), and measures the time to the URL line (the first view
# can be served), the server time of the page's first requests and of typical interactions (curl on
# loopback: time to the last byte), and the viewer's peak resident memory.
# Usage: bench/view_scale.sh [SIZE_MB] [STACKS]      CLRPROF=/path/to/clrprof measures another build
# (e.g. a baseline; the synth example is still built here).
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-200}
STACKS=${2:-20000}
OUT=${TMPDIR:-/tmp}/clrprof-view-scale
mkdir -p "$OUT"
if [ -n "${CLRPROF:-}" ]; then
    cargo build --release -q -p clrprof-trace --example synth
else
    cargo build --release -q -p clrprof -p clrprof-trace --example synth
    CLRPROF=target/release/clrprof
fi
TRACE=$OUT/big-$SIZE.clrprof
[ -f "$TRACE" ] || target/release/examples/synth testdata/traces/v1/sampled.clrprof "$TRACE" "$SIZE" "$STACKS"
ls -l "$TRACE" | awk '{printf "trace: %.1f MB\n", $5/1e6}'

rm -f "$OUT/url"
start=$(date +%s.%N)
"$CLRPROF" view "$TRACE" --no-browser --no-native-symbols >"$OUT/url" 2>"$OUT/stderr" &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
while [ ! -s "$OUT/url" ]; do
    kill -0 $PID 2>/dev/null || { cat "$OUT/stderr"; exit 1; }
    sleep 0.05
done
ready=$(date +%s.%N)
printf 'URL printed after %.2f s\n' "$(echo "$ready - $start" | bc)"
URL=$(cat "$OUT/url")
BASE=${URL%%/?token=*}
TOKEN=${URL##*token=}
# Until the trace is read the API answers 503 (the page shows the progress).
while [ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/api/meta?token=$TOKEN")" = 503 ]; do sleep 0.05; done
loaded=$(date +%s.%N)
printf 'trace loaded, first view servable after %.2f s\n' "$(echo "$loaded - $start" | bc)"
t() { # name path
    local s
    s=$(curl -s -o /dev/null -w '%{time_total}' "$BASE$2&token=$TOKEN")
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE$2&token=$TOKEN")" = 200 ] || echo "  $1: not 200"
    printf '  %-44s %7.0f ms\n' "$1" "$(echo "$s * 1000" | bc)"
}
FN=Sampling.Many.Spin
DROP='%5B%7B%22op%22%3A%22drop%22%2C%22function%22%3A%22Sampling.Many.Spin%22%7D%5D'
echo "first view (the page's requests):"
t "meta" "/api/meta?x=1"
t "timeline (400 buckets)" "/api/timeline?buckets=400"
t "hot spots, first page (builds the cpu view)" "/api/hotspots?w=cpu&limit=100"
echo "interactions:"
t "hot spots again (cached view)" "/api/hotspots?w=cpu&limit=100"
t "hot spots, regex search" "/api/hotspots?w=cpu&q=Spin%7CSleep&re=1"
t "call tree roots" "/api/tree?w=cpu&node=0"
t "butterfly" "/api/butterfly?w=cpu&fn=$FN"
t "flame graph, 1400 px" "/api/flame?w=cpu&width=1400"
t "switch weight to wall (new view)" "/api/hotspots?w=wall"
t "per-thread tree (new view)" "/api/tree?w=cpu&threads=each"
t "transform: drop a function (new view)" "/api/hotspots?w=cpu&t=$DROP"
# The run's span from the meta answer: the brushed range is its second tenth.
END_NS=$(curl -s "$BASE/api/meta?token=$TOKEN" | grep -o '"end_ns":[0-9]*' | cut -d: -f2)
FROM=$((END_NS / 10)) TO=$((END_NS / 5))
t "brush a range: 10%-20% (new profile+view)" "/api/hotspots?w=cpu&from=$FROM&to=$TO"
t "same range, flame graph" "/api/flame?w=cpu&width=1400&from=$FROM&to=$TO"
# Ranges are prepared in the background after loading (checkpoints, one pass): brushes once it is done.
sleep 5
t "brush 1% (after the range index)" "/api/hotspots?w=cpu&from=$((END_NS / 2))&to=$((END_NS / 2 + END_NS / 100))"
t "brush 10%" "/api/hotspots?w=cpu&from=$((FROM + 1))&to=$TO"
t "brush 50%" "/api/hotspots?w=cpu&from=$((END_NS / 4))&to=$((END_NS * 3 / 4))"
t "brush 90%" "/api/hotspots?w=cpu&from=$((END_NS / 20))&to=$((END_NS * 19 / 20))"
t "brush 90%, per-thread tree" "/api/tree?w=cpu&threads=each&from=$((END_NS / 20))&to=$((END_NS * 19 / 20))"
t "events table: functions page" "/api/table?name=functions&limit=100"
grep -E 'VmHWM|VmRSS' /proc/$PID/status | awk '{printf "  %s %.0f MB\n", $1, $2/1024}'
