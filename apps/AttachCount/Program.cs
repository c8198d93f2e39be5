// A target for `clrprof attach --count`: it warms a hot loop up until the JIT has inlined a tiny
// method into it, prints "ready", then for every line N read on stdin makes exactly N calls of
// Counted.Tick (through that loop) and prints "done N TOTAL", TOTAL being the calls made by that
// line. For `--count-top`: "burn MS" calls Hot.Step for MS milliseconds (the CPU time goes to
// Step itself) and prints "burnt CALLS"; "hot N" makes exactly N calls of Hot.Step and prints
// "hot N CALLS". End of input ends it.
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

    static class Hot
    {
        static long total;
        static ulong state = 88172645463325252;

        // Not inlined, and some work per call: the innermost frame of the CPU samples of a burn.
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void Step()
        {
            ulong x = state;
            for (int i = 0; i < 64; i++)
            {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
            }
            state = x;
            total++;
        }

        public static long Total => total;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void Run(int n)
        {
            for (int i = 0; i < n; i++)
            {
                Step();
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void Burn(int ms)
        {
            var clock = System.Diagnostics.Stopwatch.StartNew();
            while (clock.ElapsedMilliseconds < ms)
            {
                Run(1000);
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
                string[] words = line.Trim().Split(' ', StringSplitOptions.RemoveEmptyEntries);
                if (words.Length == 2 && int.TryParse(words[1], out int arg))
                {
                    long was = Hot.Total;
                    if (words[0] == "burn")
                    {
                        Hot.Burn(arg);
                        Console.WriteLine($"burnt {Hot.Total - was}");
                    }
                    else if (words[0] == "hot")
                    {
                        Hot.Run(arg);
                        Console.WriteLine($"hot {arg} {Hot.Total - was}");
                    }
                    continue;
                }
                if (!int.TryParse(line.Trim(), out int n)) continue;
                long before = Counted.Total;
                Loop.Run(n);
                Console.WriteLine($"done {n} {Counted.Total - before}");
            }
        }
    }
}
