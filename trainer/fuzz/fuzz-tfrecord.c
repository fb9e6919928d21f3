/* libFuzzer target: TFRecord sources (tfrecord.c, image.c). The input's first byte picks
 * the options (bit 0: --image-shape 2,2,1, raw bytes or floats; else PNG/JPEG; bit 1:
 * streamed, --data-cache-mib 0; else held decoded, the default cache), the rest
 * goes to a memfd read as tfrecord:/proc/self/fd/N: the compression sniffing and
 * inflation, the record framing and CRCs, the Example reader, the image decoders. The
 * rest is also parsed directly as one tf.train.Example, and every value of the features
 * found is read back. What opens must hold count examples of its shape and type, each
 * label in [0, 10), and read each one back unchanged; what fails must say why and hold
 * nothing. */
#include "source.h"
#include "tfrecord.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void read_back(const TfrFeature *f)
{
    if (f->kind == TFR_BYTES_LIST) {
        for (size_t i = 0; i < f->count; i++) {
            const uint8_t *p;
            size_t n;
            tfrecord_bytes(f, i, &p, &n);
            if (n && !p) abort();
            if (n) {
                volatile uint8_t sink = p[n - 1];
                (void)sink;
            }
        }
    } else if (f->kind == TFR_FLOAT_LIST) {
        float *v = malloc((f->count + 1) * sizeof *v);
        tfrecord_floats(f, v);
        free(v);
    } else if (f->kind == TFR_INT64_LIST) {
        int64_t *v = malloc((f->count + 1) * sizeof *v);
        tfrecord_int64s(f, v);
        free(v);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const uint8_t mode = data[0];
    data++, size--;

    static const char *const names[] = {"image", "label"};
    TfrFeature feats[2];
    char err[1024] = "";
    if (tfrecord_parse_example(data, size, names, 2, feats, err, sizeof err) == 0) {
        read_back(&feats[0]);
        read_back(&feats[1]);
    } else if (!err[0]) {
        abort();
    }

    int fd = memfd_create("fuzz-tfrecord", 0);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    char spec[64];
    snprintf(spec, sizeof spec, "tfrecord:/proc/self/fd/%d", fd);
    SourceOptions o = source_default_options;
    if (mode & 1) o.image_shape[0] = 2, o.image_shape[1] = 2, o.image_shape[2] = 1;
    if (mode & 2) o.cache_bytes = 0;
    Source s;
    err[0] = '\0';
    if (source_open(&s, spec, SOURCE_TRAIN, 10, &o, err, sizeof err) == 0) {
        /* held or streamed, never both; streamed whenever the cache is 0 */
        if (s.count == 0 || !s.records == !s.images || ((mode & 2) && !s.records) || !s.labels ||
            s.h < 1 || s.w < 1 || s.c < 1)
            abort();
        float *x = malloc(source_example_size(&s) * sizeof *x);
        for (size_t i = 0; i < s.count; i++) {
            int32_t y;
            if (s.labels[i] < 0 || s.labels[i] >= 10) abort();
            if (source_read_example(&s, i, PIXEL_RAW, x, &y, err, sizeof err) || y != s.labels[i])
                abort();
        }
        free(x);
        source_free(&s);
    } else if (!err[0] || s.records || s.images || s.labels) {
        abort();
    }
    close(fd);
    return 0;
}
