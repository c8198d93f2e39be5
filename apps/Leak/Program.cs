// Profiling target for the GC tests: a leak. It keeps a growing live set (a list of small arrays
// that is never trimmed) while it allocates short-lived garbage as fast as it can, so that the
// runtime runs background gen2 collections and ephemeral (foreground) collections while one is in
// progress. It prints the runtime's own collection counts at the end.
using System.Runtime.CompilerServices;

namespace LeakApp;

public static class Program
{
    sealed class Node
    {
        public Node? Next;
        public object? Payload;
        public long Id;
    }

    // The leak: a growing object graph (many small objects, so a background GC's marking takes
    // long enough for ephemeral collections to run inside it).
    static readonly List<Node> leaked = new();
    static object? sink;

    public static int Main(string[] args)
    {
        // Rounds of the leak: each keeps 64 nodes (~3 KB) and throws away ~100 KB of garbage.
        int rounds = args.Length > 0 ? int.Parse(args[0]) : 50_000;
        Leak(rounds);
        Console.WriteLine(
            $"gc0 {GC.CollectionCount(0)} gc1 {GC.CollectionCount(1)} gc2 {GC.CollectionCount(2)} leaked {leaked.Count}");
        return 0;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Leak(int rounds)
    {
        Node? chain = null;
        for (int r = 0; r < rounds; r++)
        {
            for (int i = 0; i < 64; i++)
            {
                chain = new Node { Next = chain, Payload = new object(), Id = r };
                if (i == 0) leaked.Add(chain);
            }
            for (int i = 0; i < 800; i++) sink = new byte[96];
        }
    }
}
