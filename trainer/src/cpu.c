#include "cpu.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* XCR0: the register states the OS saves on a context switch. */
#define XCR0_AVX 0x6ull         /* SSE and the upper halves of YMM */
#define XCR0_AVX512 0xe0ull     /* opmask, the upper halves of ZMM0-15, ZMM16-31 */
#define XCR0_AMX 0x60000ull     /* XTILECFG, XTILEDATA */

void cpu_decode_signature(unsigned eax, int *family, int *model)
{
    int f = (int)((eax >> 8) & 0xf), m = (int)((eax >> 4) & 0xf);
    if (f == 0xf) f += (int)((eax >> 20) & 0xff);
    if (f == 6 || f >= 0xf) m += (int)((eax >> 16) & 0xf) << 4;
    *family = f, *model = m;
}

unsigned cpu_decode_flags(unsigned l1_ecx, unsigned l7_ebx, unsigned l7_edx, unsigned l71_eax,
                          unsigned long long xcr0)
{
    unsigned f = 0;
    if (l1_ecx & (1u << 0)) f |= CPU_SSE3;
    const int ymm = (l1_ecx & (1u << 27)) && (xcr0 & XCR0_AVX) == XCR0_AVX; /* OSXSAVE */
    if (!ymm) return f;
    if (l1_ecx & (1u << 28)) f |= CPU_AVX;
    if (l1_ecx & (1u << 12)) f |= CPU_FMA;
    if (l7_ebx & (1u << 5)) f |= CPU_AVX2;
    if ((xcr0 & XCR0_AVX512) == XCR0_AVX512) {
        static const struct {
            unsigned bit, flag;
        } z[] = {{16, CPU_AVX512F},
                 {17, CPU_AVX512DQ},
                 {28, CPU_AVX512CD},
                 {30, CPU_AVX512BW},
                 {31, CPU_AVX512VL}};
        for (size_t i = 0; i < sizeof z / sizeof z[0]; i++)
            if (l7_ebx & (1u << z[i].bit)) f |= z[i].flag;
        if (l71_eax & (1u << 5)) f |= CPU_AVX512_BF16;
    }
    if ((xcr0 & XCR0_AMX) == XCR0_AMX) {
        if (l7_edx & (1u << 24)) f |= CPU_AMX_TILE;
        if (l7_edx & (1u << 22)) f |= CPU_AMX_BF16;
    }
    return f;
}

#if defined(__x86_64__) || defined(__i386__)
static unsigned long long read_xcr0(void)
{
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (unsigned long long)hi << 32 | lo;
}

void cpu_detect(CpuInfo *out)
{
    memset(out, 0, sizeof *out);
    unsigned a, b, c, d, max;
    if (!__get_cpuid(0, &max, &b, &c, &d)) return;
    memcpy(out->vendor, &b, 4), memcpy(out->vendor + 4, &d, 4), memcpy(out->vendor + 8, &c, 4);
    unsigned l1_ecx = 0, l7_ebx = 0, l7_edx = 0, l71_eax = 0;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        cpu_decode_signature(a, &out->family, &out->model);
        l1_ecx = c;
    }
    if (max >= 7) {
        unsigned subleaves;
        __cpuid_count(7, 0, subleaves, l7_ebx, c, l7_edx);
        if (subleaves >= 1) __cpuid_count(7, 1, l71_eax, b, c, d);
    }
    /* xgetbv faults unless the OS enabled XSAVE (OSXSAVE, leaf 1 ECX bit 27) */
    unsigned long long xcr0 = l1_ecx & (1u << 27) ? read_xcr0() : 0;
    out->flags = cpu_decode_flags(l1_ecx, l7_ebx, l7_edx, l71_eax, xcr0);
    unsigned brand[12];
    /* unsigned in GCC's cpuid.h, int in clang's (the fuzz build) */
    if ((unsigned)__get_cpuid_max(0x80000000, NULL) >= 0x80000004u) {
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002 + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2],
                        &brand[4 * i + 3]);
        char name[49];
        memcpy(name, brand, 48);
        name[48] = '\0';
        const char *s = name + strspn(name, " ");
        size_t n = strlen(s);
        while (n && s[n - 1] == ' ') n--;
        snprintf(out->name, sizeof out->name, "%.*s", (int)n, s);
    }
}
#else
void cpu_detect(CpuInfo *out)
{
    memset(out, 0, sizeof *out); /* no x86 kernels to choose between */
}
#endif

