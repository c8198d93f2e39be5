// A small ASP.NET Core server with endpoints that exercise what a profiler sees in a real service:
// CPU work, JSON serialization, allocations, lock contention, exceptions and a blocking wait.
//   Web [URL]    listen on URL (default http://127.0.0.1:0: a free port on loopback)
// Prints "listening on <url>" once Kestrel is accepting requests, then "requests=<n>" at shutdown
// (SIGTERM/Ctrl-C), so tests can check the server ran unharmed.
using System.Text.Json;

var url = args.Length > 0 ? args[0] : "http://127.0.0.1:0";
var builder = WebApplication.CreateSlimBuilder();
builder.Logging.ClearProviders();
builder.WebHost.UseUrls(url);
var app = builder.Build();

long requests = 0;
var gate = new object();
var shared = new Dictionary<int, int>();

app.Use(async (ctx, next) => { Interlocked.Increment(ref requests); await next(ctx); });
app.MapGet("/", () => "hello");
app.MapGet("/cpu", (int? n) => Results.Text(Work.Primes(n ?? 20_000).ToString()));
app.MapGet("/json", (int? n) =>
{
    var items = Enumerable.Range(0, n ?? 50).Select(i => new Item(i, "item " + i, i * 1.5)).ToList();
    return Results.Text(JsonSerializer.Serialize(items, WebJson.Default.ListItem), "application/json");
});
app.MapGet("/alloc", (int? n) =>
{
    var list = new List<byte[]>();
    for (int i = 0; i < (n ?? 1000); i++) list.Add(new byte[64]);
    return Results.Text(list.Count.ToString());
});
app.MapGet("/lock", () =>
{
    lock (gate)
    {
        for (int i = 0; i < 200; i++) shared[i % 17] = shared.GetValueOrDefault(i % 17) + i;
        Thread.SpinWait(2000);
    }
    return Results.Text("ok");
});
app.MapGet("/throw", () =>
{
    try { Work.Fail(); } catch (InvalidOperationException) { }
    return Results.Text("caught");
});
app.MapGet("/sleep", async (int? ms) => { await Task.Delay(ms ?? 10); return Results.Text("slept"); });

app.Lifetime.ApplicationStarted.Register(() =>
{
    foreach (var a in app.Urls) Console.WriteLine($"listening on {a}");
    Console.Out.Flush();
});
app.Run();
Console.WriteLine($"requests={Interlocked.Read(ref requests)}");

record Item(int Id, string Name, double Price);

[System.Text.Json.Serialization.JsonSerializable(typeof(List<Item>))]
partial class WebJson : System.Text.Json.Serialization.JsonSerializerContext { }

static class Work
{
    public static int Primes(int limit)
    {
        int count = 0;
        for (int n = 2; n < limit; n++)
        {
            bool prime = true;
            for (int d = 2; d * d <= n; d++) if (n % d == 0) { prime = false; break; }
            if (prime) count++;
        }
        return count;
    }

    public static void Fail() => throw new InvalidOperationException("request failed");
}
