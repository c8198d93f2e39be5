// Profiling target for the sampler: workloads with known CPU and wall-time shapes.
//   ratio [ms]    Heavy and Light burn CPU in a 3:1 ratio on one thread (about ms of its CPU time)
//   sleep [heartbeat]  Spinner spins 800 ms of CPU, then Sleeper sleeps 500 ms, on the same thread
//                 (with a heartbeat thread that wakes every 15 ms for a little work, as timers do)
//   blocking      four threads each spin 200 ms, then block 800 ms in a different way (Thread.Sleep,
//                 Monitor.Wait, WaitHandle.WaitOne, Task.Wait), then exit; a heartbeat thread runs
//                 beside them; prints each thread's measured blocked time
//   pinvoke [ms]  NativeWork.Checksum calls zlib's adler32 (libz.so.1) over a buffer in a loop
//   threads N ms  N threads, each spinning for ms then blocking until the end
//   quick         returns at once
//   syscalls [ms] Syscalls.ReadProc reads small /proc files for about ms of CPU time: most of it is
//                 spent in the kernel, under libc's system call wrappers (open, read, close), whose
//                 code has no frame pointers; prints the CPU time it used
//   osr           methods called once from Main whose hot loop moves to on-stack-replacement (OSR)
//                 code: Osr.Spin spins 800 ms of CPU; Osr.SpinThenSleep spins, then sleeps 600 ms
//                 inside its OSR code; Osr.Catch spins, throws, and its catch handler (a funclet of
//                 the OSR code) calls Osr.SpinInCatch (600 ms of CPU), then sleeps 400 ms
//   prolog [ms]   Prolog.Caller calls the tiny Prolog.Leaf in a loop for about ms of CPU time;
//                 both are compiled without optimization, so Leaf sets up an RBP frame on every
//                 call and many samples stop inside its prolog (after `push rbp`, before RBP
//                 points at the new frame)
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;

namespace Sampling;

public static class Program
{
    public static int Main(string[] args)
    {
        string mode = args.Length > 0 ? args[0] : "ratio";
        switch (mode)
        {
            case "ratio":
                Ratio.Run(args.Length > 1 ? int.Parse(args[1]) : 2000);
                break;
            case "sleep":
                using (args.Length > 1 && args[1] == "heartbeat" ? new Heartbeat() : null)
                    Sleepy.Run();
                break;
            case "blocking":
                Blocking.Run();
                break;
            case "pinvoke":
                Console.WriteLine($"adler={NativeWork.Run(args.Length > 1 ? int.Parse(args[1]) : 1500)}");
                break;
            case "threads":
                Many.Run(int.Parse(args[1]), int.Parse(args[2]));
                break;
            case "quick":
                break;
            case "syscalls":
                Syscalls.Run(args.Length > 1 ? int.Parse(args[1]) : 600);
                break;
            case "osr":
                // Called straight from Main: their only caller is Main.
                Osr.Spin(800);
                Osr.SpinThenSleep(300, 600);
                Osr.Catch(600, 400);
                break;
            case "prolog":
                Console.WriteLine($"prolog sum={Prolog.Run(args.Length > 1 ? int.Parse(args[1]) : 1000)}");
                break;
            default:
                Console.Error.WriteLine($"unknown mode {mode}");
                return 1;
        }
        // The kernel's CPU time of the main thread (its tid is the pid), for tests to compare.
        Console.WriteLine($"main_tid={Environment.ProcessId} main_cpu_ms={MainThreadCpuMs()}");
        Console.WriteLine($"done {mode}");
        return 0;
    }

    // utime + stime from /proc/self/task/<tid>/stat, in milliseconds.
    internal static long MainThreadCpuMs()
    {
        string stat = File.ReadAllText($"/proc/self/task/{Environment.ProcessId}/stat");
        string[] f = stat[(stat.LastIndexOf(')') + 2)..].Split(' ');
        long ticks = long.Parse(f[11]) + long.Parse(f[12]);
        return ticks * 1000 / 100; // USER_HZ is 100 on Linux
    }
}

public static class Ratio
{
    static long sink;

