/* libFuzzer target: IDX files (idx_read), raw or gzip, read as images (3 dimensions)
 * and as labels (1). The input goes to a memfd that idx_read opens by its /proc path. */
#include "idx.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz-idx", 0);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    for (int ndims = 1; ndims <= 3; ndims += 2) {
        uint8_t *items = NULL;
        uint32_t dims[3] = {0, 0, 0};
        char err[512] = "";
        if (idx_read(path, ndims, &items, dims, err, sizeof err) == 0) {
            size_t total = 1;
            for (int i = 0; i < ndims; i++) {
                if (dims[i] == 0) abort();
                total *= dims[i];
            }
            volatile uint8_t sink = items[total - 1]; /* the whole announced extent exists */
            (void)sink;
            free(items);
        } else if (!err[0] || items) {
            abort();
        }
    }
    close(fd);
    return 0;
}
