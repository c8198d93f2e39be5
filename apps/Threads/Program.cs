// Profiling target: several named threads doing known work.
// Prints a deterministic result so tests can check stdout passes through unchanged.
namespace Threads;

public static class Program
{
    public static int Main(string[] args)
    {
        int workers = args.Length > 0 ? int.Parse(args[0]) : 4;
        var results = new long[workers];
        var threads = new Thread[workers];
        for (int i = 0; i < workers; i++)
        {
            int index = i;
            threads[i] = new Thread(() => results[index] = Worker.Run(index, 200_000)) { Name = $"worker-{i}" };
            threads[i].Start();
        }
        foreach (var t in threads) t.Join();
        var renamed = new Thread(() => { Thread.CurrentThread.Name = "renamed-later"; Worker.Run(99, 1000); });
        renamed.Start();
        renamed.Join();
        Console.WriteLine($"threads={workers} total={results.Sum()}");
        return 7;
    }
}

public static class Worker
{
    public static long Run(int seed, int n)
    {
        long acc = seed;
        for (int i = 0; i < n; i++) acc = Step(acc, i);
        return acc % 1000;
    }

    private static long Step(long acc, int i) => (acc * 31 + i) % 1_000_003;
}
