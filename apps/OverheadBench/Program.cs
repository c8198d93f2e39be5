// Fixed-work workload for the sampler's overhead harness (bench/overhead.sh): the same amount of
// work in every run, so that profiled and plain runs compare by the CPU time they consumed, which
// survives a shared machine better than throughput does.
//
//   OverheadBench BUSY BLOCKED WORK [WAKE_MS]
//
// BUSY threads each run WORK * 100 rounds of 20,000 dependent multiply-adds (WORK = 1200 is about
// 3 s of one core on a 2.8 GHz Xeon); BLOCKED threads wait on an event that is never set (WAKE_MS
// > 0: they wake every WAKE_MS ms and block again). Prints one line of figures:
//   work_ms       wall time from the first busy thread's start to the last one's end
//   proc_cpu_ns   the process's CPU time at the end (CLOCK_PROCESS_CPUTIME_ID: every thread, dead ones too)
//   cpu_<group>   CPU time per thread group at the end, ns (schedstat of each live thread, grouped by
//                 name without digits: busy, blocked, clrprof-sampler, clrprof-writer, the runtime's)
//   busy_cpu_ns   the busy threads' own CPU time, each read on the thread at its end (the signal
//                 handler's time is in it)
// and the unit costs of the sampler's primitives measured in the same process:
//   clock_mono_ns      one clock_gettime(CLOCK_MONOTONIC) (vDSO)
//   clock_thread_ns    one read of another thread's CPU clock (a system call)
//   proc_stat_ns       one pread of /proc/self/task/TID/stat (state of a thread)
//   proc_schedstat_ns  one pread of /proc/self/task/TID/schedstat
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;

namespace OverheadBench;

public static unsafe class Program
{
    [StructLayout(LayoutKind.Sequential)]
    struct Timespec { public long Sec; public long Nsec; }

    [DllImport("libc", SetLastError = true)] static extern int clock_gettime(int clk, out Timespec ts);
    [DllImport("libc")] static extern int gettid();
    [DllImport("libc", SetLastError = true)] static extern int open(string path, int flags);
    [DllImport("libc")] static extern nint pread(int fd, byte* buf, nint count, long offset);
    [DllImport("libc")] static extern int close(int fd);

    const int CLOCK_MONOTONIC = 1, CLOCK_PROCESS_CPUTIME_ID = 2, CLOCK_THREAD_CPUTIME_ID = 3;

    static long Ns(int clk) { clock_gettime(clk, out var t); return t.Sec * 1_000_000_000 + t.Nsec; }

