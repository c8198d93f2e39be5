// The bundled demo: a small order-processing simulation with the shapes real programs have —
// parsing, hashing, sorting, LINQ, generics, a worker pool, a caught exception and some garbage.
using System.Runtime.CompilerServices;
using System.Text;

namespace Demo;

public record Order(int Id, string Customer, string Product, int Quantity, decimal Price);

public static class Program
{
    public static int Main(string[] args)
    {
        int orders = args.Length > 0 && int.TryParse(args[0], out var n) ? n : 400_000;
        string text = Generator.MakeCsv(orders, seed: 42);
        List<Order> parsed = Parser.Parse(text);

        var totals = new Dictionary<string, decimal>();
        var pool = new Thread[3];
        var partial = new Dictionary<string, decimal>[pool.Length];
        for (int t = 0; t < pool.Length; t++)
        {
            int index = t;
            pool[t] = new Thread(() => partial[index] = Pricing.Totals(parsed, index, pool.Length)) { Name = $"pricing-{t}" };
            pool[t].Start();
        }
        foreach (var th in pool) th.Join();
        foreach (var p in partial)
            foreach (var (k, v) in p)
                totals[k] = totals.GetValueOrDefault(k) + v;

        var top = Report.TopCustomers(totals, 3);
        int primes = Primes.Count(20_000_000);
        int rejected = Validation.CountRejected(parsed);
        string digest = Hashing.Digest(parsed);

        Console.WriteLine($"orders={parsed.Count} customers={totals.Count} primes={primes} rejected={rejected}");
        Console.WriteLine($"top: {string.Join(", ", top)}");
        Console.WriteLine($"digest: {digest}");
        return 0;
    }
}

public static class Generator
{
    static readonly string[] Customers = { "ada", "brian", "carla", "dmitri", "erin", "farid", "grace", "hiro" };
    static readonly string[] Products = { "widget", "gadget", "sprocket", "gizmo", "doohickey" };

    public static string MakeCsv(int count, int seed)
    {
        var rng = new Random(seed);
        var sb = new StringBuilder();
        for (int i = 0; i < count; i++)
        {
            int q = rng.Next(-2, 20);
            sb.Append(i).Append(',').Append(Customers[rng.Next(Customers.Length)]).Append(',')
              .Append(Products[rng.Next(Products.Length)]).Append(',').Append(q).Append(',')
              .Append((rng.Next(100, 10_000) / 100m).ToString(System.Globalization.CultureInfo.InvariantCulture)).Append('\n');
        }
        return sb.ToString();
    }
}

public static class Parser
{
    public static List<Order> Parse(string text)
    {
        var result = new List<Order>();
        foreach (var line in text.Split('\n', StringSplitOptions.RemoveEmptyEntries))
            result.Add(ParseLine(line));
        return result;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static Order ParseLine(string line)
    {
        var f = line.Split(',');
        return new Order(int.Parse(f[0]), f[1], f[2], int.Parse(f[3]),
            decimal.Parse(f[4], System.Globalization.CultureInfo.InvariantCulture));
    }
}

public static class Pricing
{
    public static Dictionary<string, decimal> Totals(List<Order> orders, int shard, int shards)
    {
        var d = new Dictionary<string, decimal>();
        for (int i = shard; i < orders.Count; i += shards)
        {
            var o = orders[i];
            if (o.Quantity <= 0) continue;
            d[o.Customer] = d.GetValueOrDefault(o.Customer) + LineTotal(o);
        }
        return d;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static decimal LineTotal(Order o)
    {
        decimal total = o.Price * o.Quantity;
        return o.Quantity >= 10 ? Math.Round(total * 0.95m, 2) : total;
    }
}

public static class Report
{
    public static List<string> TopCustomers(Dictionary<string, decimal> totals, int n) =>
        totals.OrderByDescending(kv => kv.Value).ThenBy(kv => kv.Key).Take(n).Select(kv => $"{kv.Key}={kv.Value}").ToList();
}

public static class Primes
{
    public static int Count(int limit)
    {
        var composite = new bool[limit + 1];
        int count = 0;
        for (int i = 2; i <= limit; i++)
        {
            if (composite[i]) continue;
            count++;
            for (long j = (long)i * i; j <= limit; j += i) composite[j] = true;
        }
        return count;
    }
}

public class InvalidOrderException(string message) : Exception(message);

public static class Validation
{
    public static int CountRejected(List<Order> orders)
    {
        int rejected = 0;
        foreach (var o in orders.Take(20_000))
        {
            try { Check(o); }
            catch (InvalidOrderException) { rejected++; }
        }
        return rejected;
    }

    static void Check(Order o)
    {
        if (o.Quantity < 0) throw new InvalidOrderException($"order {o.Id}: negative quantity");
    }
}

public static class Hashing
{
    public static string Digest(List<Order> orders)
    {
        ulong h = 1469598103934665603UL;
        foreach (var o in orders)
            foreach (char c in o.Customer + o.Product)
                h = (h ^ c) * 1099511628211UL;
        return h.ToString("x16");
    }
}
