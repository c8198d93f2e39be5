// Profiling target with known call counts, for exact enter/leave instrumentation tests.
// Every scenario prints its result, so runs with and without the profiler must print the same.
using System.Diagnostics;
using System.Runtime.CompilerServices;

namespace Calls;

public static class Program
{
    public static async Task<int> Main(string[] args)
    {
        string mode = args.Length > 0 ? args[0] : "all";
        if (mode is "all" or "counted") Console.WriteLine($"counted: {Counted.Run(1000)}");
        if (mode is "all" or "fib") Console.WriteLine($"fib(20) = {Recursion.Fib(20)}");
        if (mode is "all" or "exceptions") Console.WriteLine($"exceptions: {Exceptions.Run(50)}");
        if (mode is "all" or "virtual") Console.WriteLine($"virtual: {Dispatch.Run(300)}");
        if (mode is "all" or "generic") Console.WriteLine($"generic: {Generic.Run(100)}");
        if (mode is "all" or "threads") Console.WriteLine($"threads: {Threads.Run(4, 2500)}");
        if (mode is "all" or "async") Console.WriteLine($"async: {await AsyncWork.Run(10)}");
        if (mode is "all" or "spin") Console.WriteLine($"spin: {Spin.For(300) > 0}");
        if (mode is "all" or "args") Console.WriteLine($"args: {Args.Run()}");
        if (mode is "all" or "gc") Console.WriteLine($"gc: {Collector.Run(3)}");
        if (mode == "churn")
        {
            // Thread churn: args[1] short-lived threads, args[2] at a time, each calling Churn.Work
            // args[3] times; prints the process's peak resident set (VmHWM) for memory tests.
            int threads = int.Parse(args[1]), batch = int.Parse(args[2]), calls = int.Parse(args[3]);
            Console.WriteLine($"churn: {Churn.Run(threads, batch, calls)} peak_rss_kb={Churn.PeakRssKb()}");
        }
        if (mode == "inline")
        {
            // A tiny method in a hot loop: tier-1 code (or OSR) inlines it. IL probes must count
            // the inlined copies too (record --count); enter/leave hooks see every call with
            // inlining off. Not part of "all", whose counts other tests pin.
            Console.WriteLine($"inline: {Inlined.Run(int.Parse(args[1]))}");
        }
        if (mode == "many")
        {
            // Call-heavy benchmark: prints the loop's own time so start-up is left out. With a
            // thread count (args[2], default 1) that many threads run the loop at once, each making
            // args[1] calls of the same method (one shared counter under --count: contention), and
            // the time is from their common start to the last one's end.
            int n = int.Parse(args[1]), threads = args.Length > 2 ? int.Parse(args[2]) : 1;
            if (threads <= 1)
            {
                var sw = Stopwatch.StartNew();
                long r = Counted.Many(n);
                Console.WriteLine($"many: {r} loop_ms={sw.Elapsed.TotalMilliseconds:F3}");
            }
            else
            {
                var (r, ms) = Counted.ManyThreads(n, threads);
                Console.WriteLine($"many: {r} threads={threads} loop_ms={ms:F3}");
            }
        }
        return 0;
    }
}

public static class Counted
{
    public static long Run(int n)
    {
        long sum = 0;
        for (int i = 0; i < n; i++) sum += Tick(i);
        return sum;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static int Tick(int i) => i & 7;

    // Call-heavy loop for benchmarks: n calls of a tiny method.
    public static long Many(int n)
    {
        long sum = 0;
        for (int i = 0; i < n; i++) sum += Tiny(i);
        return sum;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static int Tiny(int i) => i ^ (i >> 3);

    // `threads` threads released together, each running Many(n): the sum of their results and the
    // milliseconds from the release to the last one's end.
    public static (long, double) ManyThreads(int n, int threads)
    {
        var results = new long[threads];
        using var start = new Barrier(threads + 1);
        var workers = new Thread[threads];
        for (int t = 0; t < threads; t++)
        {
            int me = t;
            workers[t] = new Thread(() =>
            {
                start.SignalAndWait();
                results[me] = Many(n);
            });
            workers[t].Start();
        }
        start.SignalAndWait();
        var sw = Stopwatch.StartNew();
        foreach (var w in workers) w.Join();
        double ms = sw.Elapsed.TotalMilliseconds;
        return (results.Sum(), ms);
    }
}

public static class Inlined
{
    public static long Run(int n)
    {
        long sum = 0;
        for (int i = 0; i < n; i++) sum += Add(i);
        return sum;
    }

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static int Add(int i) => i & 3;
}

public static class Collector
{
    // Induced collections suspend the runtime: their time is suspended time.
    public static int Run(int times)
    {
        int live = 0;
        for (int i = 0; i < times; i++)
        {
            var junk = new List<byte[]>();
            for (int k = 0; k < 2000; k++) junk.Add(new byte[512]);
            live += junk.Count;
            GC.Collect(2, GCCollectionMode.Forced, blocking: true);
        }
        return live;
    }
}

public static class Recursion
{
    public static int Fib(int n) => n < 2 ? n : Fib(n - 1) + Fib(n - 2);
}

public class ProbeException(int depth) : Exception($"probe at depth {depth}")
{
    public int Depth { get; } = depth;
}

public static class Exceptions
{
    public static int Finallies;

    public static string Run(int n)
    {
        int caught = 0;
        for (int i = 0; i < n; i++)
        {
            try { Level1(i); }
            catch (ProbeException e) when (e.Depth == 3) { caught++; }
        }
        return $"caught={caught} finallies={Finallies}";
    }

    static void Level1(int i) { Level2(i); }

    static void Level2(int i)
    {
        try { Level3(i); }
        finally { Finallies++; }
    }

    static void Level3(int i) => throw new ProbeException(3);
}

public interface IShape { double Area(); }
public abstract class Shape : IShape
{
    public abstract double Area();
    public virtual string Describe() => GetType().Name;
}
public sealed class Square(double s) : Shape { public override double Area() => s * s; }
public sealed class Circle(double r) : Shape { public override double Area() => Math.PI * r * r; public override string Describe() => "round"; }
public sealed class Triangle(double b, double h) : Shape { public override double Area() => b * h / 2; }

public static class Dispatch
{
    public static string Run(int n)
    {
        IShape[] shapes = { new Square(2), new Circle(1), new Triangle(3, 4) };
        double total = 0;
        int described = 0;
        for (int i = 0; i < n; i++)
        {
            var s = shapes[i % 3];
            total += s.Area();
            described += ((Shape)s).Describe().Length;
        }
        return $"{total:F3}/{described}";
    }
}

public static class Generic
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static T Identity<T>(T value) => value;

    public static string Run(int n)
    {
        int ints = 0;
        int strs = 0;
        for (int i = 0; i < n; i++)
        {
            ints += Identity(i) & 1;
            strs += Identity("x").Length;
        }
        return $"{ints}/{strs}";
    }
}

public static class Threads
{
    public static long Run(int threads, int perThread)
    {
        long total = 0;
        var ts = new Thread[threads];
        for (int t = 0; t < threads; t++)
        {
            ts[t] = new Thread(() =>
            {
                long local = 0;
                for (int i = 0; i < perThread; i++) local += Shared.Work(i);
                Interlocked.Add(ref total, local);
            }) { Name = $"calls-worker-{t}" };
            ts[t].Start();
        }
        foreach (var t in ts) t.Join();
        return total;
    }
}

public static class Churn
{
    public static long Total;