    public static int Main(string[] args)
    {
        int busy = int.Parse(args[0]);
        int blocked = int.Parse(args[1]);
        long work = long.Parse(args[2]);
        int wakeMs = args.Length > 3 ? int.Parse(args[3]) : 0;
        long rounds = work * 100;

        // Blocked threads first (their start is part of the process's CPU, not of the window).
        var gate = new ManualResetEvent(false);
        var quit = new ManualResetEvent(false);
        var parked = new CountdownEvent(blocked);
        var bts = new Thread[blocked];
        for (int i = 0; i < blocked; i++)
        {
            bts[i] = new Thread(() =>
            {
                parked.Signal();
                if (wakeMs > 0) { while (!quit.WaitOne(wakeMs)) { } }
                else quit.WaitOne();
            }, 256 * 1024) { Name = $"blocked-{i}", IsBackground = true };
            bts[i].Start();
        }
        parked.Wait();

        var cpu = new long[busy];
        var tids = new int[busy];
        var ready = new CountdownEvent(busy);
        var ts = new Thread[busy];
        long sink = 0;
        for (int i = 0; i < busy; i++)
        {
            int k = i;
            ts[i] = new Thread(() =>
            {
                tids[k] = gettid();
                ready.Signal();
                gate.WaitOne();
                long x = k + 1;
                for (long r = 0; r < rounds; r++) x = Work(x, 20_000);
                cpu[k] = Ns(CLOCK_THREAD_CPUTIME_ID);
                Interlocked.Add(ref sink, x & 1);
            }) { Name = $"busy-{k}" };
            ts[i].Start();
        }
        ready.Wait();
        // Unit costs, measured while the busy threads wait at the gate (no contention for CPUs
        // from this process).
        var costs = UnitCosts(tids.Length > 0 ? tids[0] : gettid());
        var sw = Stopwatch.StartNew();
        gate.Set();
        foreach (var t in ts) t.Join();
        double workMsOut = sw.Elapsed.TotalMilliseconds;
        long busyCpu = 0;
        foreach (var c in cpu) busyCpu += c;

        var groups = ThreadGroups();
        quit.Set();
        long proc = Ns(CLOCK_PROCESS_CPUTIME_ID);
        var line = new System.Text.StringBuilder();
        line.Append($"work_ms={workMsOut:F1} proc_cpu_ns={proc} busy_cpu_ns={busyCpu} threads={busy + blocked} sink={sink & 1}");
        foreach (var (k, v) in costs) line.Append($" {k}={v:F1}");
        foreach (var (k, v) in groups.OrderByDescending(g => g.Value)) line.Append($" cpu_{k}={v}");
        Console.WriteLine(line.ToString());
        return 0;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long Work(long x, int iters)
    {
        for (int i = 0; i < iters; i++) x = x * 6364136223846793005L + 1442695040888963407L;
        return x;
    }

    static List<(string, double)> UnitCosts(int otherTid)
    {
        var r = new List<(string, double)>();
        const int N = 20_000;
        long t0 = Ns(CLOCK_THREAD_CPUTIME_ID);
        long s = 0;
        for (int i = 0; i < N; i++) s += Ns(CLOCK_MONOTONIC);
        long t1 = Ns(CLOCK_THREAD_CPUTIME_ID);
        r.Add(("clock_mono_ns", (t1 - t0) / (double)N));
        int clk = (~otherTid << 3) | 6;
        t0 = Ns(CLOCK_THREAD_CPUTIME_ID);
        for (int i = 0; i < N; i++) s += Ns(clk);
        t1 = Ns(CLOCK_THREAD_CPUTIME_ID);
        r.Add(("clock_thread_ns", (t1 - t0) / (double)N));
        byte* buf = stackalloc byte[512];
        foreach (var f in new[] { "stat", "schedstat" })
        {
            int fd = open($"/proc/self/task/{otherTid}/{f}", 0);
            if (fd < 0) continue;
            const int M = 5_000;
            t0 = Ns(CLOCK_THREAD_CPUTIME_ID);
            for (int i = 0; i < M; i++) s += pread(fd, buf, 512, 0);
            t1 = Ns(CLOCK_THREAD_CPUTIME_ID);
            close(fd);
            r.Add(($"proc_{f}_ns", (t1 - t0) / (double)M));
        }
        GC.KeepAlive(s);
        return r;
    }

    /// CPU time per live thread group (name without digits and trailing '-'/'_'/' '), from schedstat.
    static Dictionary<string, long> ThreadGroups()
    {
        var d = new Dictionary<string, long>();
        foreach (var dir in Directory.GetDirectories("/proc/self/task"))
        {
            try
            {
                string comm = File.ReadAllText(Path.Combine(dir, "comm")).Trim();
                string name = new string(comm.Where(c => !char.IsDigit(c)).ToArray()).TrimEnd('-', '_', ' ', '#');
                name = name.Replace(' ', '_').Replace('.', '_');
                if (name.Length == 0) name = "other";
                long ns = long.Parse(File.ReadAllText(Path.Combine(dir, "schedstat")).Split(' ')[0]);
                d[name] = d.GetValueOrDefault(name) + ns;
            }
            catch (IOException) { }
        }
        return d;
    }
}
