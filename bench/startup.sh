#!/usr/bin/env bash
# Start-up cost of `clrprof record` on start-up-heavy commands: the SDK's C# compiler (csc.dll) compiling
# one small file against the framework's reference assemblies (as bench/runtime-names), and optionally
# `dotnet build` of a small project (apps/Types, --no-incremental). Configurations are interleaved round
# by round; prints each run's wall time and, per configuration, the median and its ratio to no profiler.
# Results in docs/benchmarks/overhead.md ("Start-up" and the sessions after it), the current
# figures in BENCHMARKS.md.
#   ROUNDS=7 CLRPROF=target/release/clrprof CONFIGS="none default" BUILD=1 bench/startup.sh
# CONFIGS names from: none default no-classes alloc-off no-sample quiet (every recorder off) instrument
# counts-only type-loads no-cache (the defaults without the unwind-rule cache, CLRPROF_CACHE_DIR empty; the
# cache itself is warmed by the first round); AGENTS="a.so b.so" compares agents (each configuration
# but none runs once per agent).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-7}
CLRPROF=${CLRPROF:-target/release/clrprof}
CONFIGS=${CONFIGS:-none default}
BUILD=${BUILD:-0}
AGENTS=${AGENTS:-}
[ -x "$CLRPROF" ] || { echo "build first: cargo build --release -p clrprof -p clrprof-agent (or set CLRPROF)" >&2; exit 1; }
root=$(dirname "$(readlink -f "$(command -v dotnet)")")
csc=$(ls -d "$root"/sdk/*/Roslyn/bincore/csc.dll | sort -V | tail -1)
refs=$(ls -d "$root"/packs/Microsoft.NETCore.App.Ref/*/ref/net* | sort -V | tail -1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/Hello.cs" <<'CS'
using System;
using System.Collections.Generic;
using System.Linq;
public static class Program {
    public static int Main() {
        var xs = Enumerable.Range(0, 100).Select(i => i * i).Where(i => i % 3 == 0).ToList();
        var d = new Dictionary<string, int>();
        foreach (var x in xs) d[x.ToString()] = x;
        Console.WriteLine($"{d.Count} {xs.Sum()}");
        return 0;
    }
}
CS
csc_cmd=(dotnet "$csc" -nologo "-out:$work/Hello.dll")
for r in "$refs"/*.dll; do csc_cmd+=("-r:$r"); done
csc_cmd+=("$work/Hello.cs")
build_cmd=(dotnet build apps/Types -c Release --no-incremental -nologo -v q)
# The build server and node reuse would hide start-up (a warm compiler server answers the build).
export DOTNET_CLI_USE_MSBUILD_SERVER=0 MSBUILDDISABLENODEREUSE=1 UseSharedCompilation=false DOTNET_CLI_TELEMETRY_OPTOUT=1

flags_of() {
    case $1 in
        none) echo "" ;;
        default|no-cache) echo "-" ;;
        no-classes) echo "--no-classes" ;;
        alloc-off) echo "--alloc off" ;;
        no-sample) echo "--no-sample" ;;
        quiet) echo "--no-classes --no-sample --no-exceptions --no-gc --alloc off --no-locks" ;;
        instrument) echo "--instrument" ;;
        counts-only) echo "--instrument --counts-only" ;;
        type-loads) echo "--type-loads" ;;
        *) echo "unknown configuration $1" >&2; exit 2 ;;
    esac
}

run_one() { # label agent flags cmd...: appends "label wall_ms cpu_ms" (cpu: user + system of every process)
    local label=$1 agent=$2 flags=$3; shift 3
    local TIMEFORMAT='%R %U %S'
    if [ -z "$flags" ]; then
        { time "$@" >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }; } 2>"$work/time"
    else
        [ "$flags" = "-" ] && flags=""
        # shellcheck disable=SC2086
        local cache=()
        case $label in */no-cache*) cache=(env CLRPROF_CACHE_DIR=) ;; esac
        { time "${cache[@]}" "$CLRPROF" record ${agent:+--agent "$agent"} -o "$work/t-{pid}.clrprof" $flags -- "$@" >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }; } 2>"$work/time"
    fi
    rm -f "$work"/t-*.clrprof*
    awk -v l="$label" '{ printf "%s %d %d\n", l, $1 * 1000, ($2 + $3) * 1000 }' "$work/time" >>"$work/times"
}

echo "load average $(cut -d' ' -f1-3 /proc/loadavg), $ROUNDS rounds, csc: $csc"
: >"$work/times"
workloads=(csc)
[ "$BUILD" = 1 ] && workloads+=(build)
for round in $(seq "$ROUNDS"); do
    for w in "${workloads[@]}"; do
        if [ "$w" = csc ]; then cmd=("${csc_cmd[@]}"); else cmd=("${build_cmd[@]}"); fi
        for c in $CONFIGS; do
            f=$(flags_of "$c")
            if [ "$c" = none ] || [ -z "$AGENTS" ]; then
                run_one "$w/$c" "" "$f" "${cmd[@]}"
            else
                for a in $AGENTS; do run_one "$w/$c@$(basename "$a")" "$a" "$f" "${cmd[@]}"; done
            fi
        done
    done
    echo "round $round done, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
awk '
    function median(s,   m, v, a, b, x) {
        m = split(substr(s, 2), v, " ")
        for (a = 1; a <= m; a++) for (b = a + 1; b <= m; b++) if (v[b] + 0 < v[a] + 0) { x = v[a]; v[a] = v[b]; v[b] = x }
        return (m % 2) ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
    }
    { w[$1] = w[$1] " " $2; c[$1] = c[$1] " " $3; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
    END {
        for (i = 1; i <= n; i++) {
            k = order[i]; mw[k] = median(w[k]); mc[k] = median(c[k])
            split(k, p, "/"); if (p[2] == "none") { bw[p[1]] = mw[k]; bc[p[1]] = mc[k] }
        }
        printf "%-30s %9s %6s %9s %6s   %s | %s\n", "configuration", "wall ms", "ratio", "CPU ms", "ratio", "wall runs", "CPU runs"
        for (i = 1; i <= n; i++) {
            k = order[i]; split(k, p, "/")
            printf "%-30s %9d %5.2fx %9d %5.2fx  %s |%s\n", k, mw[k], bw[p[1]] ? mw[k] / bw[p[1]] : 0, mc[k], bc[p[1]] ? mc[k] / bc[p[1]] : 0, w[k], c[k]
        }
    }' "$work/times"
echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
