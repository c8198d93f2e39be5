// The corpus's async web program: an ASP.NET Core minimal API over EF Core + SQLite (NuGet's
// Microsoft.EntityFrameworkCore.Sqlite), seeded at start. It then sends itself a fixed number of
// requests on loopback (HttpClient, a few at a time), checks every answer, prints its own counters
// and exits:
//   WebEf [REQUESTS]   (default 2000, spread round-robin over /products/{id}, /orders/recent and
//                       /customers/{id}/total)
// Output, one `key=value` per line: requests, per-endpoint handler counts (product, recent, total),
// failures, gc0/gc1/gc2 (GC.CollectionCount), seed_ms and load_ms (wall time of the seeding and of
// the requests), and cpu_user_ms/cpu_sys_ms of the whole process (every thread's, as
// getrusage(RUSAGE_SELF) counts them, read from /proc/self/stat), so a profiler's figures can be
// compared with the app's own. Exit code 0 when every answer was right.
using System.Net.Http.Json;
using Microsoft.EntityFrameworkCore;

int total = args.Length > 0 ? int.Parse(args[0]) : 2000;
var dbPath = Path.Combine(Path.GetTempPath(), $"webef-{Environment.ProcessId}.db");
var connection = $"Data Source={dbPath}";

var builder = WebApplication.CreateSlimBuilder();
builder.Logging.ClearProviders();
builder.WebHost.UseUrls("http://127.0.0.1:0");
builder.Services.AddDbContext<ShopDb>(o => o.UseSqlite(connection));
var app = builder.Build();

var clock = System.Diagnostics.Stopwatch.StartNew();
await using (var scope = app.Services.CreateAsyncScope())
{
    var db = scope.ServiceProvider.GetRequiredService<ShopDb>();
    await db.Database.EnsureDeletedAsync();
    await db.Database.EnsureCreatedAsync();
    await Seed.Run(db);
}

app.MapGet("/products/{id:int}", Handlers.Product);
app.MapGet("/orders/recent", Handlers.RecentOrders);
app.MapGet("/customers/{id:int}/total", Handlers.CustomerTotal);

var seedMs = clock.ElapsedMilliseconds;
await app.StartAsync();
clock.Restart();
var url = app.Urls.First();

int failures = 0;
using (var http = new HttpClient { BaseAddress = new Uri(url) })
{
    const int parallel = 4;
    int next = -1;
    async Task Client()
    {
        int i;
        while ((i = Interlocked.Increment(ref next)) < total)
        {
            bool ok = (i % 3) switch
            {
                0 => (await http.GetFromJsonAsync<Product>($"/products/{1 + i % Seed.Products}"))?.Id == 1 + i % Seed.Products,
                1 => (await http.GetFromJsonAsync<List<OrderRow>>("/orders/recent"))?.Count == 20,
                _ => (await http.GetFromJsonAsync<decimal>($"/customers/{1 + i % Seed.Customers}/total")) > 0,
            };
            if (!ok) Interlocked.Increment(ref failures);
        }
    }
    await Task.WhenAll(Enumerable.Range(0, parallel).Select(_ => Task.Run(Client)));
}
var loadMs = clock.ElapsedMilliseconds;
await app.StopAsync();
SqliteCleanup(dbPath);

var (user, sys) = Cpu.Times();
Console.WriteLine($"requests={total}");
Console.WriteLine($"product={Handlers.ProductCalls}");
Console.WriteLine($"recent={Handlers.RecentCalls}");
Console.WriteLine($"total={Handlers.TotalCalls}");
Console.WriteLine($"failures={failures}");
Console.WriteLine($"gc0={GC.CollectionCount(0)}");
Console.WriteLine($"gc1={GC.CollectionCount(1)}");
Console.WriteLine($"gc2={GC.CollectionCount(2)}");
Console.WriteLine($"seed_ms={seedMs}");
Console.WriteLine($"load_ms={loadMs}");
Console.WriteLine($"cpu_user_ms={user}");
Console.WriteLine($"cpu_sys_ms={sys}");
return failures == 0 ? 0 : 1;

