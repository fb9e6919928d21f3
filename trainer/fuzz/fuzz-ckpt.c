/* libFuzzer target: the checkpoint reader (ckpt_load_latest) on one file
 * <tmpdir>/ckpt-1.kt holding the input, for a model of 64 parameter bytes and 32
 * optimizer bytes whose signature is "fuzz", trained on FUZZ_EXAMPLES examples. */
#include "ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_EXAMPLES 60000

static char dir[64], file[96];

static void cleanup(void)
{
    unlink(file);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/fuzz-ckpt-XXXXXX", tmp && strlen(tmp) < 40 ? tmp : "/tmp");
        if (!mkdtemp(dir)) abort();
        snprintf(file, sizeof file, "%s/ckpt-1.kt", dir);
        atexit(cleanup);
    }
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size)) abort();
    close(fd);
    CkptState st;
    unsigned char params[64], opt[32];
    CkptLoadInfo info;
    char err[1024] = "";
    int rc = ckpt_load_latest(dir, "fuzz", FUZZ_EXAMPLES, &st, params, sizeof params, opt,
                              sizeof opt, &info, err, sizeof err);
    if (rc == 0) {
        if (strcmp(st.model_signature, "fuzz") != 0 || info.skipped != 0) abort();
    } else if (!err[0] || (rc != -EBADMSG && rc != -EPROTO)) {
        abort();
    }
    return 0;
}
