/* tfrecord — TFRecord files of tf.train.Example as a source (source.h), streamed.
 *
 * At open, one pass over every file checks each record (framing, CRCs, the Example, its
 * image and label). When the examples decoded fit SourceOptions.cache_bytes, that pass
 * keeps their pixels (s->images, as an IDX source holds them) and nothing of the files.
 * Else it keeps only each label and where its record is (16 bytes), and an example is
 * read again when the pipeline wants it: from an uncompressed local file by pread, from
 * an uncompressed object by a ranged GET (a batch's records at once, or ahead of their
 * use, in order, within cache_bytes: tfrecord_hold), from a GZIP or ZLIB file or object
 * by inflating from an access point (inflater.h; ahead of use too), so memory does not
 * grow with the data; objects whose server ignores Range are held in memory as their
 * uncompressed records. Its image is decoded then, on the caller's thread.
 *
 * A TFRecord file is a sequence of records, each
 *     uint64 length, uint32 masked CRC-32C of those 8 bytes, length bytes of data,
 *     uint32 masked CRC-32C of the data                     (all little-endian)
 * and may be compressed whole as GZIP or ZLIB. Each record here is one tf.train.Example
 * (protobuf): Example.features (1) -> Features.feature (1, a map<string, Feature> of
 * entries key (1) and value (2)) -> Feature.bytes_list (1) | float_list (2) |
 * int64_list (3), each a list of values in field 1, packed or not. Fields are read in
 * any order, unknown ones skipped, and as protobuf merges: the last entry of a key wins,
 * and a Feature's values are those of its last kind. */
#ifndef KT_TFRECORD_H
#define KT_TFRECORD_H

#include <stddef.h>
#include <stdint.h>

#include "source.h"

/* CRC-32C (Castagnoli) of n bytes, and the masked form TFRecord stores:
 * ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t tfrecord_crc32c(const void *p, size_t n);
uint32_t tfrecord_masked_crc(const void *p, size_t n);

/* The records of one file's (uncompressed) bytes, in order. */
typedef struct {
    const uint8_t *buf;
    size_t len;
    size_t pos; /* where the next record starts */
} TfrecordReader;

/* The next record of r: returns 1 with its data in *data, *n (inside r->buf), 0 at the
 * end, or -EINVAL with one line in err (a truncated record, a CRC that does not match)
 * and r->pos at the record's first byte. */
int tfrecord_next(TfrecordReader *r, const uint8_t **data, size_t *n, char *err, size_t errlen);

typedef enum { TFR_MISSING = 0, TFR_BYTES_LIST, TFR_FLOAT_LIST, TFR_INT64_LIST } TfrKind;

/* One feature of an Example: its kind and its values' count; the values are read with
 * tfrecord_bytes, tfrecord_floats or tfrecord_int64s. */
typedef struct {
    TfrKind kind;
    size_t count;
    const uint8_t *p; /* the Feature message from the first field of its last kind */
    size_t n;
} TfrFeature;

/* Finds the features names[0..count) in the serialized Example ex (n bytes). Each
 * out[i] gets its feature, or kind TFR_MISSING. Returns 0, or -EINVAL with one line in
 * err when the bytes are not a well-formed Example (a truncated field, a bad varint or
 * wire type, a packed list of a size its type cannot have). */
int tfrecord_parse_example(const uint8_t *ex, size_t n, const char *const *names, size_t count,
                           TfrFeature *out, char *err, size_t errlen);

/* Value i (< f->count) of a bytes_list: *p (inside the Example) and *n. */
void tfrecord_bytes(const TfrFeature *f, size_t i, const uint8_t **p, size_t *n);
/* All f->count values of a float_list or int64_list into out. */
void tfrecord_floats(const TfrFeature *f, float *out);
void tfrecord_int64s(const TfrFeature *f, int64_t *out);

/* "bytes_list", "float_list", "int64_list" or "missing". */
const char *tfrecord_kind_name(TfrKind k);

/* Opens the TFRecord source of patterns ("PATTERN[,PATTERN...]", globs: each pattern's
 * matches sorted by name, the patterns in the order given) into s: every record of every
 * file, its image (o->image_feature) and label (o->label_feature) as source.h describes,
 * checked, and indexed in s->records (the files stay open until source_free).
 * Returns 0, or a negative errno with one line in err naming the file, the record's byte
 * offset and the feature: a pattern that matches nothing, a file that cannot be read, a
 * corrupt or truncated record, a missing or mistyped feature, an image that cannot be
 * decoded or has another shape than the first, a label outside [0, num_classes). */
int tfrecord_open(Source *s, const char *patterns, int num_classes, const SourceOptions *o,
                  char *err, size_t errlen);

/* Examples idx[0..n) of the TFRecord source s, as source_read_examples describes: their
 * records read again (a streamed file's framing and CRCs checked again; the records of
 * objects all at once, close ones in one ranged GET), their images decoded into x.
 * Reentrant. A record that is no longer what open found (the file truncated or
 * rewritten since) returns -EINVAL with one line in err naming the file and the record's
 * byte offset; an object's read returns remote_read_ranges's errors (-EAGAIN, retryable;
 * -ESTALE, the object changed). */
int tfrecord_examples(const Source *s, const size_t *idx, size_t n, PixelScale scale, float *x,
                      int32_t *y, char *err, size_t errlen);

/* 1 when s may hold records ahead (tfrecord_hold): some of its streamed files are
 * objects or compressed, and SourceOptions.cache_bytes is not 0. */
int tfrecord_holds(const Source *s);

/* Reads the records of the examples idx[0..n) that are in objects or compressed files
 * (the rest are skipped), in as few ranged GETs as fetch_objects makes of them or
 * inflated in order, and holds each until
 * tfrecord_examples takes it: the pipeline's read-ahead of its shuffle buffer (source.h,
 * source_hold_examples). Holds records in idx's order while they fit the budget
 * (SourceOptions.cache_bytes, less what is held): *taken gets how many of idx were
 * dealt with (n when all were), the rest left to be read when used. Returns 0, or
 * remote_read_ranges's error (*taken 0). Reentrant. */
int tfrecord_hold(const Source *s, const size_t *idx, size_t n, size_t *taken, char *err,
                  size_t errlen);

/* Logs how many of the examples read from objects and compressed files since the last
 * call were held when read, when any were read, and the requests made of object storage
 * since (remote_stats). tfrecord_open logs those of the open. */
void tfrecord_log_held(const Source *s);

/* Frees every record tfrecord_hold holds. */
void tfrecord_drop_held(const Source *s);

/* Closes the files of ix and frees it; NULL is a no-op. */
void tfrecord_index_free(TfrecordIndex *ix);

#endif
