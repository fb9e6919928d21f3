/* idx — the IDX files of MNIST and Fashion-MNIST, gzip-compressed or raw.
 *
 * The source idx:DIR (source.h). Images stay uint8 in memory (60000x784 floats would be
 * 188 MB); the data pipeline converts each example as it is produced. */
#ifndef KT_IDX_H
#define KT_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "source.h"

/* Reads one IDX file of unsigned bytes with `ndims` dimensions (3 for images, 1 for
 * labels) from path (gzip or raw, told apart by content). Checks the magic, the type
 * byte, the number of dimensions, that every dimension is positive, that the data is
 * exactly as long as the dimensions say (no truncation, no trailing bytes). On success
 * *data (free with free()) holds the items and dims[0..ndims) the sizes; returns 0. On
 * failure returns a negative errno and one line in err naming the file. */
int idx_read(const char *path, int ndims, uint8_t **data, uint32_t dims[3], char *err,
             size_t errlen);

/* Loads "<dir>/<prefix>-images-idx3-ubyte[.gz]" and "<dir>/<prefix>-labels-idx1-ubyte[.gz]"
 * (prefix "train" or "t10k") into s as H x W x 1 uint8 images and int32 labels, and
 * checks that the two counts agree (source_open checks the labels' range, the caller
 * the images' shape against its model). Returns 0 or a negative errno with err as above;
 * free with source_free. */
int idx_open(Source *s, const char *dir, const char *prefix, char *err, size_t errlen);

#endif
