// Known moments for the collection trigger tests (crates/clrprof/tests/e2e/triggers.rs).
//   Triggers throws BURSTS N GAP_MS  BURSTS bursts, each N TimeoutExceptions and N InvalidOperationExceptions
//                                 thrown and caught, each followed by GAP_MS of sleep; prints "throwing", then "timeouts=… others=…"
//   Triggers gc COUNT MB          retains about MB of small linked objects, then runs COUNT induced
//                                 full blocking collections 200 ms apart; prints "collections=…"
//   Triggers cpu IDLE_MS BURN_MS  sleeps IDLE_MS, then two threads spin BURN_MS of wall time; prints
//                                 "burn_cpu_ns=…" (the spinning threads' CPU time, CLOCK_THREAD_CPUTIME_ID)
using System.Runtime.InteropServices;

switch (args[0])
{
    case "throws":
    {
        int bursts = int.Parse(args[1]), n = int.Parse(args[2]), gap = int.Parse(args[3]);
        long timeouts = 0, others = 0;
        Console.WriteLine("throwing");
        Console.Out.Flush();
        for (int b = 0; b < bursts; b++)
        {
            for (int i = 0; i < n; i++)
            {
                try { Thrower.Timeout(i); } catch (TimeoutException) { timeouts++; }
                try { Thrower.Other(i); } catch (InvalidOperationException) { others++; }
            }
            Thread.Sleep(gap);
        }
        Console.WriteLine($"timeouts={timeouts} others={others}");
        break;
    }
    case "gc":
    {
        int count = int.Parse(args[1]), mb = int.Parse(args[2]);
        // About 40 bytes per node.
        Node? head = null;
        for (long i = 0; i < (long)mb * 1024 * 1024 / 40; i++) head = new Node { Next = head, Value = i };
        for (int i = 0; i < count; i++)
        {
            GC.Collect(2, GCCollectionMode.Forced, blocking: true, compacting: true);
            Thread.Sleep(200);
        }
        GC.KeepAlive(head);
        Console.WriteLine($"collections={count}");
        break;
    }
    case "cpu":
    {
        int idle = int.Parse(args[1]), burn = int.Parse(args[2]);
        Thread.Sleep(idle);
        long total = 0;
        var threads = new Thread[2];
        for (int t = 0; t < threads.Length; t++)
        {
            threads[t] = new Thread(() =>
            {
                long start = Clock.ThreadCpuNs();
                var until = Environment.TickCount64 + burn;
                double x = 1;
                while (Environment.TickCount64 < until) x = Burner.Spin(x);
                Interlocked.Add(ref total, Clock.ThreadCpuNs() - start);
                GC.KeepAlive(x);
            });
            threads[t].Start();
        }
        foreach (var t in threads) t.Join();
        Console.WriteLine($"burn_cpu_ns={total}");
        break;
    }
}

class Node
{
    public Node? Next;
    public long Value;
}

static class Thrower
{
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.NoInlining)]
    public static void Timeout(int i) => throw new TimeoutException($"timeout {i}");

    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.NoInlining)]
    public static void Other(int i) => throw new InvalidOperationException($"other {i}");
}

static class Burner
{
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.NoInlining)]
    public static double Spin(double x)
    {
        for (int i = 0; i < 10000; i++) x = x * 1.0000001 + 0.0000001;
        return x;
    }
}

static class Clock
{
    [StructLayout(LayoutKind.Sequential)]
    struct Timespec { public long Sec; public long Nsec; }

    [DllImport("libc", EntryPoint = "clock_gettime")]
    static extern int ClockGetTime(int clock, out Timespec ts);

    public static long ThreadCpuNs()
    {
        ClockGetTime(3, out var ts); // CLOCK_THREAD_CPUTIME_ID
        return ts.Sec * 1_000_000_000 + ts.Nsec;
    }
}
