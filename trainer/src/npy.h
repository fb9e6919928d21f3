/* npy — NumPy arrays: .npy files and the .npy members of .npz archives (np.save,
 * np.savez, np.savez_compressed), in the formats' versions 1.0, 2.0 and 3.0.
 *
 * Only what a data set needs: C-order arrays of little-endian uint8, int32, int64,
 * float32 or float64. Anything else (Fortran order, another dtype, a structured or
 * pickled array) is refused naming the file and what was found. */
#ifndef KT_NPY_H
#define KT_NPY_H

#include <stddef.h>
#include <stdint.h>

typedef enum { NPY_U1 = 0, NPY_I4, NPY_I8, NPY_F4, NPY_F8 } NpyDtype;

#define NPY_MAX_DIMS 8

typedef struct {
    NpyDtype dtype;
    int ndim;
    uint64_t shape[NPY_MAX_DIMS];
    size_t count; /* elements: the product of shape */
    void *data;   /* count elements of dtype, as the file holds them */
} NpyArray;

/* Reads the .npy file at path. Returns 0, or a negative errno with one line in err
 * naming the file: it cannot be opened, the header is truncated or malformed, the
 * dtype or order is not one of the above, the data is shorter or longer than the shape
 * says. Free with npy_free. */
int npy_read(const char *path, NpyArray *a, char *err, size_t errlen);

/* Reads member KEY.npy of the .npz archive at path (stored or deflated), with the
 * errors of npy_read naming "path:KEY"; a missing key lists the keys the archive has. */
int npz_read(const char *path, const char *key, NpyArray *a, char *err, size_t errlen);

/* The dtype as NumPy writes it in a header: "|u1", "<i4", "<i8", "<f4", "<f8". */
const char *npy_dtype_name(NpyDtype d);

/* Frees the data; NULL or an empty array is a no-op. */
void npy_free(NpyArray *a);

#endif
