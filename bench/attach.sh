#!/usr/bin/env bash
# Attach latency: apps/Web under load (two curl loops on /cpu), attached REPS times in a row with
# `clrprof attach -d SECONDS`. For each session: the time until the runtime answered AttachProfiler
# (the agent loaded, InitializeForAttach and the catch-up done), and the time from launching
# `clrprof attach` to the first CPU sample in the trace (start_unix_ns of the trace + the first
# sample's time). Prints each session and the medians.
#
#   bench/attach.sh [REPS=7] [SECONDS=2] [PROFILE=release]
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-7}
SECS=${2:-2}
PROFILE=${3:-release}
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1
CLRPROF=target/$PROFILE/clrprof
[ -x "$CLRPROF" ] || { echo "build first: cargo build --$PROFILE -p clrprof -p clrprof-agent" >&2; exit 1; }
command -v curl >/dev/null || { echo "needs curl" >&2; exit 1; }
dotnet build -nologo -v q -c Release apps/Web >/dev/null
OUT=$(mktemp -d)
dotnet apps/Web/bin/Release/net10.0/Web.dll >"$OUT/web.out" 2>&1 &
WEB=$!
LOADS=()
cleanup() {
    for p in "${LOADS[@]}"; do kill "$p" 2>/dev/null || true; done
    kill "$WEB" 2>/dev/null || true
    rm -rf "$OUT"
}
trap cleanup EXIT
for _ in $(seq 50); do grep -q "listening on" "$OUT/web.out" && break; sleep 0.2; done
URL=$(grep -o 'http://[^ ]*' "$OUT/web.out")
for _ in 1 2; do
    (while true; do curl -s "$URL/cpu?n=200000" >/dev/null || exit 0; done) &
    LOADS+=($!)
done
sleep 3 # warm: the endpoint is tiered up before the first attach
echo "session  attach_reply_ms  first_sample_ms"
replies=(); firsts=()
for i in $(seq "$REPS"); do
    f="$OUT/a$i.clrprof"
    t0=$(date +%s%N)
    reply=$("$CLRPROF" attach "$WEB" -d "$SECS" -o "$f" 2>&1 | sed -n 's/.* in \([0-9]*\) ms,.*/\1/p')
    start=$("$CLRPROF" report "$f" --format json | python3 -c 'import json,sys; print(json.load(sys.stdin)["process"]["start_unix_ns"])')
    first_us=$("$CLRPROF" export "$f" -f chrome -o - | python3 -c '
import json, sys
v = json.load(sys.stdin)
ev = v["traceEvents"] if isinstance(v, dict) else v
print(min(e["ts"] for e in ev if e.get("cat") == "sample"))')
    first=$(python3 -c "print(round(($start + $first_us * 1000 - $t0) / 1e6, 1))")
    echo "$i        $reply              $first"
    replies+=("$reply"); firsts+=("$first")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
echo "median   $(median "${replies[@]}")              $(median "${firsts[@]}")"
kill -0 "$WEB" && echo "the server is still running after $REPS sessions"
