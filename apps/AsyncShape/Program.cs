// AsyncShape: requests of a known async shape, for the logical async stack tests. Each request
// (Shop.Orders.HandleAsync, started through Task.Run, `parallel` at a time) awaits a delay
// (Task.Delay), computes (Shop.Orders.Compute: known CPU work), then awaits a downstream call
// (Shop.Inventory.LoadAsync, which awaits a delay and then parses: Shop.Inventory.Parse, CPU),
// then renders (Shop.Orders.Render, CPU), resumed by LoadAsync's completion on its thread.
// The app measures itself with Stopwatch and prints, one `key value` line each, the sums the
// profile must match: time spent awaiting in each awaiting method, CPU-work time of each
// working method, request count and latencies.
//
// Usage: AsyncShape [requests=60] [parallel=4] [delay_ms=30] [compute_ms=15] [downstream_ms=20] [parse_ms=8] [render_ms=6]
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;

namespace Shop;

static class Sums
{
    public static long HandleAwaitDelayTicks;
    public static long HandleAwaitDownstreamTicks;
    public static long LoadAwaitDelayTicks;
    public static long ComputeTicks;
    public static long ParseTicks;
    public static long RenderTicks;
    public static long Checksum;

    public static void Add(ref long sum, long ticks) => Interlocked.Add(ref sum, ticks);
    public static long Ns(long ticks) => (long)(ticks * (1e9 / Stopwatch.Frequency));
}

static class Work
{
    /// Busy CPU work for about `ms` milliseconds of this thread's time (by the clock: the
    /// machine may be shared, so the loop checks the clock rather than counting iterations).
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static long Spin(double ms)
    {
        var sw = Stopwatch.StartNew();
        long x = 17;
        long limit = (long)(ms * Stopwatch.Frequency / 1000);
        while (sw.ElapsedTicks < limit)
        {
            for (int i = 0; i < 2000; i++)
            {
                x = x * 6364136223846793005L + 1442695040888963407L;
            }
        }
        return x;
    }
}

static class Orders
{
    public static int DelayMs = 30, ComputeMs = 15, RenderMs = 6;

    public static async Task<long> HandleAsync(int id)
    {
        long t0 = Stopwatch.GetTimestamp();
        await Task.Delay(DelayMs);
        long t1 = Stopwatch.GetTimestamp();
        Sums.Add(ref Sums.HandleAwaitDelayTicks, t1 - t0);
        long x = Compute(id);
        long t2 = Stopwatch.GetTimestamp();
        long y = await Inventory.LoadAsync(id);
        long t3 = Stopwatch.GetTimestamp();
        Sums.Add(ref Sums.HandleAwaitDownstreamTicks, t3 - t2);
        return Render(x, y);
    }

    /// Runs after the downstream call completed: resumed by LoadAsync's completion, on its thread.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static long Render(long x, long y)
    {
        long t0 = Stopwatch.GetTimestamp();
        long r = Work.Spin(RenderMs) ^ x ^ y;
        Sums.Add(ref Sums.RenderTicks, Stopwatch.GetTimestamp() - t0);
        return r;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long Compute(int id)
    {
        long t0 = Stopwatch.GetTimestamp();
        long r = Work.Spin(ComputeMs) + id;
        Sums.Add(ref Sums.ComputeTicks, Stopwatch.GetTimestamp() - t0);
        return r;
    }
}

static class Inventory
{
    public static int DownstreamMs = 20, ParseMs = 8;

    public static async Task<long> LoadAsync(int id)
    {
        long t0 = Stopwatch.GetTimestamp();
        await Task.Delay(DownstreamMs);
        Sums.Add(ref Sums.LoadAwaitDelayTicks, Stopwatch.GetTimestamp() - t0);
        return Parse(id);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long Parse(int id)
    {
        long t0 = Stopwatch.GetTimestamp();
        long r = Work.Spin(ParseMs) - id;
        Sums.Add(ref Sums.ParseTicks, Stopwatch.GetTimestamp() - t0);
        return r;
    }
}

/// `AsyncShape bench SECONDS WORK PARALLEL`: PARALLEL loops, each awaiting an async method that
/// yields (two real awaits: a Task await and a Task.Yield continuation) then burning WORK units of
/// CPU (a fixed loop, so the profiler's cost shows as fewer awaits done), for SECONDS; prints
/// `awaits N`, `elapsed_ms T` and `awaits_per_s R`.
static class Bench
{
    static long awaits;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long Burn(int units)
    {
        long x = units;
        for (int i = 0; i < units; i++) x = x * 6364136223846793005L + 1442695040888963407L;
        return x;
    }

