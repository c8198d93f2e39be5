// Profiling target for process-lifecycle tests: stdin/stdout pass-through, waiting to be
// interrupted or killed, crashing, failing fast and exiting early.
using System.Runtime.CompilerServices;

public static class Overflow
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static int Down(int n) => n == 0 ? 0 : Down(n + 1) + 1;
}

public static partial class Program
{
    public static int Main(string[] args)
    {
        string mode = args.Length > 0 ? args[0] : "echo";
        switch (mode)
        {
            case "echo":
                // Copies stdin to stdout upper-cased, then reports what it read on stderr.
                string input = Console.In.ReadToEnd();
                Console.Out.Write(input.ToUpperInvariant());
                Console.Error.WriteLine($"read {input.Length} chars");
                return input.Length % 100;
            case "wait":
                // Prints its pid, then works until interrupted (Ctrl-C, SIGTERM) or 60 s pass.
                Console.CancelKeyPress += (_, e) => { Console.WriteLine("interrupted"); };
                Console.WriteLine($"pid={Environment.ProcessId}");
                Console.Out.Flush();
                var until = DateTime.UtcNow.AddSeconds(60);
                long acc = 0;
                while (DateTime.UtcNow < until) { acc += Work.Chunk(acc); Thread.Sleep(5); }
                return (int)(acc % 2);
            case "crash":
                // Dies after the agent's first flushes: the trace keeps what was flushed.
                Work.Chunk(1);
                Thread.Sleep(300);
                throw new InvalidOperationException("deliberate crash");
            case "failfast":
                Work.Chunk(1);
                Thread.Sleep(300);
                Environment.FailFast("deliberate failfast");
                return 1;
            case "failfast-early":
                // Dies N ms into Main (default 20): before most of the agent's flushes.
                Work.Chunk(1);
                Thread.Sleep(args.Length > 1 ? int.Parse(args[1]) : 20);
                Environment.FailFast("deliberate early failfast");
                return 1;
            case "failfast-work":
                // Calls Work.Chunk for 50 ms of this thread's CPU time (at least 40 calls), prints how
                // many calls and how much CPU, then fails fast: the trace must keep those calls and
                // the samples of that time.
                {
                    long cpu0 = ThreadCpuNs();
                    long sum = 0, cpu = 0;
                    int n = 0;
                    while (n < 40 || cpu < 50_000_000)
                    {
                        sum += Work.Chunk(sum + n);
                        n++;
                        if (n % 8 == 0) cpu = ThreadCpuNs() - cpu0;
                    }
                    Console.WriteLine($"chunks={n} cpu_ns={cpu}");
                    Console.Out.Flush();
                    Environment.FailFast($"deliberate failfast after {n} chunks ({sum % 10})");
                    return 1;
                }
            case "throw-early":
                // An unhandled exception N ms into Main (default 20).
                Work.Chunk(1);
                Thread.Sleep(args.Length > 1 ? int.Parse(args[1]) : 20);
                throw new InvalidOperationException("deliberate early crash");
            case "overflow-early":
                // A stack overflow N ms into Main (default 20): the runtime prints it and aborts.
                Work.Chunk(1);
                Thread.Sleep(args.Length > 1 ? int.Parse(args[1]) : 20);
                return Overflow.Down(1);
            case "quick":
                return 3;
            case "unload":
                // Loads a second copy of this assembly into a collectible context, runs code from it,
                // then unloads it: the profiler must survive ids that die.
                Console.WriteLine($"unloaded={Unloader.RunAndUnload(typeof(Program).Assembly.Location)}");
                return 0;
            default:
                Console.Error.WriteLine($"unknown mode {mode}");
                return 64;
        }
    }
}

public static partial class Program
{
    // The calling thread's time on a CPU so far (Linux: the first field of its schedstat).
    static long ThreadCpuNs() => long.Parse(File.ReadAllText("/proc/thread-self/schedstat").Split(' ')[0]);
}

public static class Unloader
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    static WeakReference LoadAndRun(string path, out long result)
    {
        var alc = new System.Runtime.Loader.AssemblyLoadContext("collectible", isCollectible: true);
        var asm = alc.LoadFromAssemblyPath(path);
        var chunk = asm.GetType("Work")!.GetMethod("Chunk")!;
        result = (long)chunk.Invoke(null, new object[] { 7L })!;
        alc.Unload();
        return new WeakReference(alc);
    }

    public static bool RunAndUnload(string path)
    {
        var weak = LoadAndRun(path, out _);
        for (int i = 0; i < 20 && weak.IsAlive; i++)
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
            Thread.Sleep(10);
        }
        return !weak.IsAlive;
    }
}

public static class Work
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static long Chunk(long seed)
    {
        long x = seed;
        for (int i = 0; i < 10_000; i++) x = (x * 31 + i) % 1_000_003;
        return x;
    }
}
