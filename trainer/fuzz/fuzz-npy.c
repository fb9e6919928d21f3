/* libFuzzer target: NumPy arrays (npy.c), the input read as a .npy file (npy_read) and
 * as an .npz archive whose member x.npy is read (npz_read, through libzip). The input
 * goes to a memfd that the readers open by its /proc path. What reads must hold as many
 * bytes as its dtype and shape say. */
#include "npy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int rc, NpyArray *a, const char *err)
{
    static const size_t item[] = {1, 4, 8, 4, 8};
    if (rc == 0) {
        size_t count = 1;
        for (int i = 0; i < a->ndim; i++) count *= (size_t)a->shape[i];
        if (count != a->count || a->ndim > NPY_MAX_DIMS) abort();
        if (count) {
            volatile uint8_t sink = ((const uint8_t *)a->data)[count * item[a->dtype] - 1];
            (void)sink;
        }
        npy_free(a);
    } else if (!err[0] || a->data) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz-npy", 0);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    NpyArray a;
    char err[512] = "";
    check(npy_read(path, &a, err, sizeof err), &a, err);
    err[0] = '\0';
    check(npz_read(path, "x", &a, err, sizeof err), &a, err);
    close(fd);
    return 0;
}
