// Profiling target: namespaces, nested types, generic types and generic methods, each method
// called from Main so the profiler must name all of them exactly.
using System.Runtime.CompilerServices;
using Acme.Shapes;
using Acme.Shapes.Generic;

namespace Acme.Shapes
{
    public class Outer
    {
        public class Inner
        {
            [MethodImpl(MethodImplOptions.NoInlining)]
            public int Compute(int x) => x * 3 + 1;

            public static class Deeper
            {
                [MethodImpl(MethodImplOptions.NoInlining)]
                public static string Describe() => "deeper";
            }
        }
    }

    public class Box<T>
    {
        private readonly T _value;
        public Box(T value) => _value = value;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public T Get() => _value;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public Box<U> Map<U>(Func<T, U> f) => new Box<U>(f(_value));
    }

    public struct Point
    {
        public double X, Y;
        public Point(double x, double y) { X = x; Y = y; }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public double Length() => Math.Sqrt(X * X + Y * Y);
    }

    public static class Algorithms
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static T Max<T>(T a, T b) where T : IComparable<T> => a.CompareTo(b) >= 0 ? a : b;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static double Scale(ref Point p, double factor, int[] weights, List<string> tags)
        {
            p.X *= factor;
            p.Y *= factor;
            return p.Length() + weights.Length + tags.Count;
        }
    }
}

namespace Acme.Shapes.Generic
{
    public class Pair<TKey, TValue>
    {
        public TKey Key;
        public TValue Value;
        public Pair(TKey k, TValue v) { Key = k; Value = v; }

        public class Node
        {
            [MethodImpl(MethodImplOptions.NoInlining)]
            public string Show(TKey k) => $"node:{k}";
        }
    }
}

public static class Program
{
    public static int Main()
    {
        int a = new Outer.Inner().Compute(4);
        string d = Outer.Inner.Deeper.Describe();
        int b = new Box<int>(41).Get();
        string s = new Box<string>("box").Get();
        double m = new Box<int>(2).Map(x => x * 1.5).Get();
        var pt = new Point(3, 4);
        double len = pt.Length();
        int mi = Algorithms.Max(3, 9);
        string ms = Algorithms.Max("apple", "pear");
        double sc = Algorithms.Scale(ref pt, 2.0, new[] { 1, 2 }, new List<string> { "x" });
        var pair = new Pair<int, string>(1, "one");
        string n = new Pair<int, string>.Node().Show(pair.Key);
        Console.WriteLine($"{a} {d} {b} {s} {m} {len} {mi} {ms} {sc} {n}");
        return 0;
    }
}
