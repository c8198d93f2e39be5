// `CsvRead ROWS`: writes a CSV file of ROWS people, reads it back with CsvHelper into `Person`
// objects (whose constructor builds four strings), then builds one 10,000,000-character string
// with a StringBuilder. Prints what it knows exactly, as `name value` lines:
//   persons            Person objects built (one per row, in Program.Load)
//   ctor_strings       strings built by Person's constructor (four per person)
//   ctor_string_bytes  their bytes (each string's size from its length, checked at start-up)
//   load_bytes         bytes this thread allocated while reading and building (CsvHelper's too)
//   huge_bytes         bytes of the one huge string (StringBuilder.ToString in Program.BuildHuge)
//   total_bytes        GC.GetTotalAllocatedBytes(precise) at the end: the whole process
using System.Globalization;
using System.Runtime.CompilerServices;
using System.Text;
using CsvHelper;

namespace CsvRead;

public sealed class Person
{
    public readonly int Id;
    public readonly string FullName;
    public readonly string Key;
    public readonly string Display;
    public readonly string Shout;

    // Four new strings per person, each of a length the caller can tell.
    public Person(int id, string first, string last, string city)
    {
        Id = id;
        FullName = string.Concat(first, " ", last);
        Key = string.Concat(city, "/", last, "/", first);
        Display = string.Concat(last, ", ", first, " of ", city);
        Shout = FullName.ToUpperInvariant();
    }

    public static int[] Lengths(string first, string last, string city) =>
        new[]
        {
            first.Length + 1 + last.Length,
            city.Length + 1 + last.Length + 1 + first.Length,
            last.Length + 2 + first.Length + 4 + city.Length,
            first.Length + 1 + last.Length,
        };
}

public static class Program
{
    static readonly string[] First = { "Ada", "Grace", "Alan", "Barbara", "Edsger", "Frances", "Donald", "Margaret", "Ken", "Radia" };
    static readonly string[] Last = { "Lovelace", "Hopper", "Turing", "Liskov", "Dijkstra", "Allen", "Knuth", "Hamilton", "Thompson", "Perlman" };
    static readonly string[] City = { "London", "New York", "Manchester", "Boston", "Rotterdam", "Peekskill", "Milwaukee", "Paoli", "New Orleans", "Portsmouth" };

    // x64: 8 header + 8 method table + 4 length + 2 per char + 2 terminator, to a multiple of 8.
    static long StringBytes(long length) => (22 + 2 * length + 7) & ~7L;

    public static int Main(string[] args)
    {
        int rows = args.Length > 0 ? int.Parse(args[0], CultureInfo.InvariantCulture) : 100_000;
        string path = Path.Combine(Path.GetTempPath(), $"csvread-{Environment.ProcessId}.csv");
        CheckStringSize();
        try
        {
            Write(path, rows);
            long before = GC.GetAllocatedBytesForCurrentThread();
            var people = new Person[rows];
            long ctorBytes = Load(path, people);
            long loadBytes = GC.GetAllocatedBytesForCurrentThread() - before;
            long huge = BuildHuge(10_000_000);
            Console.WriteLine($"persons {people.Length}");
            Console.WriteLine($"ctor_strings {4L * people.Length}");
            Console.WriteLine($"ctor_string_bytes {ctorBytes}");
            Console.WriteLine($"load_bytes {loadBytes}");
            Console.WriteLine($"huge_bytes {huge}");
            GC.KeepAlive(people);
        }
        finally
        {
            File.Delete(path);
        }
        Console.WriteLine($"total_bytes {GC.GetTotalAllocatedBytes(true)}");
        return 0;
    }

    // The string sizes the figures assume, as this runtime allocates them.
    static void CheckStringSize()
    {
        for (int n = 1; n < 40; n++)
        {
            long b = GC.GetAllocatedBytesForCurrentThread();
            string s = new string('a', n);
            long used = GC.GetAllocatedBytesForCurrentThread() - b;
            GC.KeepAlive(s);
            if (used != StringBytes(n))
            {
                throw new InvalidOperationException($"a string of {n} chars took {used} bytes, not {StringBytes(n)}");
            }
        }
    }

    static void Write(string path, int rows)
    {
        using var w = new StreamWriter(path);
        w.WriteLine("id,first,last,city");
        for (int i = 0; i < rows; i++)
        {
            w.Write(i);
            w.Write(',');
            w.Write(First[i % First.Length]);
            w.Write(',');
            w.Write(Last[i / First.Length % Last.Length]);
            w.Write(',');
            w.WriteLine(City[i / 7 % City.Length]);
        }
    }

    // Reads the file with CsvHelper; every row becomes a Person here. Returns the bytes of the
    // strings the constructor built.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static long Load(string path, Person[] people)
    {
        using var reader = new StreamReader(path);
        using var csv = new CsvReader(reader, CultureInfo.InvariantCulture);
        csv.Read();
        csv.ReadHeader();
        int i = 0;
        long bytes = 0;
        while (csv.Read())
        {
            string first = csv.GetField(1)!;
            string last = csv.GetField(2)!;
            string city = csv.GetField(3)!;
            people[i] = new Person(i, first, last, city);
            foreach (int n in Person.Lengths(first, last, city))
            {
                bytes += StringBytes(n);
            }
            i++;
        }
        if (i != people.Length)
        {
            throw new InvalidOperationException($"read {i} rows of {people.Length}");
        }
        return bytes;
    }

    // One huge string built by a StringBuilder; returns its bytes as allocated.
    [MethodImpl(MethodImplOptions.NoInlining)]
    static long BuildHuge(int chars)
    {
        var sb = new StringBuilder();
        for (int done = 0; done < chars; done += 1000)
        {
            sb.Append('x', Math.Min(1000, chars - done));
        }
        long b = GC.GetAllocatedBytesForCurrentThread();
        string s = sb.ToString();
        long used = GC.GetAllocatedBytesForCurrentThread() - b;
        // A large allocation can retire the thread's allocation context, and its unused part
        // (about 8 KB) then counts as allocated too: 20,008,176 bytes were read for a
        // 20,000,024-byte string, with or without a collection. The size is checked with that
        // slack; the string's own size is what the app reports.
        long own = StringBytes(chars);
        if (s.Length != chars || used < own || used > own + 64 * 1024)
        {
            throw new InvalidOperationException($"{s.Length} chars in {used} bytes");
        }
        return StringBytes(chars);
    }
}
