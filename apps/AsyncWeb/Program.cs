// An ASP.NET Core minimal API of known async shape, for the requests view and its tests.
//   AsyncWeb [--requests N] [--no-sync]   serve on a free loopback port, drive it, print, exit
//   AsyncWeb serve URL                     serve on URL until SIGTERM/Ctrl-C (for wrk)
// Routes:
//   GET /delay/{ms:int}  awaits Task.Delay(ms), then computes (Handlers.Compute)
//   GET /items/{id:int}  computes a little, no await
//   GET /sync/{ms:int}   sync-over-async: blocks its pool thread on Task.Delay(ms).Wait(), then computes;
//                        hit 16 at a time it starves the thread pool, which injects threads
//   GET /cpu/{ms:int}    spins ms of its thread's CPU time, awaits Task.Yield (the rest runs on another
//                        pool thread), spins ms again; adds the thread CPU time it measured around both
//                        spins (CLOCK_THREAD_CPUTIME_ID) to cpu_handler_ns
// The driver sends, 4 at a time, N requests to /delay/20 and 2N to /items/{i}, then (unless --no-sync)
// N/2 requests to /sync/100 16 at a time, and N/3 requests to /cpu/8 2 at a time, measuring each with a
// Stopwatch around the HttpClient call.
// It prints per route "client ROUTE count=… p50_us=… p95_us=… p99_us=…" (nearest-rank percentiles),
// "sync_waits=…" (the Task.Wait calls that blocked: the task was not complete when waited on) and
// "cpu_handler_ns=…" (the /cpu handlers' measured CPU time) and "requests=…" (requests the server ran).
using System.Diagnostics;

var serve = args.Length >= 2 && args[0] == "serve";
int n = 120;
bool sync = true;
for (int i = 0; i < args.Length; i++)
{
    if (args[i] == "--requests" && i + 1 < args.Length) n = int.Parse(args[++i]);
    if (args[i] == "--no-sync") sync = false;
}

var builder = WebApplication.CreateBuilder();
// A default host logs to the console, debug and EventSource providers; keep only EventSource (the
// profiler reads ASP.NET Core's endpoint and status lines from it), so stdout stays the app's.
builder.Logging.ClearProviders();
builder.Logging.AddEventSourceLogger();
builder.WebHost.UseUrls(serve ? args[1] : "http://127.0.0.1:0");
var app = builder.Build();
app.Use(async (ctx, next) => { Interlocked.Increment(ref Handlers.Requests); await next(ctx); });
app.MapGet("/delay/{ms:int}", Handlers.Delay);
app.MapGet("/items/{id:int}", Handlers.Item);
app.MapGet("/sync/{ms:int}", Handlers.Sync);
app.MapGet("/cpu/{ms:int}", Handlers.Cpu);

if (serve)
{
    app.Lifetime.ApplicationStarted.Register(() =>
    {
        foreach (var a in app.Urls) Console.WriteLine($"listening on {a}");
        Console.Out.Flush();
    });
    app.Run();
    Console.WriteLine($"requests={Interlocked.Read(ref Handlers.Requests)}");
    return;
}

await app.StartAsync();
var url = app.Urls.First();
using var client = new HttpClient(new SocketsHttpHandler { MaxConnectionsPerServer = 64 }) { BaseAddress = new Uri(url) };
var results = new List<(string Route, List<long> Us)>();
results.Add(("GET /delay/{ms:int}", await Drive(client, n, 4, _ => "/delay/20")));
results.Add(("GET /items/{id:int}", await Drive(client, 2 * n, 4, i => $"/items/{i}")));
if (sync) results.Add(("GET /sync/{ms:int}", await Drive(client, n / 2, 16, _ => "/sync/100")));
results.Add(("GET /cpu/{ms:int}", await Drive(client, n / 3, 2, _ => "/cpu/8")));
await app.StopAsync();
foreach (var (route, us) in results)
{
    us.Sort();
    Console.WriteLine($"client {route} count={us.Count} p50_us={Rank(us, 50)} p95_us={Rank(us, 95)} p99_us={Rank(us, 99)}");
}
Console.WriteLine($"sync_waits={Interlocked.Read(ref Handlers.SyncWaits)}");
Console.WriteLine($"cpu_handler_ns={Interlocked.Read(ref Handlers.CpuNs)}");
Console.WriteLine($"requests={Interlocked.Read(ref Handlers.Requests)}");

// Sends `count` requests, `parallel` at a time; each one's client-side latency in µs.
static async Task<List<long>> Drive(HttpClient client, int count, int parallel, Func<int, string> path)
{
    var all = new List<long>();
    int next = -1;
    async Task Worker()
    {
        int i;
        while ((i = Interlocked.Increment(ref next)) < count)
        {
            var sw = Stopwatch.StartNew();
            using var r = await client.GetAsync(path(i));
            await r.Content.ReadAsStringAsync();
            r.EnsureSuccessStatusCode();
            sw.Stop();
            lock (all) all.Add(sw.ElapsedTicks * 1_000_000 / Stopwatch.Frequency);
        }
    }
    await Task.WhenAll(Enumerable.Range(0, parallel).Select(_ => Task.Run(Worker)));
    return all;
}

// Nearest-rank percentile of sorted values.
static long Rank(List<long> sorted, int p) =>
    sorted.Count == 0 ? 0 : sorted[Math.Clamp((int)Math.Ceiling(p / 100.0 * sorted.Count) - 1, 0, sorted.Count - 1)];

static class Handlers
{
    public static long Requests;
    public static long SyncWaits;
    public static long CpuNs;

    public static async Task<string> Cpu(int ms)
    {
        long ns = Spin(ms);
        await Task.Yield();
        ns += Spin(ms);
        Interlocked.Add(ref CpuNs, ns);
        return ns.ToString();
    }

    // Computes until the calling thread has used `ms` of CPU time; returns the CPU time it used.
    static long Spin(int ms)
    {
        long start = ThreadCpuNs();
        long now = start;
        ulong h = 0;
        while (now - start < ms * 1_000_000L)
        {
            h ^= Compute(1_000);
            now = ThreadCpuNs();
        }
        GC.KeepAlive(h);
        return now - start;
    }

    [System.Runtime.InteropServices.StructLayout(System.Runtime.InteropServices.LayoutKind.Sequential)]
    struct Timespec { public long Sec; public long Nsec; }

    [System.Runtime.InteropServices.DllImport("libc", EntryPoint = "clock_gettime")]
    static extern int ClockGettime(int clock, out Timespec ts);

    // CLOCK_THREAD_CPUTIME_ID (3): the calling thread's CPU time.
    static long ThreadCpuNs() => ClockGettime(3, out var ts) == 0 ? ts.Sec * 1_000_000_000 + ts.Nsec : 0;

    public static async Task<string> Delay(int ms)
    {
        await Task.Delay(ms);
        return Compute(20_000).ToString();
    }

    public static string Item(int id) => Compute(2_000 + id % 7).ToString();

    public static string Sync(int ms)
    {
        var t = Task.Delay(ms);
        if (!t.IsCompleted) Interlocked.Increment(ref SyncWaits);
        t.Wait();
        return Compute(2_000).ToString();
    }

    // Known CPU work: a hash over `n` rounds.
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.NoInlining)]
    public static ulong Compute(int n)
    {
        ulong h = 1469598103934665603;
        for (int i = 0; i < n; i++) h = (h ^ (ulong)i) * 1099511628211;
        return h;
    }
}
