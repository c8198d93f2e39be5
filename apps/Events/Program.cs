// Profiling target for the runtime-event tests and benchmarks (exceptions, GC, allocations).
// Every mode prints what it did so tests can compare with the profiler's figures.
using System.Runtime.CompilerServices;

namespace EventsApp;

public sealed class BoomException : Exception
{
    public BoomException(int i) : base("boom " + i) { }
}

public sealed class Widget
{
    public long A;
    public Widget(long a) { A = a; }
}

// 144 bytes per object: the heavy allocator in the sampled test.
public sealed class HeavyNode
{
    public long A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P;
}

// 24 bytes per object.
public sealed class LightNode
{
    public long A;
}

public static class Program
{
    static int finallies, filters, caught;
    // Objects escape into these so the JIT cannot allocate them on the stack.
    static object? sink;
    static object[] keep = new object[1024];

    public static int Main(string[] args)
    {
        string mode = args.Length > 0 ? args[0] : "exceptions";
        int n = args.Length > 1 ? int.Parse(args[1]) : 100;
        switch (mode)
        {
            case "exceptions":
                Exceptions(n);
                Console.WriteLine($"thrown {n} caught {caught} finally {finallies} filter {filters}");
                return 0;
            case "uncaught":
                Exceptions(n);
                Console.WriteLine($"thrown {n} caught {caught} finally {finallies} filter {filters}");
                Console.Out.Flush();
                // Give the profiler's writer a flush interval before the runtime tears the process down.
                AppDomain.CurrentDomain.UnhandledException += (_, _) => Thread.Sleep(500);
                var t = new Thread(BackgroundFail) { Name = "doomed", IsBackground = true };
                t.Start();
                t.Join();
                return 0;
            case "gc":
                for (int i = 0; i < n; i++) GC.Collect();
                Console.WriteLine($"collected {n}");
                return 0;
            case "alloc":
                Widgets(n);
                Console.WriteLine($"widgets {n}");
                return 0;
            case "mix":
                Mix(n);
                Console.WriteLine($"mix {n}");
                return 0;
            case "contention":
                Contention(n);
                Console.WriteLine($"contention {n}");
                return 0;
            case "bench-alloc":
                return BenchAlloc(n);
            case "bench-exceptions":
                return BenchExceptions(n);
            case "bench-exc-mixed":
                return BenchExceptionsMixed(n);
            case "exc-kinds":
                {
                    // Three threads, each throwing n BoomException (Thrower, through a filter and
                    // a finally, caught in Catcher), n/2 InvalidOperationException (ThrowInvalid)
                    // and n/3 ArgumentException, from ThrowArgA (i % 6 == 0) or ThrowArgB.
                    var workers = new Thread[3];
                    for (int w = 0; w < workers.Length; w++)
                    {
                        workers[w] = new Thread(() => ExceptionKinds(n)) { Name = $"thrower{w}" };
                        workers[w].Start();
                    }
                    foreach (var w in workers) w.Join();
                    Console.WriteLine($"kinds caught boom {Volatile.Read(ref kindBoom)} invalid {Volatile.Read(ref kindInvalid)} arg {Volatile.Read(ref kindArg)}");
                    return 0;
                }
            default:
                Console.Error.WriteLine("modes: exceptions N | exc-kinds N | uncaught N | gc K | alloc M | mix N | contention N | bench-alloc N | bench-exceptions N | bench-exc-mixed N");
                return 2;
        }
    }

    static int kindBoom, kindInvalid, kindArg;

