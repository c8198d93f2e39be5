// Profiling target: the C# compiler (Microsoft.CodeAnalysis.CSharp from NuGet) used as a library.
// Compiles a generated source N times and walks each syntax tree with a walker of its own, whose
// calls it counts itself, so that a profiler's exact call counts can be checked against the app's.
//
//   CompileLib [compilations] [hog threads]
//
// Hog threads spin on the CPU (no calls inside the loop) until the compilations end: they load the
// machine so that the profiler's writer thread has to compete for a CPU.
using System.Runtime.CompilerServices;
using Microsoft.CodeAnalysis;
using Microsoft.CodeAnalysis.CSharp;
using Microsoft.CodeAnalysis.CSharp.Syntax;

public sealed class Walker : CSharpSyntaxWalker
{
    public static long Visits;

    // Called once per method declaration of the walked trees; counted here.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public override void VisitMethodDeclaration(MethodDeclarationSyntax node)
    {
        Visits++;
        Program.Seen(node.Identifier.ValueText.Length);
        base.VisitMethodDeclaration(node);
    }
}

public static class Program
{
    public static long SeenCalls;
    static volatile bool done;

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static void Seen(int n) { SeenCalls++; }

    static string Source(int classes, int methods)
    {
        var sb = new System.Text.StringBuilder();
        sb.Append("using System; using System.Collections.Generic; using System.Linq;\nnamespace Gen {\n");
        for (int c = 0; c < classes; c++)
        {
            sb.Append($"public class C{c} {{\n  private readonly List<int> items = new();\n");
            for (int m = 0; m < methods; m++)
            {
                sb.Append($"  public int M{m}(int x, string s) {{ var q = items.Where(i => i > x + {m}).Select(i => i * {c + 1}).ToList();");
                sb.Append($" if (s.Length > {m % 7}) {{ return q.Count + s.GetHashCode(); }} for (int k = 0; k < x; k++) {{ items.Add(k ^ {m}); }}");
                sb.Append($" return q.Sum() + (x switch {{ 0 => 1, 1 => 2, _ => x * {m} }}); }}\n");
            }
            sb.Append("}\n");
        }
        sb.Append("}\n");
        return sb.ToString();
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static int Compile(string source, MetadataReference[] refs, int round)
    {
        var tree = CSharpSyntaxTree.ParseText(source);
        new Walker().Visit(tree.GetRoot());
        var compilation = CSharpCompilation.Create(
            $"Gen{round}", new[] { tree }, refs,
            new CSharpCompilationOptions(OutputKind.DynamicallyLinkedLibrary, optimizationLevel: OptimizationLevel.Release));
        using var ms = new MemoryStream();
        var result = compilation.Emit(ms);
        if (!result.Success)
        {
            foreach (var d in result.Diagnostics.Take(5)) Console.Error.WriteLine(d);
            throw new InvalidOperationException("compilation failed");
        }
        return (int)ms.Length;
    }

    static void Hog()
    {
        double x = 1;
        while (!done) { x = x * 1.0000001 + 1e-9; if (x > 1e9) x = 1; }
    }

    public static int Main(string[] args)
    {
        int rounds = args.Length > 0 ? int.Parse(args[0]) : 5;
        int hogs = args.Length > 1 ? int.Parse(args[1]) : 0;
        int classes = args.Length > 2 ? int.Parse(args[2]) : 60;
        var threads = Enumerable.Range(0, hogs).Select(_ => new Thread(Hog) { IsBackground = true }).ToList();
        threads.ForEach(t => t.Start());
        var tpa = ((string)AppContext.GetData("TRUSTED_PLATFORM_ASSEMBLIES")!).Split(Path.PathSeparator);
        var refs = tpa.Where(p => Path.GetFileName(p) is "System.Private.CoreLib.dll" or "System.Runtime.dll"
                                   or "System.Collections.dll" or "System.Linq.dll" or "netstandard.dll")
                      .Select(p => (MetadataReference)MetadataReference.CreateFromFile(p)).ToArray();
        string source = Source(classes, 12);
        long bytes = 0;
        for (int r = 0; r < rounds; r++) bytes += Compile(source, refs, r);
        done = true;
        threads.ForEach(t => t.Join());
        Console.WriteLine($"compilations={rounds} visits={Walker.Visits} seen={SeenCalls} bytes={bytes}");
        return 0;
    }
}
