// Profiling target: Jint (a JavaScript interpreter from NuGet) runs a recursive JS fib.
//   JsInterp [ms] [n]   calls fib(n) (default 25) again and again for about ms of the main thread's
//                       CPU time (default 3000); every JS call is a dozen or more managed frames of
//                       the interpreter, so the deepest stacks are hundreds of frames deep
// Prints the result, the number of JS calls made, and the main thread's id.
using System.Diagnostics;
using System.Runtime.CompilerServices;
using Jint;

namespace JsInterp;

public static class Program
{
    public static int Main(string[] args)
    {
        int ms = args.Length > 0 ? int.Parse(args[0]) : 3000;
        int n = args.Length > 1 ? int.Parse(args[1]) : 25;
        var (result, calls, rounds) = Run(ms, n);
        Console.WriteLine($"fib({n})={result} rounds={rounds} js_calls={calls}");
        Console.WriteLine($"main_tid={Environment.ProcessId}");
        return 0;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static (double, long, int) Run(int ms, int n)
    {
        var engine = new Engine();
        engine.Execute("var calls = 0; function fib(n) { calls++; return n < 2 ? n : fib(n - 1) + fib(n - 2); }");
        var cpu = Stopwatch.StartNew();
        double result = 0;
        int rounds = 0;
        var start = ThreadCpu();
        do
        {
            result = engine.Invoke("fib", n).AsNumber();
            rounds++;
        } while ((ThreadCpu() - start).TotalMilliseconds < ms);
        long calls = (long)engine.GetValue("calls").AsNumber();
        return (result, calls, rounds);
    }

    // The calling thread's CPU time (utime + stime from /proc/thread-self/stat, 10 ms ticks).
    static TimeSpan ThreadCpu()
    {
        string stat = File.ReadAllText("/proc/thread-self/stat");
        string[] f = stat[(stat.LastIndexOf(')') + 2)..].Split(' ');
        long ticks = long.Parse(f[11]) + long.Parse(f[12]);
        return TimeSpan.FromMilliseconds(ticks * 10);
    }
}