    static void ExceptionKinds(int n)
    {
        for (int i = 0; i < n; i++)
        {
            try { Middle(i); }
            catch (BoomException) { Interlocked.Increment(ref kindBoom); }
            if (i % 2 == 0)
            {
                try { ThrowInvalid(); }
                catch (InvalidOperationException) { Interlocked.Increment(ref kindInvalid); }
            }
            if (i % 3 == 0)
            {
                try
                {
                    if (i % 2 == 0) ThrowArgA(); else ThrowArgB();
                }
                catch (ArgumentException) { Interlocked.Increment(ref kindArg); }
            }
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void ThrowInvalid() => throw new InvalidOperationException("kind");

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void ThrowArgA() => throw new ArgumentException("a");

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void ThrowArgB() => throw new ArgumentException("b");

    static void Exceptions(int n)
    {
        for (int i = 0; i < n; i++) Catcher(i);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Catcher(int i)
    {
        try
        {
            Middle(i);
        }
        catch (BoomException e) when (Filter(e))
        {
            caught++;
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static bool Filter(BoomException e)
    {
        filters++;
        return e.Message.Length > 0;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Middle(int i)
    {
        try
        {
            Inner(i);
        }
        finally
        {
            finallies++;
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Inner(int i) => Thrower(i);

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Thrower(int i) => throw new BoomException(i);

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void BackgroundFail() => throw new InvalidOperationException("background failure");

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Widgets(int m)
    {
        for (int i = 0; i < m; i++) keep[i & 1023] = new Widget(i);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void AllocHeavy(int count)
    {
        for (int i = 0; i < count; i++) keep[i & 1023] = new HeavyNode();
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void AllocLight(int count)
    {
        for (int i = 0; i < count; i++) keep[i & 1023] = new LightNode();
    }

    // 90% of the bytes in HeavyNode (144 B), 10% in LightNode (24 B); n rounds of 100 KB-ish.
    static void Mix(int rounds)
    {
        for (int r = 0; r < rounds; r++)
        {
            AllocHeavy(6250);   // 900 000 bytes
            AllocLight(4167);   // ~100 000 bytes
        }
    }

    static readonly object gate = new object();

    // n rounds: the main thread holds `gate` for 30 ms while a worker blocks on it once.
    static void Contention(int n)
    {
        for (int i = 0; i < n; i++)
        {
            var holding = new ManualResetEventSlim();
            Thread worker;
            lock (gate)
            {
                worker = new Thread(() => { holding.Wait(); WaitForGate(); }) { Name = "waiter" };
                worker.Start();
                holding.Set();
                Thread.Sleep(30);
            }
            worker.Join();
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WaitForGate()
    {
        lock (gate) { sink = gate; }
    }

    // Allocation-heavy benchmark: prints elapsed ms.
    static int BenchAlloc(int n)
    {
        var sw = System.Diagnostics.Stopwatch.StartNew();
        long total = 0;
        for (int i = 0; i < n; i++)
        {
            var w = new Widget(i);
            keep[i & 1023] = w;
            if ((i & 7) == 0) keep[(i >> 3) & 1023] = new string('x', i & 63);
            total += w.A;
        }
        sink = total;
        Console.WriteLine($"bench-alloc {n} {sw.Elapsed.TotalMilliseconds:F1} ms");
        return 0;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long Work(int i)
    {
        long h = i;
        for (int k = 0; k < 4000; k++) h = h * 31 + k;
        return h;
    }

    // A busier app that throws often: about 10 µs of work per iteration, one exception every 10th
    // iteration (on the order of 10 000 exceptions a second). Prints elapsed ms.
    static int BenchExceptionsMixed(int n)
    {
        var sw = System.Diagnostics.Stopwatch.StartNew();
        long total = 0;
        for (int i = 0; i < n; i++)
        {
            total += Work(i);
            if (i % 10 == 0) Catcher(i);
        }
        sink = total;
        Console.WriteLine($"bench-exc-mixed {n} {sw.Elapsed.TotalMilliseconds:F1} ms caught {caught}");
        return 0;
    }

    // Exception-heavy benchmark: prints elapsed ms.
    static int BenchExceptions(int n)
    {
        var sw = System.Diagnostics.Stopwatch.StartNew();
        Exceptions(n);
        Console.WriteLine($"bench-exceptions {n} {sw.Elapsed.TotalMilliseconds:F1} ms caught {caught}");
        return 0;
    }
}
