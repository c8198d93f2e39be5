// Profiling target for `clrprof diff`: two functions that do the same fixed amount of arithmetic
// per call. `Diff <steady> <changing>` calls Steady.Unit <steady> times and Changing.Unit
// <changing> times: two runs that differ only in <changing> change one function's work by a
// known factor and leave the other's as it was. Built with -p:Regressed=true (the REGRESSED
// symbol), Changing.Run calls Changing.Unit twice per step: a second build that differs in one
// function's work, as a regressed commit would.
using System.Runtime.CompilerServices;

namespace Diff;

public static class Program
{
    public static int Main(string[] args)
    {
        int steady = int.Parse(args[0]), changing = int.Parse(args[1]);
        long r = Steady.Run(steady) ^ Changing.Run(changing);
        Console.WriteLine($"diff: steady={steady} changing={changing} result={r & 0xff}");
        return 0;
    }
}

public static class Steady
{
    public static long Run(int n)
    {
        long s = 0;
        for (int i = 0; i < n; i++) s += Unit(i);
        return s;
    }

    // About a millisecond of CPU: a fixed number of multiply/xor steps, no allocation, no clock.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static long Unit(int seed)
    {
        long x = seed;
        for (int i = 0; i < 1_000_000; i++)
        {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >> 17;
        }
        return x;
    }
}

public static class Changing
{
    public static long Run(int n)
    {
        long s = 0;
        for (int i = 0; i < n; i++)
        {
            s += Unit(i);
#if REGRESSED
            s ^= Unit(i + 1);
#endif
        }
        return s;
    }

    // The same work as Steady.Unit.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static long Unit(int seed)
    {
        long x = seed;
        for (int i = 0; i < 1_000_000; i++)
        {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >> 17;
        }
        return x;
    }
}
