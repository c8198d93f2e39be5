// Profiling target for the stress matrix (docs/stress.md, crates/clrprof/tests/e2e/stress.rs): one case
// per argument, each with a known outcome. Every case prints `stress CASE ok …` with the figures the
// tests check, and exits 0 unless it is meant to die.
using System.Diagnostics;
using System.Linq.Expressions;
using System.Reflection;
using System.Reflection.Emit;
using System.Runtime.CompilerServices;

namespace StressApp;

public static class Program
{
    public static int Main(string[] args)
    {
        string mode = args.Length > 0 ? args[0] : "";
        int Arg(int i, int dflt) => args.Length > i ? int.Parse(args[i]) : dflt;
        switch (mode)
        {
            case "threads": return LiveThreads.Run(Arg(1, 1000));
            case "churn": return Churn.Run(Arg(1, 20_000), Arg(2, 8));
            case "dynamic": return Dyn.Run(Arg(1, 1000), Arg(2, 300));
            case "recurse": return Deep.Run(Arg(1, 10_000), Arg(2, 500));
            case "exceptions": return Storm.Run(Arg(1, 300_000));
            case "names": return Names.Run(Arg(1, 3), Arg(2, 150));
            case "failfast":
                Work.Chunk(1);
                Ready();
                Thread.Sleep(Arg(1, 300));
                Environment.FailFast("stress failfast");
                return 1;
            case "unhandled":
                Work.Chunk(1);
                Ready();
                Thread.Sleep(Arg(1, 300));
                throw new StressException(1);
            case "overflow":
                Work.Chunk(1);
                Ready();
                Thread.Sleep(Arg(1, 300));
                return Overflow.Down(0);
            case "wait":
                // Works until killed (or 60 s pass).
                Ready();
                var until = DateTime.UtcNow.AddSeconds(60);
                long acc = 0;
                while (DateTime.UtcNow < until) { acc += Work.Chunk(acc); Thread.Sleep(2); }
                return (int)(acc & 1);
            case "long": return LongRun.Run(Arg(1, 300));
            default:
                Console.Error.WriteLine($"unknown case {mode}: threads|churn|dynamic|recurse|exceptions|names|failfast|unhandled|overflow|wait|long");
                return 64;
        }
    }

    public static void Ready()
    {
        Console.WriteLine($"ready pid={Environment.ProcessId}");
        Console.Out.Flush();
    }

    /// The process's resident set (VmRSS) in KiB.
    public static long RssKb()
    {
        foreach (var l in File.ReadLines("/proc/self/status"))
            if (l.StartsWith("VmRSS:")) return long.Parse(l.Split(' ', StringSplitOptions.RemoveEmptyEntries)[1]);
        return -1;
    }
}

public sealed class StressException(int n) : Exception($"stress {n}");

public static class Work
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static long Chunk(long seed)
    {
        long acc = seed;
        for (int i = 0; i < 20_000; i++) acc = acc * 31 + i;
        return acc;
    }
}

/// N threads alive at once: each calls Leaf 10 times, waits until all N are running, calls Leaf 10
/// more times. Body: N calls, one per thread; Leaf: 20 per thread.
public static class LiveThreads
{
    static long total;
    static int running, maxRunning;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Leaf() => Interlocked.Increment(ref total);

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Body(Barrier all)
    {
        int now = Interlocked.Increment(ref running);
        int max;
        while (now > (max = Volatile.Read(ref maxRunning)) && Interlocked.CompareExchange(ref maxRunning, now, max) != max) { }
        for (int i = 0; i < 10; i++) Leaf();
        all.SignalAndWait();
        for (int i = 0; i < 10; i++) Leaf();
        Interlocked.Decrement(ref running);
    }

    public static int Run(int n)
    {
        using var all = new Barrier(n + 1);
        var threads = new Thread[n];
        for (int i = 0; i < n; i++)
        {
            threads[i] = new Thread(() => Body(all), 256 * 1024) { Name = $"live-{i}" };
            threads[i].Start();
        }
        all.SignalAndWait();
        foreach (var t in threads) t.Join();
        // The barrier opens only once all n threads run Body: n at once.
        Console.WriteLine($"stress threads ok n={n} at_once={maxRunning} leaf={total}");
        return total == 20L * n ? 0 : 1;
    }
}

/// N short-lived threads, `parallel` at a time: each calls Body once, which calls Leaf 3 times. The
/// process's RSS is printed after the first tenth and at the end.
public static class Churn
{
    static long total;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Leaf() => Interlocked.Increment(ref total);

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Body()
    {
        Leaf();
        Leaf();
        Leaf();
    }

