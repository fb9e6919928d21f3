/* image — one encoded image (PNG or JPEG, recognised by its first bytes) decoded to
 * uint8 pixels, H x W x C channels last, as TensorFlow's tf.io.decode_png and
 * tf.io.decode_jpeg with channels=0 give them (libspng, libjpeg-turbo).
 *
 * PNG: 8-bit grey, grey+alpha, RGB, RGBA as stored (C = 1, 2, 3, 4); a palette image
 * as RGB, or RGBA when it has a tRNS chunk. Refused: 16-bit samples and grey below 8
 * bits (tf.io.encode_png of uint8 writes neither; 16-bit would need a rounding rule),
 * and a tRNS chunk on a non-palette image.
 * JPEG: greyscale (C = 1) or colour as RGB (C = 3), with the integer fast DCT and fancy
 * upsampling that tf.io.decode_jpeg uses by default; CMYK is refused. A truncated or
 * corrupt stream is refused, as TensorFlow does without try_recover_truncated. */
#ifndef KT_IMAGE_H
#define KT_IMAGE_H

#include <stddef.h>
#include <stdint.h>

typedef enum { IMAGE_UNKNOWN = 0, IMAGE_PNG, IMAGE_JPEG } ImageFormat;

/* The format of the n bytes at p, by their signature. */
ImageFormat image_format(const uint8_t *p, size_t n);

/* "PNG", "JPEG" or "unknown". */
const char *image_format_name(ImageFormat f);

/* Decodes the PNG or JPEG at p into *pixels (h x w x c bytes, malloc'd: the caller
 * frees it), at most max_pixels pixels (h * w). Returns 0, or -EINVAL with one line in
 * err saying what is wrong (not a PNG or JPEG, corrupt, an unsupported kind). */
int image_decode(const uint8_t *p, size_t n, size_t max_pixels, uint8_t **pixels, int *h, int *w,
                 int *c, char *err, size_t errlen);

#endif
