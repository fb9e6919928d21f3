/* idx — the IDX files of MNIST and Fashion-MNIST, gzip-compressed or raw.
 *
 * Images stay uint8 in memory (60000x784 floats would be 188 MB); the data pipeline
 * scales each batch to [0,1] as it is produced. */
#ifndef KT_IDX_H
#define KT_IDX_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *images; /* (count, rows, cols) */
    uint8_t *labels; /* (count) */
    size_t count;
    int rows, cols;
    char images_path[4096]; /* the images file read, for messages about its shape */
} IdxDataset;

/* Reads one IDX file of unsigned bytes with `ndims` dimensions (3 for images, 1 for
 * labels) from path (gzip or raw, told apart by content). Checks the magic, the type
 * byte, the number of dimensions, that every dimension is positive, that the data is
 * exactly as long as the dimensions say (no truncation, no trailing bytes). On success
 * *data (free with free()) holds the items and dims[0..ndims) the sizes; returns 0. On
 * failure returns a negative errno and one line in err naming the file. */
int idx_read(const char *path, int ndims, uint8_t **data, uint32_t dims[3], char *err,
             size_t errlen);

/* Loads "<dir>/<prefix>-images-idx3-ubyte[.gz]" and "<dir>/<prefix>-labels-idx1-ubyte[.gz]"
 * (prefix "train" or "t10k"), checks that the two counts agree and that every label is
 * below num_classes (the caller checks the images' shape against its model). Returns 0
 * or a negative errno with err as above; free with idx_dataset_free. */
int idx_load_dataset(IdxDataset *ds, const char *dir, const char *prefix, int num_classes,
                     char *err, size_t errlen);

/* Frees the arrays; NULL or an empty dataset is a no-op. */
void idx_dataset_free(IdxDataset *ds);

#endif
