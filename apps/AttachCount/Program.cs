// A target for `clrprof attach --count`: it warms a hot loop up until the JIT has inlined a tiny
// method into it, prints "ready", then for every line N read on stdin makes exactly N calls of
// Counted.Tick (through that loop) and prints "done N TOTAL", TOTAL being the calls made so far.
// End of input ends it.
using System;
using System.Runtime.CompilerServices;
using System.Threading;

namespace AttachCount
{
    static class Counted
    {
        static long total;

        // Tiny: the JIT inlines it into Loop.Run's optimized code.
        public static void Tick() => total++;

        public static long Total => total;
    }

    static class Loop
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void Run(int n)
        {
            for (int i = 0; i < n; i++)
            {
                Counted.Tick();
            }
        }
    }

    static class Program
    {
        static void Main()
        {
            // Warm-up: Run tiers up (30 calls, then the background tier-1 compile) with Tick inlined.
            for (int i = 0; i < 200; i++)
            {
                Loop.Run(1000);
                if (i % 50 == 0) Thread.Sleep(100);
            }
            Thread.Sleep(500);
            long warm = Counted.Total;
            Console.WriteLine($"ready {warm}");
            string? line;
            while ((line = Console.ReadLine()) != null)
            {
                if (!int.TryParse(line.Trim(), out int n)) continue;
                long before = Counted.Total;
                Loop.Run(n);
                Console.WriteLine($"done {n} {Counted.Total - before}");
            }
        }
    }
}
