// A library whose PDB is embedded in its DLL: a loop its caller runs once, on the line marked.
using System.Runtime.CompilerServices;

namespace EmbeddedLib;

public static class Embedded
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static ulong Spin(long n)
    {
        ulong x = 11;
        for (long i = 0; i < n; i++) x = (x ^ (ulong)i) * 0x9E3779B97F4A7C15UL + (x >> 29); // LINE:EMBEDDED
        return x;
    }
}
