/* cpu.c: the CPU's feature flags -> the OpenBLAS kernel set, without depending on the
 * machine: cpuid signatures and registers of real CPUs decoded, feature sets mapped to
 * core types, the library's own pick kept or replaced, and what a library lacks
 * skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cpu.h"

#include <string.h>
#include <strings.h>

#define AVX512 (CPU_AVX512F | CPU_AVX512DQ | CPU_AVX512CD | CPU_AVX512BW | CPU_AVX512VL)
#define AVX2 (CPU_SSE3 | CPU_AVX | CPU_AVX2 | CPU_FMA)
/* A 5th-generation Xeon (family 6 model 207): AVX-512 with BF16 and AMX */
#define EMERALD (AVX2 | AVX512 | CPU_AVX512_BF16 | CPU_AMX_TILE | CPU_AMX_BF16)

/* The core types of Debian bookworm's OpenBLAS 0.3.21 (its gotoblas_* tables). */
static int known_0321(const char *core)
{
    static const char *const cores[] = {"Prescott", "Core2",    "Nehalem",    "Sandybridge",
                                        "Haswell",  "SkylakeX", "Cooperlake", "Zen"};
    for (size_t i = 0; i < sizeof cores / sizeof cores[0]; i++)
        if (!strcasecmp(core, cores[i])) return 1;
    return 0;
}

static int known_all(const char *core)
{
    (void)core;
    return 1;
}

/* A build for one CPU (no DYNAMIC_ARCH): no tables, OPENBLAS_CORETYPE ignored. */
static int known_none(const char *core)
{
    (void)core;
    return 0;
}

static const char *pick_or_keep(unsigned flags, const char *library, int (*known)(const char *))
{
    const char *p = cpu_openblas_pick(flags, library, known);
    return p ? p : "(keep)";
}

static void test_signature(void **state)
{
    (void)state;
    int family, model;
    cpu_decode_signature(0x000c06f2, &family, &model); /* Xeon, 5th generation */
    assert_int_equal(family, 6);
    assert_int_equal(model, 207);
    cpu_decode_signature(0x00a00f11, &family, &model); /* AMD EPYC, Zen 3 */
    assert_int_equal(family, 25);
    assert_int_equal(model, 1);
    cpu_decode_signature(0x00000f43, &family, &model); /* Pentium 4 (Prescott): family 15 */
    assert_int_equal(family, 15);
    assert_int_equal(model, 4);
}

/* Leaf 1 ECX: SSE3 0, FMA 12, OSXSAVE 27, AVX 28; leaf 7 EBX: AVX2 5, AVX-512 F 16 DQ 17
 * CD 28 BW 30 VL 31; leaf 7 EDX: AMX-BF16 22, AMX-TILE 24; leaf 7.1 EAX: AVX512_BF16 5. */
static void test_flags_need_the_os(void **state)
{
    (void)state;
    const unsigned l1 = 1u | 1u << 12 | 1u << 27 | 1u << 28;
    const unsigned l7b = 1u << 5 | 1u << 16 | 1u << 17 | 1u << 28 | 1u << 30 | 1u << 31;
    const unsigned l7d = 1u << 22 | 1u << 24, l71a = 1u << 5;
    char s[192];
    cpu_flags_string(cpu_decode_flags(l1, l7b, l7d, l71a, 0x600e7), s, sizeof s);
    assert_string_equal(s, "avx512f avx512dq avx512cd avx512bw avx512vl avx512_bf16 amx_tile "
                           "amx_bf16 avx2 fma avx sse3");
    /* a kernel that does not save ZMM or tile state: AVX2 at most */
    cpu_flags_string(cpu_decode_flags(l1, l7b, l7d, l71a, 0x7), s, sizeof s);
    assert_string_equal(s, "avx2 fma avx sse3");
    /* no OSXSAVE: no AVX of any width */
    cpu_flags_string(cpu_decode_flags(l1 & ~(1u << 27), l7b, l7d, l71a, 0x600e7), s, sizeof s);
    assert_string_equal(s, "sse3");
    cpu_flags_string(0, s, sizeof s);
    assert_string_equal(s, "none");
}

