// Ground truth for source lines: every hot loop is one statement on one line (its initializer,
// condition, increment and body share the line), marked with a `// LINE:NAME` comment that the
// end-to-end test looks up, so no line number is written down twice.
//   Lines [millions]   (default 150: 150 million iterations stand for one share)
//   - Loops.TwoLoops runs loop A 3 × n times, then loop B n times: the same work per iteration,
//     so A's and B's CPU time split 3:1. It is entered once, so its loops run as on-stack-
//     replacement (OSR) code after a few thousand tier-0 iterations.
//   - Loops.Inlined runs n iterations of Step, which is inlined (AggressiveInlining): its code is
//     part of Inlined's, and the runtime maps it to the line of the call.
//   - NoPdbLib.NoPdb.Spin (no PDB) and EmbeddedLib.Embedded.Spin (embedded PDB) run n iterations.
// Prints each loop's iteration count.
//   Lines sites N M   instead: Sites.Caller calls Sites.Callee N times from one line and M times
//   from another (for call-site lines of instrumented calls; keep N, M below 1,000 so that the
//   loops stay in one code version, below the runtime's on-stack-replacement trigger).
using System.Runtime.CompilerServices;

namespace Lines;

public static class Loops
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static ulong TwoLoops(long n)
    {
        ulong x = 1;
        long a = 3 * n, b = n;
        for (long i = 0; i < a; i++) x = (x ^ (ulong)i) * 0x9E3779B97F4A7C15UL + (x >> 29); // LINE:A
        for (long i = 0; i < b; i++) x = (x ^ (ulong)i) * 0x9E3779B97F4A7C15UL + (x >> 29); // LINE:B
        Console.WriteLine($"loop A iterations: {a}");
        Console.WriteLine($"loop B iterations: {b}");
        return x;
    }

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    static ulong Step(ulong x, long i)
    {
        return (x ^ (ulong)i) * 0x9E3779B97F4A7C15UL + (x >> 29); // LINE:STEP
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static ulong Inlined(long n)
    {
        ulong x = 3;
        for (long i = 0; i < n; i++) x = Step(x, i); // LINE:INLINED
        Console.WriteLine($"inlined loop iterations: {n}");
        return x;
    }
}

public static class Sites
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static long Callee(long i)
    {
        return i * 3 + 1;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static long Caller(int n, int m)
    {
        long s = 0;
        for (int i = 0; i < n; i++) s += Callee(i); // LINE:SITE_N
        for (int i = 0; i < m; i++) s += Callee(-i); // LINE:SITE_M
        Console.WriteLine($"calls from the first site: {n}, from the second: {m}");
        return s;
    }
}

public static class Program
{
    public static int Main(string[] args)
    {
        if (args.Length == 3 && args[0] == "sites")
        {
            Console.WriteLine($"sum: {Sites.Caller(int.Parse(args[1]), int.Parse(args[2]))}");
            return 0;
        }
        long n = (args.Length > 0 ? long.Parse(args[0]) : 150) * 1_000_000;
        ulong r = Loops.TwoLoops(n); // LINE:CALL
        r ^= Loops.Inlined(n);
        r ^= NoPdbLib.NoPdb.Spin(n);
        Console.WriteLine($"no-PDB loop iterations: {n}");
        r ^= EmbeddedLib.Embedded.Spin(n);
        Console.WriteLine($"embedded-PDB loop iterations: {n}");
        Console.WriteLine($"result: {r}");
        return 0;
    }
}