    static async Task<long> Step(int work)
    {
        await Task.Yield();
        Interlocked.Increment(ref awaits);
        return Burn(work);
    }

    static async Task<long> Loop(int work, Stopwatch sw, long until)
    {
        long acc = 0;
        while (sw.ElapsedTicks < until)
        {
            acc ^= await Step(work);
            Interlocked.Increment(ref awaits);
        }
        return acc;
    }

    public static async Task<int> Run(string[] args)
    {
        double seconds = double.Parse(args[1], System.Globalization.CultureInfo.InvariantCulture);
        int work = int.Parse(args[2]), parallel = int.Parse(args[3]);
        var sw = Stopwatch.StartNew();
        long until = (long)(seconds * Stopwatch.Frequency);
        var loops = Enumerable.Range(0, parallel).Select(_ => Task.Run(() => Loop(work, sw, until))).ToArray();
        long acc = 0;
        foreach (long r in await Task.WhenAll(loops)) acc ^= r;
        double ms = sw.Elapsed.TotalMilliseconds;
        Console.WriteLine($"awaits {awaits}");
        Console.WriteLine($"elapsed_ms {ms:F0}");
        Console.WriteLine($"awaits_per_s {awaits / (ms / 1000):F0}");
        Console.WriteLine($"checksum {acc}");
        return 0;
    }
}

static class Program
{
    static int Arg(string[] a, int i, int d) => a.Length > i ? int.Parse(a[i]) : d;

    static async Task<int> Main(string[] args)
    {
        if (args.Length > 0 && args[0] == "bench") return await Bench.Run(args);
        int requests = Arg(args, 0, 60), parallel = Arg(args, 1, 4);
        Orders.DelayMs = Arg(args, 2, 30);
        Orders.ComputeMs = Arg(args, 3, 15);
        Inventory.DownstreamMs = Arg(args, 4, 20);
        Inventory.ParseMs = Arg(args, 5, 8);
        Orders.RenderMs = Arg(args, 6, 6);
        var latencies = new List<long>();
        var all = Stopwatch.StartNew();
        for (int done = 0; done < requests;)
        {
            int n = Math.Min(parallel, requests - done);
            var batch = new Task<long>[n];
            for (int i = 0; i < n; i++)
            {
                int id = done + i;
                batch[i] = Task.Run(async () =>
                {
                    long t0 = Stopwatch.GetTimestamp();
                    long r = await Orders.HandleAsync(id);
                    lock (latencies) latencies.Add(Stopwatch.GetTimestamp() - t0);
                    return r;
                });
            }
            foreach (long r in await Task.WhenAll(batch)) Sums.Checksum ^= r;
            done += n;
        }
        latencies.Sort();
        long P(double q) => Sums.Ns(latencies[Math.Min(latencies.Count - 1, (int)(q * latencies.Count))]);
        Console.WriteLine($"requests {latencies.Count}");
        Console.WriteLine($"latency_sum_ns {Sums.Ns(latencies.Sum())}");
        Console.WriteLine($"latency_p50_ns {P(0.50)}");
        Console.WriteLine($"latency_p95_ns {P(0.95)}");
        Console.WriteLine($"await_ns Shop.Orders.HandleAsync Task.Delay {Sums.Ns(Sums.HandleAwaitDelayTicks)}");
        Console.WriteLine($"await_ns Shop.Orders.HandleAsync Shop.Inventory.LoadAsync {Sums.Ns(Sums.HandleAwaitDownstreamTicks)}");
        Console.WriteLine($"await_ns Shop.Inventory.LoadAsync Task.Delay {Sums.Ns(Sums.LoadAwaitDelayTicks)}");
        Console.WriteLine($"work_ns Shop.Orders.Compute {Sums.Ns(Sums.ComputeTicks)}");
        Console.WriteLine($"work_ns Shop.Inventory.Parse {Sums.Ns(Sums.ParseTicks)}");
        Console.WriteLine($"work_ns Shop.Orders.Render {Sums.Ns(Sums.RenderTicks)}");
        Console.WriteLine($"elapsed_ns {(long)all.Elapsed.TotalMilliseconds * 1_000_000}");
        Console.WriteLine($"checksum {Sums.Checksum}");
        return 0;
    }
}