    public static int Run(int n, int parallel)
    {
        long early = -1;
        var batch = new Thread[parallel];
        int started = 0;
        while (started < n)
        {
            int k = Math.Min(parallel, n - started);
            for (int i = 0; i < k; i++) { batch[i] = new Thread(Body, 256 * 1024); batch[i].Start(); }
            for (int i = 0; i < k; i++) batch[i].Join();
            started += k;
            if (early < 0 && started >= n / 10) early = Program.RssKb();
        }
        Console.WriteLine($"stress churn ok n={n} leaf={total} rss_kb_early={early} rss_kb_end={Program.RssKb()}");
        return total == 3L * n ? 0 : 1;
    }
}

/// Calls through generated code, `n` times each: a DynamicMethod (LCG) `StressDyn`, a compiled
/// expression, a static method of a type emitted into a dynamic assembly and one emitted into a
/// collectible dynamic assembly. Each calls its own target once per call. Then one call of the
/// DynamicMethod `StressDynSpin` (from `SpinVia`), which calls `Spin` for `spinMs` (named in samples).
/// Then 50 throwaway DynamicMethods `StressDynTemp` (one call each), collected before the end.
public static class Dyn
{
    static long lcg, expr, emit, coll;

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static int TargetLcg(int x) { lcg++; return x; }
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static int TargetExpr(int x) { expr++; return x; }
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static int TargetEmit(int x) { emit++; return x; }
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static int TargetCollectible(int x) { coll++; return x; }
    static long temp;
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static int TargetTemp(int x) { temp++; return x; }

    /// `k` DynamicMethods `StressDynTemp`, each compiled, called once and dropped; collections then
    /// free them (the runtime reports each one's unload: `DynamicMethodUnloaded`).
    [MethodImpl(MethodImplOptions.NoInlining)]
    static long Throwaway(int k)
    {
        long s = 0;
        for (int i = 0; i < k; i++) s += Lcg("StressDynTemp", M(nameof(TargetTemp)))(i);
        return s;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static int Spin(int ms)
    {
        var sw = Stopwatch.StartNew();
        int acc = 0;
        while (sw.ElapsedMilliseconds < ms) { for (int i = 0; i < 10_000; i++) acc += i ^ (acc >> 3); }
        return acc;
    }

    /// Calls the spinning DynamicMethod from a method without loops (so no on-stack replacement
    /// of its caller is involved in the sampled stacks).
    [MethodImpl(MethodImplOptions.NoInlining)]
    static int SpinVia(Func<int, int> spin, int ms) => spin(ms);

    static MethodInfo M(string name) => typeof(Dyn).GetMethod(name)!;

    /// `int name(int x) => target(x) + 1`, as a DynamicMethod.
    static Func<int, int> Lcg(string name, MethodInfo target)
    {
        var dm = new DynamicMethod(name, typeof(int), new[] { typeof(int) }, typeof(Dyn).Module);
        var il = dm.GetILGenerator();
        il.Emit(OpCodes.Ldarg_0);
        il.Emit(OpCodes.Call, target);
        il.Emit(OpCodes.Ldc_I4_1);
        il.Emit(OpCodes.Add);
        il.Emit(OpCodes.Ret);
        return dm.CreateDelegate<Func<int, int>>();
    }

    /// `static int Compute(int x) => target(x) + 1` on type `typeName`, in a new dynamic assembly.
    static Func<int, int> Emitted(string asmName, string typeName, MethodInfo target, AssemblyBuilderAccess access)
    {
        var ab = AssemblyBuilder.DefineDynamicAssembly(new AssemblyName(asmName), access);
        var mb = ab.DefineDynamicModule(asmName);
        var tb = mb.DefineType(typeName, TypeAttributes.Public | TypeAttributes.Sealed | TypeAttributes.Abstract);
        var m = tb.DefineMethod("Compute", MethodAttributes.Public | MethodAttributes.Static, typeof(int), new[] { typeof(int) });
        var il = m.GetILGenerator();
        il.Emit(OpCodes.Ldarg_0);
        il.Emit(OpCodes.Call, target);
        il.Emit(OpCodes.Ldc_I4_1);
        il.Emit(OpCodes.Add);
        il.Emit(OpCodes.Ret);
        var t = tb.CreateType();
        return t.GetMethod("Compute")!.CreateDelegate<Func<int, int>>();
    }

    public static int Run(int n, int spinMs)
    {
        var lcgF = Lcg("StressDyn", M(nameof(TargetLcg)));
        var p = Expression.Parameter(typeof(int), "x");
        var exprF = Expression.Lambda<Func<int, int>>(
            Expression.Add(Expression.Call(M(nameof(TargetExpr)), p), Expression.Constant(1)), p).Compile();
        var emitF = Emitted("StressEmitted", "Emitted.Calculator", M(nameof(TargetEmit)), AssemblyBuilderAccess.Run);
        var collF = Emitted("StressCollectible", "Collectible.Calculator", M(nameof(TargetCollectible)),
            AssemblyBuilderAccess.RunAndCollect);
        long sum = 0;
        for (int i = 0; i < n; i++)
        {
            sum += lcgF(i) + exprF(i) + emitF(i) + collF(i);
        }
        SpinVia(Lcg("StressDynSpin", M(nameof(Spin))), spinMs);
        sum += Throwaway(50);
        for (int g = 0; g < 5; g++) { GC.Collect(); GC.WaitForPendingFinalizers(); }
        Console.WriteLine($"stress dynamic ok n={n} lcg={lcg} expr={expr} emit={emit} collectible={coll} temp={temp} sum={sum}");
        return lcg == n && expr == n && emit == n && coll == n ? 0 : 1;
    }
}

/// Recursion `depth` deep (Recurse is called depth + 1 times), spinning `ms` at the bottom and then
/// sleeping `ms` (CPU samples walk the spin; the runtime's walks take the blocked thread's stacks),
/// on a thread with a 256 MiB stack.
public static class Deep
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    static long Recurse(int d, int ms) => d == 0 ? Bottom(ms) : Recurse(d - 1, ms) + 1;

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long Bottom(int ms)
    {
        var sw = Stopwatch.StartNew();
        long acc = 0;
        while (sw.ElapsedMilliseconds < ms) { for (int i = 0; i < 10_000; i++) acc += i ^ (acc >> 3); }
        Thread.Sleep(ms);
        return acc & 0xff;
    }

