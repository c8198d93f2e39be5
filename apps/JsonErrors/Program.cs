// Profiling target for the exception tests on a real library: Newtonsoft.Json parses malformed
// documents and throws JsonReaderException; every `rethrowEvery`-th failure is caught by a wrapper
// and rethrown with `throw;` to an outer handler. The app counts first-chance exceptions itself
// (AppDomain.FirstChanceException fires for every throw, rethrows included) and prints its counts.
using System.Runtime.CompilerServices;
using Newtonsoft.Json;
using Newtonsoft.Json.Linq;

namespace JsonErrorsApp;

public static class Program
{
    static long firstChance, parsed, failed, rethrown;

    static readonly string[] Bad =
    {
        "{\"name\": \"a\", \"items\": [1, 2, 3",
        "{\"name\": \"b\" \"items\": []}",
        "[1, 2, 3}",
        "{\"name\": tru}",
        "{\"a\": {\"b\": [\"c\", }}",
        "{'unterminated: 1}",
    };

    public static int Main(string[] args)
    {
        // Documents parsed (all malformed), and how often a failure is rethrown (every k-th).
        int n = args.Length > 0 ? int.Parse(args[0]) : 6000;
        int k = args.Length > 1 ? int.Parse(args[1]) : 3;
        AppDomain.CurrentDomain.FirstChanceException += (_, _) => Interlocked.Increment(ref firstChance);
        long before = Interlocked.Read(ref firstChance);
        for (int i = 0; i < n; i++)
        {
            try
            {
                if (i % k == 0) ParseAndRethrow(Bad[i % Bad.Length]);
                else Parse(Bad[i % Bad.Length]);
                parsed++;
            }
            catch (JsonReaderException)
            {
                failed++;
            }
        }
        long seen = Interlocked.Read(ref firstChance) - before;
        Console.WriteLine($"documents {n} parsed {parsed} failed {failed} rethrown {rethrown} first-chance {seen}");
        return 0;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static JToken Parse(string json) => JToken.Parse(json);

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void ParseAndRethrow(string json)
    {
        try
        {
            Parse(json);
        }
        catch (JsonReaderException)
        {
            rethrown++;
            throw;
        }
    }
}