    // Each round gives Heavy three units of work and Light one; the units are identical loops.
    // Each unit's length is drawn from the same spread (0.5 to 1.5 of the calibrated ~2 ms): with
    // fixed units a round lasts a fixed 8 ms, and CPU-time samples, which the kernel takes at its
    // ticks (every 12 ms of CPU at 100 Hz with a 4 ms tick), fell on the same two points of every
    // round for long stretches, moving Heavy's share far from 3/4 in single runs.
    public static void Run(int totalMs)
    {
        // Calibrate a unit to about 2 ms.
        long iters = 1 << 16;
        var sw = Stopwatch.StartNew();
        while (true)
        {
            sw.Restart();
            Unit(iters);
            if (sw.Elapsed.TotalMilliseconds >= 2) break;
            iters *= 2;
        }
        // Until the thread has had about totalMs of CPU (not wall time: on a busy machine the
        // profile would otherwise hold fewer samples than the tests expect).
        long start = Program.MainThreadCpuMs();
        while (Program.MainThreadCpuMs() - start < totalMs)
        {
            Heavy(iters);
            Light(iters);
        }
        Console.WriteLine($"sink={sink & 1}");
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Heavy(long iters)
    {
        // The `sink++` after each call keeps the JIT from turning the last call into a tail call
        // (which would drop this frame from the stack).
        Unit(Spread(iters));
        sink++;
        Unit(Spread(iters));
        sink++;
        Unit(Spread(iters));
        sink++;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Light(long iters)
    {
        Unit(Spread(iters));
        sink++;
    }

    static ulong seed = 0x9e3779b97f4a7c15;

    // A length from 0.5 to 1.5 times `iters`, the same spread for every unit (xorshift64).
    static long Spread(long iters)
    {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        return iters / 2 + (long)(seed % (ulong)iters);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Unit(long iters)
    {
        long x = sink;
        for (long i = 0; i < iters; i++) x = x * 6364136223846793005L + 1442695040888963407L;
        sink = x;
    }
}

public static class Syscalls
{
    public static void Run(int ms)
    {
        long before = Program.MainThreadCpuMs();
        long n = ReadProc(ms);
        Console.WriteLine($"reads={n} syscalls_cpu_ms={Program.MainThreadCpuMs() - before}");
    }

    // Opens and reads /proc files until the thread has used `ms` of CPU time.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static long ReadProc(int ms)
    {
        long end = Program.MainThreadCpuMs() + ms;
        long n = 0;
        var buf = new byte[4096];
        while (true)
        {
            for (int i = 0; i < 20; i++)
            {
                using var f = File.OpenHandle(i % 2 == 0 ? "/proc/self/status" : "/proc/self/maps");
                n += RandomAccess.Read(f, buf, 0);
            }
            if (Program.MainThreadCpuMs() >= end) return n;
        }
    }
}

public static class Sleepy
{
    public static void Run()
    {
        var sw = Stopwatch.StartNew();
        Spinner(800);
        long spin = (long)sw.Elapsed.TotalMicroseconds;
        sw.Restart();
        Sleeper(500);
        long sleep = (long)sw.Elapsed.TotalMicroseconds;
        // Measured wall times, for tests to compare with the profile.
        Console.WriteLine($"spin_wall_us={spin} sleep_wall_us={sleep}");
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Sleeper(int ms) => Thread.Sleep(ms);

    // Spins for `ms` of CPU time (not wall time: on a busy machine it takes longer).
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Spinner(int ms)
    {
        var p = Process.GetCurrentProcess();
        var end = p.TotalProcessorTime + TimeSpan.FromMilliseconds(ms);
        long x = 1;
        do
        {
            for (int i = 0; i < 100000; i++) x = x * 31 + i;
            p.Refresh();
        } while (p.TotalProcessorTime < end);
        if (x == 42) Console.WriteLine("unlikely");
    }
}

// Each method is called once and loops: tiered compilation starts it as tier-0 code with
// patchpoints, and the runtime moves the running frame to an optimized OSR version mid-loop. The
// OSR frame sits on top of the tier-0 frame, which stays on the stack.
public static class Prolog
{
    public static long Run(int totalMs)
    {
        long start = Program.MainThreadCpuMs();
        long sum = 0;
        while (Program.MainThreadCpuMs() - start < totalMs)
            sum += Caller(1_000_000);
        return sum;
    }

    // Not optimized: no tiering and no OSR, an RBP frame (as Leaf's).
    [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
    static long Caller(int n)
    {
        long sum = 0;
        for (int i = 0; i < n; i++)
            sum += Leaf(i);
        return sum;
    }

    // A few instructions between its prolog (`push rbp; mov rbp, rsp`) and its epilog.
    [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
    static long Leaf(int x) => x ^ 5;
}

public static class Osr
{
    static long sink;

    // The main thread's CPU time (these run on it): the process's would count the runtime's
    // background threads too, and tiered compilation overlapping a spin on a loaded machine
    // left Spin 623 ms of its 800 in one test run.
    static TimeSpan Cpu() => TimeSpan.FromMilliseconds(Program.MainThreadCpuMs());

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void Spin(int ms)
    {
        var end = Cpu() + TimeSpan.FromMilliseconds(ms);
        long x = 1;
        do
        {
            for (int i = 0; i < 100000; i++) x = x * 31 + i;
        } while (Cpu() < end);
        sink += x;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void SpinThenSleep(int spinMs, int sleepMs)
    {
        var end = Cpu() + TimeSpan.FromMilliseconds(spinMs);
        long x = 1;
        do
        {
            for (int i = 0; i < 100000; i++) x = x * 31 + i;
        } while (Cpu() < end);
        // Blocked inside the OSR code: the wall sampler walks this frame with DoStackSnapshot.
        Thread.Sleep(sleepMs);
        sink += x;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void Catch(int spinMs, int sleepMs)
    {
        long x = 1;
        for (int i = 0; i < 50_000_000; i++) x = x * 31 + i; // moves this frame to OSR code
        try
        {
            Throw(x);
        }
        catch (InvalidOperationException)
        {
            // The catch handler is a funclet of the OSR code.
            SpinInCatch(spinMs);
            Thread.Sleep(sleepMs);
        }
        sink += x;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Throw(long x) => throw new InvalidOperationException($"osr {x & 1}");

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void SpinInCatch(int ms)
    {
        var end = Cpu() + TimeSpan.FromMilliseconds(ms);
        long x = 1;
        do
        {
            for (int i = 0; i < 100000; i++) x = x * 31 + i;
        } while (Cpu() < end);
        sink += x;
    }
}

public static unsafe class NativeWork
{
    [DllImport("libz.so.1", EntryPoint = "adler32")]
    static extern nuint Adler32(nuint adler, byte* buf, uint len);

    public static nuint Run(int ms)
    {
        var data = new byte[1 << 20];
        new Random(7).NextBytes(data);
        nuint a = 1;
        var sw = Stopwatch.StartNew();
        while (sw.ElapsedMilliseconds < ms) a = Checksum(data, a);
        return a;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static nuint Checksum(byte[] data, nuint a)
    {
        fixed (byte* p = data) return Adler32(a, p, (uint)data.Length);
    }
}

public static class Many
{
    public static void Run(int n, int spinMs)
    {
        using var done = new ManualResetEventSlim(false);
        var threads = new Thread[n];
        int ready = 0;
        for (int i = 0; i < n; i++)
        {
            threads[i] = new Thread(() =>
            {
                Spin(spinMs);
                Interlocked.Increment(ref ready);
                done.Wait();
            }) { Name = $"many-{i}" };
            threads[i].Start();
        }
        while (Volatile.Read(ref ready) < n) Thread.Sleep(10);
        Thread.Sleep(200);
        done.Set();
        foreach (var t in threads) t.Join();
        Console.WriteLine($"threads={n}");
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Spin(int ms)
    {
        var sw = Stopwatch.StartNew();
        long x = 1;
        while (sw.ElapsedMilliseconds < ms)
            for (int i = 0; i < 1000; i++) x = x * 31 + i;
        if (x == 42) Console.WriteLine("unlikely");
    }
}

// A thread that wakes every 15 ms and works for about half a millisecond until disposed.
public sealed class Heartbeat : IDisposable
{
    readonly Thread thread;
    volatile bool stop;

    public Heartbeat()
    {
        thread = new Thread(Beat) { Name = "heartbeat", IsBackground = true };
        thread.Start();
    }

    void Beat()
    {
        long x = 1;
        while (!stop)
        {
            Thread.Sleep(15);
            var sw = Stopwatch.StartNew();
            while (sw.Elapsed.TotalMilliseconds < 0.5)
                for (int i = 0; i < 1000; i++) x = x * 31 + i;
        }
        if (x == 42) Console.WriteLine("unlikely");
    }

    public void Dispose()
    {
        stop = true;
        thread.Join();
    }
}

public static class Blocking
{
    const int SpinMs = 200;
    const int BlockMs = 800;

    public static void Run()
    {
        using var heartbeat = new Heartbeat();
        var ways = new (string Name, Action<int> Block)[]
        {
            ("sleep", OnSleep),
            ("monitor", OnMonitor),
            ("event", OnEvent),
            ("task", OnTask),
        };
        // Once on this thread first, so the blocking threads do not spend their time compiling.
        foreach (var w in ways) w.Block(1);
        var blocked = new double[ways.Length];
        var threads = new Thread[ways.Length];
        for (int i = 0; i < ways.Length; i++)
        {
            int k = i;
            threads[k] = new Thread(() =>
            {
                Spin(SpinMs);
                var sw = Stopwatch.StartNew();
                ways[k].Block(BlockMs);
                blocked[k] = sw.Elapsed.TotalMicroseconds;
                Spin(20);
            }) { Name = $"block-{ways[k].Name}" };
            threads[k].Start();
        }
        foreach (var t in threads) t.Join();
        for (int i = 0; i < ways.Length; i++) Console.WriteLine($"blocked_{ways[i].Name}_us={(long)blocked[i]}");
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void OnSleep(int ms) => Thread.Sleep(ms);

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void OnMonitor(int ms)
    {
        var gate = new object();
        lock (gate) Monitor.Wait(gate, ms); // nobody pulses: the timeout ends the wait
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void OnEvent(int ms)
    {
        using var e = new ManualResetEvent(false);
        e.WaitOne(ms);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void OnTask(int ms) => Task.Delay(ms).Wait();

    // Spins for `ms` of wall time.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Spin(int ms)
    {
        var sw = Stopwatch.StartNew();
        long x = 1;
        while (sw.ElapsedMilliseconds < ms)
            for (int i = 0; i < 1000; i++) x = x * 31 + i;
        if (x == 42) Console.WriteLine("unlikely");
    }
}