/* The flags' names as /proc/cpuinfo spells them (sse3 is its "pni"), widest first. */
static const struct {
    unsigned flag;
    const char *name;
} flag_names[] = {
    {CPU_AVX512F, "avx512f"},   {CPU_AVX512DQ, "avx512dq"}, {CPU_AVX512CD, "avx512cd"},
    {CPU_AVX512BW, "avx512bw"}, {CPU_AVX512VL, "avx512vl"}, {CPU_AVX512_BF16, "avx512_bf16"},
    {CPU_AMX_TILE, "amx_tile"}, {CPU_AMX_BF16, "amx_bf16"}, {CPU_AVX2, "avx2"},
    {CPU_FMA, "fma"},           {CPU_AVX, "avx"},           {CPU_SSE3, "sse3"},
};

void cpu_flags_string(unsigned flags, char *buf, size_t len)
{
    size_t n = 0;
    if (len) buf[0] = '\0';
    for (size_t i = 0; i < sizeof flag_names / sizeof flag_names[0]; i++)
        if (flags & flag_names[i].flag && n < len)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? " " : "", flag_names[i].name);
    if (!flags && len) snprintf(buf, len, "none");
}

CpuWidth cpu_width(unsigned flags)
{
    const unsigned avx512 = CPU_AVX512F | CPU_AVX512DQ | CPU_AVX512CD | CPU_AVX512BW | CPU_AVX512VL;
    if ((flags & (avx512 | CPU_AVX2 | CPU_FMA)) == (avx512 | CPU_AVX2 | CPU_FMA))
        return CPU_WIDTH_AVX512;
    if ((flags & (CPU_AVX2 | CPU_FMA)) == (CPU_AVX2 | CPU_FMA)) return CPU_WIDTH_AVX2;
    if (flags & CPU_AVX) return CPU_WIDTH_AVX;
    return CPU_WIDTH_SSE;
}

const char *cpu_width_name(CpuWidth w)
{
    static const char *const names[] = {"sse", "avx", "avx2", "avx512"};
    return names[w];
}

/* OpenBLAS's x86-64 core types that run wider than SSE; the rest (Prescott, Core2,
 * Nehalem, Atom, Opteron, Barcelona, ...) are SSE kernels. Excavator has AVX2 but its
 * kernels are the Piledriver family's AVX ones. */
static const struct {
    const char *core;
    CpuWidth width;
} core_widths[] = {
    {"SapphireRapids", CPU_WIDTH_AVX512},
    {"Cooperlake", CPU_WIDTH_AVX512},
    {"SkylakeX", CPU_WIDTH_AVX512},
    {"Haswell", CPU_WIDTH_AVX2},
    {"Zen", CPU_WIDTH_AVX2},
    {"Sandybridge", CPU_WIDTH_AVX},
    {"Bulldozer", CPU_WIDTH_AVX},
    {"Piledriver", CPU_WIDTH_AVX},
    {"Steamroller", CPU_WIDTH_AVX},
    {"Excavator", CPU_WIDTH_AVX},
};

CpuWidth cpu_openblas_core_width(const char *core)
{
    for (size_t i = 0; core && i < sizeof core_widths / sizeof core_widths[0]; i++)
        if (!strcasecmp(core, core_widths[i].core)) return core_widths[i].width;
    return CPU_WIDTH_SSE;
}

const char *const *cpu_openblas_cores(unsigned flags)
{
    static const char *const amx[] = {"SapphireRapids", "Cooperlake", "SkylakeX", "Haswell", NULL};
    static const char *const bf16[] = {"Cooperlake", "SkylakeX", "Haswell", NULL};
    static const char *const avx512[] = {"SkylakeX", "Haswell", NULL};
    static const char *const avx2[] = {"Haswell", NULL};
    static const char *const avx[] = {"Sandybridge", NULL};
    static const char *const none[] = {NULL};
    switch (cpu_width(flags)) {
    case CPU_WIDTH_AVX512:
        if ((flags & (CPU_AMX_TILE | CPU_AMX_BF16 | CPU_AVX512_BF16)) ==
            (CPU_AMX_TILE | CPU_AMX_BF16 | CPU_AVX512_BF16))
            return amx;
        return flags & CPU_AVX512_BF16 ? bf16 : avx512;
    case CPU_WIDTH_AVX2: return avx2;
    case CPU_WIDTH_AVX: return avx;
    case CPU_WIDTH_SSE: break;
    }
    return none;
}

const char *cpu_openblas_pick(unsigned flags, const char *library_core,
                              int (*known)(const char *core))
{
    const CpuWidth have = cpu_openblas_core_width(library_core);
    for (const char *const *c = cpu_openblas_cores(flags); *c; c++)
        if (known(*c)) return cpu_openblas_core_width(*c) > have ? *c : NULL;
    return NULL;
}
