// Profiling target for the heap snapshot tests: a known leak, in phases.
//
//   HeapLeak [PHASES [SESSIONS_PER_PHASE [PAYLOAD_BYTES]]]   (defaults 2 1000 1024)
//   HeapLeak scale OBJECTS                                     (a heap of OBJECTS live objects)
//
// Leak mode: each phase adds SESSIONS_PER_PHASE `HeapLeak.Session` objects to the static list
// `HeapLeak.Cache.Sessions`; each session holds a `byte[PAYLOAD_BYTES]` and a `HeapLeak.Tag`. Phase 2
// and later also remove the oldest tenth of the sessions, so the difference between two phases is
// not simply the number added. Every phase also allocates short-lived `HeapLeak.Garbage` objects
// (each with its own byte[]) that nothing keeps: a snapshot must not show them. After each phase
// the app prints `phase K sessions=N tags=N payload_bytes=B garbage_made=G` and waits for one line
// on stdin (any text; end of input also continues), so a test can take a snapshot between phases.
// At the end it prints `done sessions=N` and exits with code 0.
//
// Scale mode: builds OBJECTS live `HeapLeak.Cell` objects (linked in chunks of 1,000 under one
// array of chunk heads held by `HeapLeak.Cache.Cells`, plus every tenth cell holding a small
// string), prints `ready objects=N cells=C strings=S heap_bytes=B` (GC.GetTotalMemory after a full
// collection), then a line per stdin line `pause max_ms=X` (the longest gap its 1 ms ticker saw
// since the previous line: the pause a snapshot caused, seen from the app), and at end of input
// `done` with exit code 0.
using System.Diagnostics;
using System.Runtime.CompilerServices;

namespace HeapLeak;

public sealed class Tag
{
    public int Id;
    public Tag(int id) { Id = id; }
}

public sealed class Session
{
    public readonly int Id;
    public readonly byte[] Payload;
    public readonly Tag Tag;
    public Session(int id, int payloadBytes)
    {
        Id = id;
        Payload = new byte[payloadBytes];
        Tag = new Tag(id);
    }
}

public sealed class Garbage
{
    public byte[] Data = new byte[64];
    public Garbage? Next;
}

public sealed class Cell
{
    public Cell? Next;
    public object? Value;
    public long N;
}

public static class Cache
{
    public static readonly List<Session> Sessions = new();
    public static Cell?[] Cells = Array.Empty<Cell?>();
}

public static class Program
{
    static long garbageMade;

    public static int Main(string[] args)
    {
        if (args.Length > 0 && args[0] == "scale")
            return Scale(args.Length > 1 ? long.Parse(args[1]) : 5_000_000);
        int phases = args.Length > 0 ? int.Parse(args[0]) : 2;
        int perPhase = args.Length > 1 ? int.Parse(args[1]) : 1000;
        int payload = args.Length > 2 ? int.Parse(args[2]) : 1024;
        int nextId = 0;
        for (int phase = 1; phase <= phases; phase++)
        {
            // Printed here, once the phase's frame is gone: when a test reads the line, no stack
            // slot of this thread holds a session any more.
            (nextId, long payloadBytes) = RunPhase(phase, perPhase, payload, nextId);
            Console.WriteLine(
                $"phase {phase} sessions={Cache.Sessions.Count} tags={Cache.Sessions.Count} payload_bytes={payloadBytes} garbage_made={garbageMade}");
            Console.Out.Flush();
            Console.In.ReadLine();
        }
        Console.WriteLine($"done sessions={Cache.Sessions.Count}");
        return 0;
    }

    // One phase, in a frame of its own: once it returns no stack slot holds a session, so every
    // session is held by the static list only.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static (int, long) RunPhase(int phase, int perPhase, int payload, int nextId)
    {
        if (phase > 1)
            Cache.Sessions.RemoveRange(0, Cache.Sessions.Count / 10);
        for (int i = 0; i < perPhase; i++)
            Cache.Sessions.Add(new Session(nextId++, payload));
        MakeGarbage(5000);
        long payloadBytes = 0;
        foreach (var s in Cache.Sessions) payloadBytes += s.Payload.Length;
        return (nextId, payloadBytes);
    }

    // Short-lived garbage: chains of Garbage objects dropped as soon as they are built.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static void MakeGarbage(int n)
    {
        Garbage? chain = null;
        for (int i = 0; i < n; i++)
        {
            chain = new Garbage { Next = (i % 100 == 0) ? null : chain };
            garbageMade++;
        }
        GC.KeepAlive(chain);
    }

    static int Scale(long objects)
    {
        const int chunk = 1000;
        // Each cell is one object; every tenth also holds a string (a second object).
        long cells = objects * 10 / 11;
        long strings = 0;
        var heads = new Cell?[(cells + chunk - 1) / chunk];
        for (long c = 0; c < cells; c++)
        {
            var cell = new Cell { N = c };
            if (c % 10 == 0)
            {
                cell.Value = "s" + (c % 1000).ToString();
                strings++;
            }
            long h = c / chunk;
            cell.Next = heads[h];
            heads[h] = cell;
        }
        Cache.Cells = heads;
        GC.Collect();
        GC.WaitForPendingFinalizers();
        GC.Collect();
        long heapBytes = GC.GetTotalMemory(false);
        Console.WriteLine($"ready objects={cells + strings + 1} cells={cells} strings={strings} heap_bytes={heapBytes}");
        Console.Out.Flush();

        // A ticker that sees how long the process stood still (a snapshot's pause).
        long maxGapTicks = 0;
        var sw = Stopwatch.StartNew();
        var ticker = new Thread(() =>
        {
            long last = sw.ElapsedTicks;
            while (true)
            {
                Thread.Sleep(1);
                long now = sw.ElapsedTicks;
                long gap = now - last;
                last = now;
                if (gap > Interlocked.Read(ref maxGapTicks)) Interlocked.Exchange(ref maxGapTicks, gap);
            }
        }) { IsBackground = true };
        ticker.Start();
        string? line;
        while ((line = Console.In.ReadLine()) != null)
        {
            if (line.Trim() == "gc")
            {
                // The floor of a snapshot's pause: a plain full blocking collection of the same heap.
                long t0 = sw.ElapsedTicks;
                GC.Collect(2, GCCollectionMode.Forced, blocking: true, compacting: false);
                Console.WriteLine($"gc ms={(sw.ElapsedTicks - t0) * 1000.0 / Stopwatch.Frequency:F1}");
                Console.Out.Flush();
                Interlocked.Exchange(ref maxGapTicks, 0);
                continue;
            }
            long gap = Interlocked.Exchange(ref maxGapTicks, 0);
            Console.WriteLine($"pause max_ms={gap * 1000.0 / Stopwatch.Frequency:F1}");
            Console.Out.Flush();
        }
        GC.KeepAlive(Cache.Cells);
        Console.WriteLine("done");
        return 0;
    }
}