    public static long Run(int threads, int batch, int calls)
    {
        var ts = new Thread[batch];
        for (int started = 0; started < threads; started += batch)
        {
            int n = Math.Min(batch, threads - started);
            for (int t = 0; t < n; t++)
            {
                ts[t] = new Thread(() => Entry(calls)) { Name = "churn" };
                ts[t].Start();
            }
            for (int t = 0; t < n; t++) ts[t].Join();
        }
        return Total;
    }

    // Each thread's entry: exactly `calls` calls of Work.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void Entry(int calls)
    {
        long local = 0;
        for (int i = 0; i < calls; i++) local += Work(i);
        Interlocked.Add(ref Total, local);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static int Work(int i) => i % 3;

    public static long PeakRssKb()
    {
        foreach (var line in File.ReadLines("/proc/self/status"))
            if (line.StartsWith("VmHWM:")) return long.Parse(line[6..].Trim().Split(' ')[0]);
        return -1;
    }
}

public static class Shared
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static int Work(int i) => (i * 7) % 13;
}

public static class AsyncWork
{
    public static async Task<int> Run(int n)
    {
        int sum = 0;
        for (int i = 0; i < n; i++) sum += await Step(i);
        return sum;
    }

    static async Task<int> Step(int i)
    {
        await Task.Yield();
        return i;
    }
}

public static class Spin
{
    public static long For(int ms)
    {
        var sw = Stopwatch.StartNew();
        long x = 0;
        while (sw.ElapsedMilliseconds < ms) x += Burn(x);
        return x;
    }

    static long Burn(long x)
    {
        for (int i = 0; i < 20_000; i++) x = (x * 6364136223846793005L + 1442695040888963407L) >> 1;
        return x & 0xff;
    }
}

public struct Big
{
    public long A, B, C;
    public double D;
}

public struct Pair16
{
    public double X;
    public double Y;
}

public struct Mixed16
{
    public long L;
    public double D;
}

public static class Args
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static double Many(int a, double b, int c, double d, long e, float f, int g, double h, int i, double j,
        long k, double l, Big big, double m, double n, int o)
        => a + b * 2 + c * 3 + d * 4 + e * 5 + f * 6 + g * 7 + h * 8 + i * 9 + j * 10 + k * 11 + l * 12
           + big.A + big.B * 2 + big.C * 3 + big.D * 4 + m * 13 + n * 14 + o * 15;

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static Pair16 MakePair(double x, double y) => new Pair16 { X = x * 1.5, Y = y - 0.25 };

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static Mixed16 MakeMixed(long l, double d) => new Mixed16 { L = l * 3, D = d / 4 };

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static Big MakeBig(long a) => new Big { A = a, B = a + 1, C = a + 2, D = a * 0.5 };

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static (int, double) Tuple(int a, double b) => (a * 2, b * 3);

    public static string Run()
    {
        var big = MakeBig(7);
        double many = Many(1, 2.5, 3, 4.25, 5, 6.5f, 7, 8.75, 9, 10.5, 11, 12.25, big, 13.5, 14.75, 15);
        var p = MakePair(3.0, 4.0);
        var mx = MakeMixed(5, 6.0);
        var t = Tuple(21, 0.5);
        return $"{many:R} {p.X:R},{p.Y:R} {mx.L},{mx.D:R} {big.A},{big.B},{big.C},{big.D:R} {t.Item1},{t.Item2:R}";
    }
}
