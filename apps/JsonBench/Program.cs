// Realistic benchmark workload: System.Text.Json serialization and deserialization of an order
// book, LINQ over the result. Prints a checksum and the work's own elapsed time.
using System.Diagnostics;
using System.Text.Json;

namespace JsonBench;

public record Line(string Sku, int Quantity, decimal Price, string[] Tags);
public record Order(int Id, string Customer, DateTime Placed, List<Line> Lines, Dictionary<string, string> Meta);

public static class Program
{
    public static int Main(string[] args)
    {
        int rounds = args.Length > 0 ? int.Parse(args[0]) : 30;
        var orders = Make(1500);
        var sw = Stopwatch.StartNew();
        long check = 0;
        for (int r = 0; r < rounds; r++)
        {
            string json = JsonSerializer.Serialize(orders);
            var back = JsonSerializer.Deserialize<List<Order>>(json)!;
            check += back.Sum(o => o.Lines.Sum(l => l.Quantity)) + json.Length % 1000;
        }
        Console.WriteLine($"json: check={check} work_ms={sw.Elapsed.TotalMilliseconds:F1}");
        return 0;
    }

    static List<Order> Make(int n)
    {
        var rng = new Random(7);
        var list = new List<Order>(n);
        for (int i = 0; i < n; i++)
        {
            var lines = new List<Line>();
            for (int k = 0; k < 1 + rng.Next(6); k++)
                lines.Add(new Line($"SKU-{rng.Next(10000)}", rng.Next(1, 9), rng.Next(100, 9999) / 100m, new[] { "a", "b" }));
            list.Add(new Order(i, $"customer-{rng.Next(500)}", new DateTime(2024, 1, 1).AddMinutes(i), lines,
                new Dictionary<string, string> { ["channel"] = i % 2 == 0 ? "web" : "store" }));
        }
        return list;
    }
}
