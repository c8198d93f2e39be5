#!/usr/bin/env bash
# Native symbols in the viewer: every brushed range is a new profile, and each profile names its
# native frames (libcoreclr, libc, ...). This starts `clrprof view` on a trace with native frames,
# brushes ROUNDS distinct ranges (each a new profile and view: curl on loopback, time to the last
# byte) with native symbols on and then off, and prints the median of each and their difference —
# what naming native frames costs a brush — and the viewer's CPU time over all the brushes (less
# sensitive than wall time to a loaded machine) and peak resident memory.
# Usage: bench/view_symbols.sh TRACE [ROUNDS]     CLRPROF=/path/to/clrprof measures another build
# (default: target/debug/clrprof, built here).
set -euo pipefail
cd "$(dirname "$0")/.."
TRACE=${1:?usage: bench/view_symbols.sh TRACE [ROUNDS]}
ROUNDS=${2:-20}
if [ -z "${CLRPROF:-}" ]; then
    cargo build -q -p clrprof
    CLRPROF=target/debug/clrprof
fi
OUT=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$OUT"' EXIT

# utime + stime of a process, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

measure() { # label, extra view flags...
    local label=$1
    shift
    rm -f "$OUT/url"
    "$CLRPROF" view "$TRACE" --no-browser "$@" >"$OUT/url" 2>"$OUT/stderr" &
    PID=$!
    while [ ! -s "$OUT/url" ]; do
        kill -0 $PID 2>/dev/null || { cat "$OUT/stderr"; exit 1; }
        sleep 0.05
    done
    local url base token end
    url=$(cat "$OUT/url")
    base=${url%%/?token=*}
    token=${url##*token=}
    while [ "$(curl -s -o /dev/null -w '%{http_code}' "$base/api/meta?token=$token")" = 503 ]; do sleep 0.05; done
    end=$(curl -s "$base/api/meta?token=$token" | grep -o '"end_ns":[0-9]*' | cut -d: -f2)
    # The first view (whole run), then ROUNDS ranges never asked before: the i-th starts at i/(4*ROUNDS)
    # of the run and spans half of it.
    curl -s -o /dev/null "$base/api/hotspots?w=cpu&token=$token"
    : >"$OUT/times"
    local cpu0
    cpu0=$(cpu_ticks $PID)
    for i in $(seq 1 "$ROUNDS"); do
        local from=$((end / (4 * ROUNDS) * i)) to
        to=$((from + end / 2))
        curl -s -o /dev/null -w '%{time_total}\n' "$base/api/hotspots?w=cpu&from=$from&to=$to&token=$token" \
            >>"$OUT/times"
    done
    local cpu hwm
    cpu=$(($(cpu_ticks $PID) - cpu0))
    hwm=$(awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$PID/status")
    kill $PID
    wait $PID 2>/dev/null || true
    PID=
    local m
    m=$(median <"$OUT/times" | awk '{printf "%.1f", $1 * 1000}')
    printf '%-22s median %6s ms per brush (%s ranges); viewer CPU %s ms per brush; peak RSS %s MB\n' "$label" \
        "$m" "$ROUNDS" "$(awk -v t="$cpu" -v hz="$(getconf CLK_TCK)" -v n="$ROUNDS" 'BEGIN {printf "%.0f", t * 1000 / hz / n}')" "$hwm"
    echo "$m" >"$OUT/$label"
}

echo "trace: $TRACE ($(stat -c %s "$TRACE") bytes), clrprof: $CLRPROF"
measure symbols-on
measure symbols-off --no-native-symbols
awk -v on="$(cat "$OUT/symbols-on")" -v off="$(cat "$OUT/symbols-off")" \
    'BEGIN {printf "naming native frames costs %.1f ms per brush\n", on - off}'