static void SqliteCleanup(string path)
{
    Microsoft.Data.Sqlite.SqliteConnection.ClearAllPools();
    foreach (var f in new[] { path, path + "-wal", path + "-shm", path + "-journal" })
        try { File.Delete(f); } catch (IOException) { }
}

public static class Handlers
{
    public static long ProductCalls, RecentCalls, TotalCalls;

    public static async Task<IResult> Product(int id, ShopDb db)
    {
        Interlocked.Increment(ref ProductCalls);
        var p = await db.Products.AsNoTracking().FirstOrDefaultAsync(p => p.Id == id);
        return p is null ? Results.NotFound() : Results.Ok(p);
    }

    public static async Task<IResult> RecentOrders(ShopDb db)
    {
        Interlocked.Increment(ref RecentCalls);
        var rows = await db.Orders.AsNoTracking()
            .OrderByDescending(o => o.PlacedAt).ThenBy(o => o.Id)
            .Take(20)
            .Select(o => new OrderRow(o.Id, o.Customer!.Name, o.Product!.Name, o.Quantity))
            .ToListAsync();
        return Results.Ok(rows);
    }

    public static async Task<IResult> CustomerTotal(int id, ShopDb db)
    {
        Interlocked.Increment(ref TotalCalls);
        var orders = await db.Orders.AsNoTracking().Where(o => o.CustomerId == id)
            .Select(o => new { o.Quantity, o.Product!.Price }).ToListAsync();
        return Results.Ok(orders.Sum(o => o.Quantity * o.Price));
    }
}

public static class Seed
{
    public const int Customers = 50, Products = 200, Orders = 2000;

    public static async Task Run(ShopDb db)
    {
        for (int i = 1; i <= Customers; i++) db.Customers.Add(new Customer { Id = i, Name = $"customer {i}" });
        for (int i = 1; i <= Products; i++)
            db.Products.Add(new Product { Id = i, Name = $"product {i}", Price = 1 + i % 37 + 0.25m });
        var start = new DateTime(2026, 1, 1, 0, 0, 0, DateTimeKind.Utc);
        for (int i = 1; i <= Orders; i++)
            db.Orders.Add(new Order
            {
                Id = i,
                CustomerId = 1 + i % Customers,
                ProductId = 1 + (i * 7) % Products,
                Quantity = 1 + i % 5,
                PlacedAt = start.AddMinutes(i * 13),
            });
        await db.SaveChangesAsync();
    }
}

public class ShopDb(DbContextOptions<ShopDb> options) : DbContext(options)
{
    public DbSet<Customer> Customers => Set<Customer>();
    public DbSet<Product> Products => Set<Product>();
    public DbSet<Order> Orders => Set<Order>();
}

public class Customer
{
    public int Id { get; set; }
    public string Name { get; set; } = "";
}

public class Product
{
    public int Id { get; set; }
    public string Name { get; set; } = "";
    public decimal Price { get; set; }
}

public class Order
{
    public int Id { get; set; }
    public int CustomerId { get; set; }
    public Customer? Customer { get; set; }
    public int ProductId { get; set; }
    public Product? Product { get; set; }
    public int Quantity { get; set; }
    public DateTime PlacedAt { get; set; }
}

public record OrderRow(int Id, string Customer, string Product, int Quantity);

static class Cpu
{
    // utime and stime of /proc/self/stat (fields 14 and 15, in clock ticks of 1/100 s on Linux):
    // the whole process's user and system CPU, all threads, as getrusage(RUSAGE_SELF) counts it.
    public static (long UserMs, long SysMs) Times()
    {
        var stat = File.ReadAllText("/proc/self/stat");
        var fields = stat[(stat.LastIndexOf(')') + 2)..].Split(' ');
        long tick = 1000 / 100;
        return (long.Parse(fields[11]) * tick, long.Parse(fields[12]) * tick);
    }
}
