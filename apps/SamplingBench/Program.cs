// Benchmark workloads for the sampler's overhead (bench/sampling.sh).
//   cpu SECONDS       10 threads computing flat out; prints operations completed
//   server SECONDS    200 threads that mostly block (a 5 ms wait per request) and do ~20 µs of
//                     work per request; prints requests completed
// Both print `ops=N cpu_ms=M seconds=S`: throughput and the process's CPU time (utime+stime).
using System.Diagnostics;
using System.Runtime.CompilerServices;

namespace SamplingBench;

public static class Program
{
    static volatile bool stop;

    public static int Main(string[] args)
    {
        string mode = args.Length > 0 ? args[0] : "cpu";
        double seconds = args.Length > 1 ? double.Parse(args[1], System.Globalization.CultureInfo.InvariantCulture) : 5;
        int threads = mode == "server" ? 200 : 10;
        var counts = new long[threads * 16];
        var ts = new Thread[threads];
        for (int i = 0; i < threads; i++)
        {
            int k = i;
            ts[i] = mode == "server"
                ? new Thread(() => Server(k, counts)) { Name = $"server-{k}" }
                : new Thread(() => Cpu(k, counts)) { Name = $"cpu-{k}" };
        }
        var sw = Stopwatch.StartNew();
        foreach (var t in ts) t.Start();
        Thread.Sleep(TimeSpan.FromSeconds(seconds));
        stop = true;
        foreach (var t in ts) t.Join();
        long ops = 0;
        for (int i = 0; i < threads; i++) ops += counts[i * 16];
        Console.WriteLine($"ops={ops} cpu_ms={ProcessCpuMs()} seconds={sw.Elapsed.TotalSeconds:F3}");
        return 0;
    }

    static void Cpu(int k, long[] counts)
    {
        long x = k + 1, n = 0;
        while (!stop)
        {
            x = Work(x, 20_000);
            n++;
        }
        counts[k * 16] = n + (x == 42 ? 1 : 0);
    }

    static void Server(int k, long[] counts)
    {
        long x = k + 1, n = 0;
        using var ev = new ManualResetEventSlim(false);
        while (!stop)
        {
            ev.Wait(5); // the "I/O": blocked, no CPU
            x = Work(x, 10_000);
            n++;
        }
        counts[k * 16] = n + (x == 42 ? 1 : 0);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long Work(long x, int iters)
    {
        for (int i = 0; i < iters; i++) x = x * 6364136223846793005L + 1442695040888963407L;
        return x;
    }

    static long ProcessCpuMs()
    {
        string stat = File.ReadAllText("/proc/self/stat");
        string[] f = stat[(stat.LastIndexOf(')') + 2)..].Split(' ');
        return (long.Parse(f[11]) + long.Parse(f[12])) * 10;
    }
}
