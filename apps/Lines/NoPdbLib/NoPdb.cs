// A library built without a PDB (DebugType none): a loop its caller runs once.
using System.Runtime.CompilerServices;

namespace NoPdbLib;

public static class NoPdb
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static ulong Spin(long n)
    {
        ulong x = 7;
        for (long i = 0; i < n; i++) x = (x ^ (ulong)i) * 0x9E3779B97F4A7C15UL + (x >> 29);
        return x;
    }
}
