/* inflater — GZIP or ZLIB data read at any offset of its output, in bounded memory, for
 * a TFRecord file or object too large to hold uncompressed (docs/design.md, "Compressed
 * files").
 *
 * The first pass inflates the data from its start, every GZIP member's CRC and length
 * (or the ZLIB stream's Adler-32) checked, and keeps an access point every INFLATER_SPAN
 * bytes of output, at a deflate block boundary: where the block starts in the compressed
 * bytes (a byte, and how many bits of the byte before it), and the 32 KiB of output
 * before it, which is all a deflate block can refer back to. After it, bytes at any
 * output offset are inflated from the nearest point at or before them: at most
 * INFLATER_SPAN bytes of output are inflated and thrown away to reach them, and a read
 * after the last one goes on from where that one ended. The points cost 32 KiB each,
 * 1/64 of the output.
 *
 * The compressed bytes come from a callback (pread on a local file, ranged GETs on an
 * object), INFLATER_IN bytes at a time. Not thread-safe: one caller at a time. */
#ifndef KT_INFLATER_H
#define KT_INFLATER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define INFLATER_SPAN ((size_t)2 << 20)
#define INFLATER_IN ((size_t)256 << 10)

/* Up to n bytes of the compressed data at byte off into buf: the count (short only at
 * its end), or a negative errno with one line in err. */
typedef ssize_t (*InflaterRead)(void *ctx, uint8_t *buf, size_t n, uint64_t off, char *err,
                                size_t errlen);

typedef struct Inflater Inflater;

/* An inflater of clen compressed bytes, GZIP (gzip 1, concatenated members read one
 * after the other) or ZLIB (gzip 0), read through read(ctx, ...); name (copied) and
 * kind ("GZIP", "ZLIB") name it in messages. NULL when out of memory. */
Inflater *inflater_new(int gzip, uint64_t clen, InflaterRead read, void *ctx, const char *name);

/* Output bytes [off, off + n) into *p (inside the inflater, good until its next call):
 * returns how many there are, fewer than n only at the output's end (0 past it), or a
 * negative errno with one line in err naming the data, what is wrong and the compressed
 * byte (-EINVAL: corrupt or truncated data, bytes after its end; else read's error). */
ssize_t inflater_at(Inflater *z, uint64_t off, size_t n, const uint8_t **p, char *err,
                    size_t errlen);

/* The output's length once a read has reached its end (else UINT64_MAX). */
uint64_t inflater_size(const Inflater *z);

/* Access points kept, and the bytes they take. */
size_t inflater_points(const Inflater *z, size_t *bytes);

/* NULL is a no-op. */
void inflater_free(Inflater *z);

#endif
