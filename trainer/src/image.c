#include "image.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spng.h>
#include <turbojpeg.h>

static const uint8_t png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

ImageFormat image_format(const uint8_t *p, size_t n)
{
    if (n >= sizeof png_signature && !memcmp(p, png_signature, sizeof png_signature))
        return IMAGE_PNG;
    if (n >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff) return IMAGE_JPEG;
    return IMAGE_UNKNOWN;
}

const char *image_format_name(ImageFormat f)
{
    return f == IMAGE_PNG ? "PNG" : f == IMAGE_JPEG ? "JPEG" : "unknown";
}

static int decode_png(const uint8_t *p, size_t n, size_t max_pixels, uint8_t **pixels, int *h,
                      int *w, int *c, char *err, size_t errlen)
{
    spng_ctx *ctx = spng_ctx_new(0);
    if (!ctx) {
        snprintf(err, errlen, "PNG: out of memory");
        return -ENOMEM;
    }
    struct spng_ihdr ihdr;
    struct spng_trns trns;
    int rc = spng_set_png_buffer(ctx, p, n);
    if (!rc) rc = spng_get_ihdr(ctx, &ihdr);
    if (rc) {
        snprintf(err, errlen, "corrupt PNG (libspng: %s)", spng_strerror(rc));
        spng_ctx_free(ctx);
        return -EINVAL;
    }
    const int has_trns = spng_get_trns(ctx, &trns) == 0;
    int fmt = SPNG_FMT_PNG, flags = 0, channels = 0;
    switch (ihdr.color_type) {
    case SPNG_COLOR_TYPE_GRAYSCALE: channels = 1; break;
    case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA: channels = 2; break;
    case SPNG_COLOR_TYPE_TRUECOLOR: channels = 3; break;
    case SPNG_COLOR_TYPE_TRUECOLOR_ALPHA: channels = 4; break;
    case SPNG_COLOR_TYPE_INDEXED:
        channels = has_trns ? 4 : 3;
        fmt = has_trns ? SPNG_FMT_RGBA8 : SPNG_FMT_RGB8;
        flags = has_trns ? SPNG_DECODE_TRNS : 0;
        break;
    }
    const char *why = NULL;
    if (ihdr.color_type != SPNG_COLOR_TYPE_INDEXED && ihdr.bit_depth != 8)
        why = "bit depth other than 8";
    else if (ihdr.color_type != SPNG_COLOR_TYPE_INDEXED && has_trns)
        why = "tRNS chunk on a non-palette image";
    if (why) {
        snprintf(err, errlen,
                 "PNG of bit depth %u, colour type %u: a %s (expected 8-bit samples, as "
                 "tf.io.encode_png of uint8 writes)",
                 ihdr.bit_depth, ihdr.color_type, why);
        spng_ctx_free(ctx);
        return -EINVAL;
    }
    if ((size_t)ihdr.width * ihdr.height > max_pixels) {
        snprintf(err, errlen, "PNG of %ux%u pixels (expected at most %zu)", ihdr.width, ihdr.height,
                 max_pixels);
        spng_ctx_free(ctx);
        return -EINVAL;
    }
    size_t len = 0;
    uint8_t *out = NULL;
    rc = spng_decoded_image_size(ctx, fmt, &len);
    if (!rc && len != (size_t)ihdr.width * ihdr.height * (size_t)channels) rc = SPNG_EINTERNAL;
    if (!rc) {
        out = malloc(len ? len : 1);
        rc = out ? spng_decode_image(ctx, out, len, fmt, flags) : SPNG_EMEM;
    }
    spng_ctx_free(ctx);
    if (rc) {
        free(out);
        snprintf(err, errlen, "corrupt PNG (libspng: %s)", spng_strerror(rc));
        return -EINVAL;
    }
    *pixels = out;
    *h = (int)ihdr.height, *w = (int)ihdr.width, *c = channels;
    return 0;
}

static int decode_jpeg(const uint8_t *p, size_t n, size_t max_pixels, uint8_t **pixels, int *h,
                       int *w, int *c, char *err, size_t errlen)
{
    tjhandle tj = tjInitDecompress();
    if (!tj) {
        snprintf(err, errlen, "JPEG: cannot start libjpeg-turbo: %s", tjGetErrorStr2(NULL));
        return -ENOMEM;
    }
    int width, height, subsamp, colorspace, rc = -EINVAL;
    uint8_t *out = NULL;
    if (tjDecompressHeader3(tj, p, (unsigned long)n, &width, &height, &subsamp, &colorspace)) {
        snprintf(err, errlen, "corrupt JPEG (libjpeg-turbo: %s)", tjGetErrorStr2(tj));
        goto out;
    }
    if (colorspace != TJCS_GRAY && colorspace != TJCS_YCbCr && colorspace != TJCS_RGB) {
        snprintf(err, errlen, "CMYK JPEG (expected greyscale or colour: C = 1 or 3)");
        goto out;
    }
    if ((size_t)width * (size_t)height > max_pixels) {
        snprintf(err, errlen, "JPEG of %dx%d pixels (expected at most %zu)", width, height,
                 max_pixels);
        goto out;
    }
    const int channels = colorspace == TJCS_GRAY ? 1 : 3;
    out = malloc((size_t)width * (size_t)height * (size_t)channels);
    if (!out) {
        snprintf(err, errlen, "JPEG of %dx%d pixels: out of memory", width, height);
        rc = -ENOMEM;
        goto out;
    }
    /* A warning (a truncated stream, extraneous bytes) also fails: TensorFlow refuses
     * such an image unless asked to recover it. */
    if (tjDecompress2(tj, p, (unsigned long)n, out, width, 0, height,
                      channels == 1 ? TJPF_GRAY : TJPF_RGB,
                      TJFLAG_FASTDCT | TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS)) {
        snprintf(err, errlen, "corrupt JPEG (libjpeg-turbo: %s)", tjGetErrorStr2(tj));
        goto out;
    }
    *pixels = out;
    out = NULL;
    *h = height, *w = width, *c = channels;
    rc = 0;
out:
    free(out);
    tjDestroy(tj);
    return rc;
}

int image_decode(const uint8_t *p, size_t n, size_t max_pixels, uint8_t **pixels, int *h, int *w,
                 int *c, char *err, size_t errlen)
{
    *pixels = NULL;
    switch (image_format(p, n)) {
    case IMAGE_PNG: return decode_png(p, n, max_pixels, pixels, h, w, c, err, errlen);
    case IMAGE_JPEG: return decode_jpeg(p, n, max_pixels, pixels, h, w, c, err, errlen);
    default: break;
    }
    snprintf(err, errlen, "%zu bytes that are neither PNG nor JPEG (first bytes %02x %02x %02x)", n,
             n > 0 ? p[0] : 0, n > 1 ? p[1] : 0, n > 2 ? p[2] : 0);
    return -EINVAL;
}
