#!/usr/bin/env bash
# Cost of `clrprof attach --count` on a busy server: apps/Web under wrk on /cpu?n=2000 (one
# Work.Primes call per request), three phases of SECONDS each on the same process: before the
# attach, while an `attach --count PATTERN --no-sample` session runs, and after it ended (the
# original IL back, the agent left loaded and idle). Prints the requests per second wrk saw in each
# phase and the calls the session counted. A fresh server per pattern; the pattern `-` is a session
# without --count (what the attach itself costs with the recorders left on). Work is in the global
# namespace: its method is `Work.Primes`.
#
#   [PROFILE=debug] [WARMUP=10] bench/attach-count.sh [SECONDS=8] [PATTERNS="- Work.Primes Microsoft.AspNetCore.Routing.*"]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-8}
WARMUP=${WARMUP:-10}
PROFILE=${PROFILE:-debug}
BIN=target/$PROFILE
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1
command -v wrk >/dev/null || { echo "attach-count.sh: wrk not found (apt-get install wrk)" >&2; exit 1; }
dotnet build -nologo -v q -c Release apps/Web >/dev/null
DLL=apps/Web/bin/Release/net10.0/Web.dll
TMP=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] && echo "kept $TMP" || rm -rf "$TMP"; [ -n "${SPID:-}" ] && kill "$SPID" 2>/dev/null || true' EXIT
rps() { wrk -t2 -c16 -d"${SECS}s" "$1/cpu?n=2000" | awk '/Requests\/sec/ {print $2}'; }
set -f
for pattern in ${2:-- Work.Primes Microsoft.AspNetCore.Routing.*}; do
    count=(--count "$pattern"); [ "$pattern" = - ] && count=()
    rm -f "$TMP/agent.log"
    dotnet "$DLL" >"$TMP/out" 2>&1 &
    SPID=$!
    for _ in $(seq 50); do grep -q 'listening on' "$TMP/out" && break; sleep 0.2; done
    url=$(sed -n 's/^listening on //p' "$TMP/out" | head -1)
    wrk -t2 -c16 -d"${WARMUP}s" "$url/cpu?n=2000" >/dev/null
    before=$(rps "$url")
    "$BIN/clrprof" attach "$SPID" --agent "$BIN/libclrprof_agent.so" --no-sample "${count[@]}" \
        -d $((SECS + 2)) -o "$TMP/c.clrprof" --log "$TMP/agent.log" 2>"$TMP/attach.err" &
    apid=$!
    sleep 1
    during=$(rps "$url")
    wait "$apid" || { echo "attach failed:"; cat "$TMP/attach.err"; tail -5 "$TMP/agent.log"; }
    after=$(rps "$url")
    n=$(grep -c 'count: .*left alone\|ReJIT of' "$TMP/agent.log" || true)
    methods=$(sed -n 's/.*ReJIT of \([0-9]*\) methods requested through \([A-Za-z]*\) .*returned after \([0-9]*\) µs.*/\1 methods, \2, request took \3 µs/p' "$TMP/agent.log" | head -1)
    calls=$("$BIN/clrprof" report "$TMP/c.clrprof" --view summary | sed -n 's/^\([0-9]*\) functions, \([0-9]*\) calls (exact)/\2 calls in \1 functions/p')
    echo "$pattern: rps before $before, during $during, after $after; $methods; $calls"
    kill "$SPID"; wait "$SPID" 2>/dev/null || true; SPID=
done