    public static int Run(int depth, int ms)
    {
        long r = 0;
        var t = new Thread(() => r = Recurse(depth, ms), 256 * 1024 * 1024) { Name = "deep" };
        t.Start();
        t.Join();
        Console.WriteLine($"stress recurse ok depth={depth} result_at_least={r >= depth}");
        return r >= depth ? 0 : 1;
    }
}

/// `n` StressExceptions thrown by Throw and caught in Run.
public static class Storm
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Throw(int i) => throw new StressException(i);

    public static int Run(int n)
    {
        int caught = 0;
        for (int i = 0; i < n; i++)
        {
            try { Throw(i); }
            catch (StressException) { caught++; }
        }
        Console.WriteLine($"stress exceptions ok n={n} caught={caught}");
        return caught == n ? 0 : 1;
    }
}

/// Unbounded recursion: a stack overflow (the runtime kills the process).
public static class Overflow
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static int Down(int d) => Down(d + 1) + 1;
}

/// Hard names, each method called `calls` times and spinning `ms` per call: a generic method of a
/// nested generic type, a type and method with non-ASCII names, a type with a 1,000-character name.
public static class Names
{
    public static int Run(int calls, int ms)
    {
        long acc = 0;
        for (int i = 0; i < calls; i++)
        {
            acc += Outer<int>.Inner<long>.Método<double>(ms);
            acc += Straße.Größe(ms);
            acc += StressNames.LongName.Spin(ms);
        }
        Console.WriteLine($"stress names ok calls={calls} long_name_chars={StressNames.LongName.Full.Length - 12} acc={acc & 1}");
        return 0;
    }
}

public static class Outer<T>
{
    public static class Inner<U>
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static long Método<V>(int ms) => Straße.SpinFor(ms);
    }
}

public static class Straße
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static long Größe(int ms) => SpinFor(ms);

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static long SpinFor(int ms)
    {
        var sw = Stopwatch.StartNew();
        long acc = 0;
        while (sw.ElapsedMilliseconds < ms) { for (int i = 0; i < 10_000; i++) acc += i ^ (acc >> 3); }
        return acc;
    }
}

/// A long mixed run for `seconds`: calls, allocations, exceptions and short-lived threads, with a
/// line every 10 s (RSS included).
public static class LongRun
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    static long Step(int i)
    {
        long acc = Work.Chunk(i);
        var list = new List<string>();
        for (int k = 0; k < 100; k++) list.Add(k.ToString());
        acc += list.Count;
        if (i % 50 == 0) { try { throw new StressException(i); } catch (StressException) { acc++; } }
        if (i % 200 == 0) { var t = new Thread(() => Work.Chunk(1)); t.Start(); t.Join(); }
        return acc;
    }

    public static int Run(int seconds)
    {
        Program.Ready();
        var sw = Stopwatch.StartNew();
        long acc = 0;
        int i = 0, next = 10;
        while (sw.Elapsed.TotalSeconds < seconds)
        {
            acc += Step(i++);
            if (sw.Elapsed.TotalSeconds >= next)
            {
                Console.WriteLine($"t={next}s steps={i} rss_kb={Program.RssKb()}");
                Console.Out.Flush();
                next += 10;
            }
        }
        Console.WriteLine($"stress long ok seconds={seconds} steps={i} acc={acc & 1}");
        return 0;
    }
}
