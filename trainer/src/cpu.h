/* cpu — what this processor can run, read from cpuid, and the OpenBLAS kernel set that
 * calls for.
 *
 * OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels from a table of CPU
 * models: on a model newer than the library it falls back to old SSE kernels, a quarter
 * of the speed. The trainer instead decides by the CPU's feature flags, as oneDNN and
 * PyTorch do (gemm_select_kernels, gemm.h). Detection (cpu_detect) reads the hardware;
 * everything else here is a pure function of its result, tested without the machine. */
#ifndef KT_CPU_H
#define KT_CPU_H

#include <stddef.h>

/* Feature flags, each set only when the operating system also saves the registers it
 * needs (XCR0): a CPU with AVX-512 under a kernel that does not enable it has none. */
enum {
    CPU_SSE3 = 1u << 0,
    CPU_AVX = 1u << 1,
    CPU_FMA = 1u << 2,
    CPU_AVX2 = 1u << 3,
    CPU_AVX512F = 1u << 4,
    CPU_AVX512DQ = 1u << 5,
    CPU_AVX512CD = 1u << 6,
    CPU_AVX512BW = 1u << 7,
    CPU_AVX512VL = 1u << 8,
    CPU_AVX512_BF16 = 1u << 9,
    CPU_AMX_TILE = 1u << 10,
    CPU_AMX_BF16 = 1u << 11,
};

/* The vector width of a kernel set, narrowest first. */
typedef enum { CPU_WIDTH_SSE, CPU_WIDTH_AVX, CPU_WIDTH_AVX2, CPU_WIDTH_AVX512 } CpuWidth;

typedef struct {
    char vendor[13]; /* "GenuineIntel", "AuthenticAMD"; "" when unknown */
    int family;      /* as /proc/cpuinfo's "cpu family" (extended family added) */
    int model;       /* as its "model" (extended model added) */
    char name[49];   /* the brand string, spaces trimmed; "" when unknown */
    unsigned flags;  /* CPU_* */
} CpuInfo;

/* Reads this CPU's identity and flags (cpuid, xgetbv); all zero off x86. */
void cpu_detect(CpuInfo *out);

/* The family and model that a cpuid leaf 1 EAX encodes (the extended fields added as
 * Intel and AMD document). */
void cpu_decode_signature(unsigned eax, int *family, int *model);

/* The CPU_* flags of the raw registers: leaf 1 ECX, leaf 7.0 EBX and EDX, leaf 7.1 EAX,
 * and XCR0 (0 when the OS has no XSAVE: then no AVX of any width). */
unsigned cpu_decode_flags(unsigned l1_ecx, unsigned l7_ebx, unsigned l7_edx, unsigned l71_eax,
                          unsigned long long xcr0);

/* The flags' names, widest first, separated by spaces ("avx2 fma avx sse3"); "none"
 * when there are none. Writes at most len bytes (always terminated). */
void cpu_flags_string(unsigned flags, char *buf, size_t len);

/* The widest kernel width the flags allow: AVX-512 takes F, DQ, CD, BW and VL (what
 * OpenBLAS's SkylakeX kernels use), AVX2 takes FMA too. */
CpuWidth cpu_width(unsigned flags);

/* A width's name: "sse", "avx", "avx2", "avx512". */
const char *cpu_width_name(CpuWidth w);

/* The width of an OpenBLAS core name as openblas_get_corename() spells it ("SkylakeX",
 * "Zen", "Prescott"); CPU_WIDTH_SSE for one it does not know. */
CpuWidth cpu_openblas_core_width(const char *core);

/* The OpenBLAS core types the flags call for, preferred first (SapphireRapids with AMX,
 * Cooperlake with AVX-512 BF16, SkylakeX with AVX-512, Haswell with AVX2 and FMA,
 * Sandybridge with AVX), each followed by the narrower ones for a library that lacks
 * it; NULL-terminated; an empty list below AVX. A static array. */
const char *const *cpu_openblas_cores(unsigned flags);

/* The core type to force (OPENBLAS_CORETYPE), or NULL to keep the library's choice:
 * the first of cpu_openblas_cores(flags) that known() says the library has, when it is
 * wider than library_core (what the library picked by itself). */
const char *cpu_openblas_pick(unsigned flags, const char *library_core,
                              int (*known)(const char *core));

#endif
