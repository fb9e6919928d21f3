/* A stand-in for an OpenBLAS that does not know this CPU model, for
 * test-cpu-kernels.sh and test-trainer-image.sh (LD_PRELOAD): asked for its core with no
 * OPENBLAS_CORETYPE set, it answers Prescott, as 0.3.21 does on a Xeon newer than itself;
 * with the variable set, the library's own answer. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>

char *openblas_get_corename(void);

char *openblas_get_corename(void)
{
    if (!getenv("OPENBLAS_CORETYPE")) return "Prescott";
    char *(*real)(void) = (char *(*)(void))dlsym(RTLD_NEXT, "openblas_get_corename");
    return real();
}
