using System.Text;
using Markdig;

// Renders one generated Markdown document (headings, emphasis, lists, tables, code, links) RENDERS
// times and prints "renders=N checksum=X": the same X for the same N on every run.
int renders = args.Length > 0 ? int.Parse(args[0]) : 400;
string doc = Generate(60);
var pipeline = new MarkdownPipelineBuilder().UseAdvancedExtensions().Build();
ulong checksum = 14695981039346656037UL;
for (int i = 0; i < renders; i++)
{
    string html = Markdown.ToHtml(doc, pipeline);
    foreach (char c in html)
    {
        checksum = (checksum ^ c) * 1099511628211UL;
    }
}
Console.WriteLine($"renders={renders} checksum={checksum:x16}");

static string Generate(int sections)
{
    var sb = new StringBuilder();
    for (int s = 0; s < sections; s++)
    {
        sb.Append("# Section ").Append(s).Append("\n\n");
        sb.Append("Some *emphasis*, some **strong** text, `inline code` and a [link](https://example.org/")
            .Append(s).Append(") in paragraph ").Append(s).Append(".\n\n");
        for (int i = 0; i < 5; i++)
        {
            sb.Append("- item ").Append(i).Append(" with _words_ and ~~strike~~ and a footnote[^").Append(s).Append("]\n");
        }
        sb.Append("\n| a | b | c |\n|---|:-:|--:|\n");
        for (int r = 0; r < 4; r++)
        {
            sb.Append("| ").Append(r).Append(" | **").Append(r * s).Append("** | `").Append(r + s).Append("` |\n");
        }
        sb.Append("\n```csharp\nvar x = ").Append(s).Append(";\nConsole.WriteLine(x);\n```\n\n");
        sb.Append("> A quote with a <span>tag</span> & an entity &amp; text.\n\n");
        sb.Append("[^").Append(s).Append("]: Footnote ").Append(s).Append(".\n\n");
    }
    return sb.ToString();
}