static void test_width(void **state)
{
    (void)state;
    assert_string_equal(cpu_width_name(cpu_width(EMERALD)), "avx512");
    assert_string_equal(cpu_width_name(cpu_width(AVX2 | CPU_AVX512F)), "avx2"); /* F alone */
    assert_string_equal(cpu_width_name(cpu_width(AVX2)), "avx2");
    assert_string_equal(cpu_width_name(cpu_width(CPU_SSE3 | CPU_AVX | CPU_AVX2)), "avx");
    assert_string_equal(cpu_width_name(cpu_width(CPU_SSE3)), "sse");
    assert_string_equal(cpu_width_name(cpu_openblas_core_width("SkylakeX")), "avx512");
    assert_string_equal(cpu_width_name(cpu_openblas_core_width("Zen")), "avx2");
    assert_string_equal(cpu_width_name(cpu_openblas_core_width("Prescott")), "sse");
    assert_string_equal(cpu_width_name(cpu_openblas_core_width("Unknown")), "sse");
}

/* The widest core type the features call for, whatever the CPU model. */
static void test_features_to_cores(void **state)
{
    (void)state;
    assert_string_equal(cpu_openblas_cores(EMERALD)[0], "SapphireRapids");
    assert_string_equal(cpu_openblas_cores(AVX2 | AVX512 | CPU_AVX512_BF16)[0], "Cooperlake");
    assert_string_equal(cpu_openblas_cores(AVX2 | AVX512)[0], "SkylakeX");
    assert_string_equal(cpu_openblas_cores(AVX2)[0], "Haswell");
    assert_string_equal(cpu_openblas_cores(CPU_SSE3 | CPU_AVX)[0], "Sandybridge");
    assert_null(cpu_openblas_cores(CPU_SSE3)[0]);
    assert_null(cpu_openblas_cores(0)[0]);
}

/* The Xeon: OpenBLAS 0.3.21 does not know model 207 and runs Prescott; it has no
 * SapphireRapids, so Cooperlake. */
static void test_pick_replaces_a_narrow_library_choice(void **state)
{
    (void)state;
    assert_string_equal(pick_or_keep(EMERALD, "Prescott", known_0321), "Cooperlake");
    assert_string_equal(pick_or_keep(EMERALD, "Prescott", known_all), "SapphireRapids");
    assert_string_equal(pick_or_keep(AVX2 | AVX512, "Haswell", known_0321), "SkylakeX");
    assert_string_equal(pick_or_keep(AVX2 | AVX512 | CPU_AVX512_BF16, "Zen", known_0321),
                        "Cooperlake"); /* a Zen 4 under 0.3.21 */
    assert_string_equal(pick_or_keep(AVX2, "Prescott", known_0321), "Haswell");
    assert_string_equal(pick_or_keep(CPU_SSE3 | CPU_AVX, "Core2", known_0321), "Sandybridge");
}

/* A library choice as wide as the features is kept (Zen is OpenBLAS's AVX2 set for AMD,
 * this machine's); so is any choice without a wider set known to the library. */
static void test_pick_keeps_the_library(void **state)
{
    (void)state;
    assert_string_equal(pick_or_keep(AVX2, "Zen", known_0321), "(keep)");
    assert_string_equal(pick_or_keep(AVX2, "Haswell", known_0321), "(keep)");
    assert_string_equal(pick_or_keep(AVX2 | AVX512, "SkylakeX", known_0321), "(keep)");
    assert_string_equal(pick_or_keep(EMERALD, "SkylakeX", known_0321), "(keep)");
    assert_string_equal(pick_or_keep(EMERALD, "Prescott", known_none), "(keep)");
    assert_string_equal(pick_or_keep(CPU_SSE3, "Prescott", known_all), "(keep)");
    assert_string_equal(pick_or_keep(0, "Prescott", known_all), "(keep)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signature),
        cmocka_unit_test(test_flags_need_the_os),
        cmocka_unit_test(test_width),
        cmocka_unit_test(test_features_to_cores),
        cmocka_unit_test(test_pick_replaces_a_narrow_library_choice),
        cmocka_unit_test(test_pick_keeps_the_library),
    };
    return cmocka_run_group_tests_name("cpu", tests, NULL, NULL);
}
