/* source — where the examples come from (docs/design.md, "The example interface").
 *
 * A SOURCE string names one sequence of examples, each an H x W x C image (channels
 * last, row-major) and an int32 label in [0, K):
 *     idx:DIR               DIR/train-* (training) or DIR/t10k-* (evaluation), IDX files
 *     npz:FILE[?x=KEY&y=KEY] arrays of a NumPy .npz; keys x_train/y_train (training) or
 *                           x_test/y_test (evaluation) unless given
 *     npy:IMAGES,LABELS     two NumPy .npy files
 *     tfrecord:PATTERN[,PATTERN...]  TFRecord files of tf.train.Example (globs), their
 *                           features named by SourceOptions
 * Each format is read by its own module (idx.c, npy.c, tfrecord.c); the pipeline, the
 * shuffle and the sharding see only the shape, the size and examples by position. IDX and
 * NumPy examples stay in memory as the source holds them (uint8 or float32); so do a
 * TFRecord source's, decoded, when they fit SourceOptions.cache_bytes, else it keeps
 * where each example's record is and reads it on demand (tfrecord.h). Either is
 * converted to the model's float32 one example at a time. */
#ifndef KT_SOURCE_H
#define KT_SOURCE_H

#include <stddef.h>
#include <stdint.h>

typedef enum { SOURCE_U8 = 0, SOURCE_F32 } SourceType;

/* Which examples of a source a run takes: a source file holds both for idx and npz. */
typedef enum { SOURCE_TRAIN = 0, SOURCE_EVAL } SourceRole;

/* How uint8 values become the model's float32: v/255 (unit) or v (raw). */
typedef enum { PIXEL_UNIT = 0, PIXEL_RAW } PixelScale;

#define SOURCE_NAME_MAX 4400

typedef struct TfrecordIndex TfrecordIndex;

typedef struct {
    char images_at[SOURCE_NAME_MAX]; /* the file (and key) of the images, for messages */
    char labels_at[SOURCE_NAME_MAX]; /* and of the labels */
    size_t count;
    int h, w, c;
    SourceType type;
    void *images;    /* count x h x w x c of type; NULL for a streamed TFRecord source */
    int32_t *labels; /* count, each in [0, num_classes) */
    TfrecordIndex *records; /* a streamed TFRecord source: its files and each example's
                             * record; NULL when its examples are held in images */
} Source;

/* How a TFRecord source finds its examples in each tf.train.Example. */
typedef struct {
    const char *image_feature; /* the image: bytes_list (PNG, JPEG, raw) or float_list */
    const char *label_feature; /* the label: int64_list */
    int image_shape[3];        /* H, W, C of raw bytes and float_lists; 0s: encoded images */
    /* File sharding (tf.data's AutoShardPolicy.FILE): with file_shards > 1, only the files
     * file_shard, file_shard + file_shards, ... of the source's files in its order; fewer
     * files than file_shards is an error naming both counts. An idx, npz or npy source is
     * one file. */
    int file_shard, file_shards;
    /* A TFRecord source whose examples, decoded, take at most this many bytes is held in
     * memory decoded (each image decoded once, at open); a larger one, or any with 0, is
     * streamed (tfrecord.h). */
    size_t cache_bytes;
} SourceOptions;

/* 1024 MiB: the default of cache_bytes (--data-cache-mib). */
#define SOURCE_CACHE_MIB_DEFAULT 1024

/* The defaults: features "image" and "label" (as TFDS names them), no image shape, a
 * cache of SOURCE_CACHE_MIB_DEFAULT. */
extern const SourceOptions source_default_options;

/* Checks the syntax of a SOURCE string (the scheme and its parts), without opening
 * anything. Returns 0 or -EINVAL with a line in err saying what was expected. */
int source_check_spec(const char *spec, char *err, size_t errlen);

/* The SOURCE of the evaluation examples that goes with training SOURCE spec when no
 * --eval-data is given: the same directory (idx) or file with the default keys (npz).
 * Returns 0, or -ENOENT for a source that holds one set of examples (npy, tfrecord). */
int source_eval_spec(const char *spec, char *out, size_t outlen);

/* Opens spec for role, checking every example's shape and dtype and that every label is
 * in [0, num_classes): an idx, npz or npy source is read into memory, a tfrecord source
 * held decoded or indexed (tfrecord_open); o (NULL: the defaults) is read by tfrecord
 * sources. Returns 0, or a negative errno with one line in err naming the file, key (or
 * record and feature), and what was expected. Free with source_free. */
int source_open(Source *s, const char *spec, SourceRole role, int num_classes,
                const SourceOptions *o, char *err, size_t errlen);

/* Values per example: h * w * c. */
size_t source_example_size(const Source *s);

/* Examples idx[0..n) (each < count) as the model takes them: x gets n times
 * source_example_size floats, y n labels. Reentrant: the prefetch thread and the
 * evaluation read examples at once. A streamed TFRecord source reads the records of
 * objects together (tfrecord_examples), so a batch waits on the network once. Returns 0,
 * or (a TFRecord file changed since it was opened, or cannot be read) a negative errno
 * with one line in err naming the file and the record's byte offset, or the object:
 * -EAGAIN when object storage ran out of retries (retryable). */
int source_read_examples(const Source *s, const size_t *idx, size_t n, PixelScale scale, float *x,
                         int32_t *y, char *err, size_t errlen);

/* 1 when s reads examples cheaper ahead of their use than when used: a TFRecord source
 * streamed from object storage, whose records read in source order come in a few large
 * ranged GETs where a shuffled batch's take one request each, or from GZIP or ZLIB
 * files, which inflate in order once rather than from an access point a record. The
 * pipeline then offers it each example as it enters its shuffle buffer
 * (source_hold_examples). */
int source_holds(const Source *s);

/* The pipeline's read-ahead: examples idx[0..n) (in source order) entered its shuffle
 * buffer and this worker will read them later; s reads and holds their records, within
 * its memory budget (--data-cache-mib), until source_read_examples takes each. *taken:
 * how many of idx it dealt with (n, or fewer when its budget is full: offer the rest
 * again later; an example not held is read when used, so holding changes nothing but
 * when the bytes come). Returns 0 (and *taken n for a source that does not hold), or as
 * source_read_examples. */
int source_hold_examples(const Source *s, const size_t *idx, size_t n, size_t *taken, char *err,
                         size_t errlen);

/* Frees what source_hold_examples holds (the pipeline moved elsewhere). */
void source_drop_held(const Source *s);

/* Logs how many of the examples read since the last call came from what
 * source_hold_examples held (a source that holds; else nothing). */
void source_log_held(const Source *s);

/* source_read_examples of example i alone. */
int source_read_example(const Source *s, size_t i, PixelScale scale, float *x, int32_t *y,
                        char *err, size_t errlen);

/* The exit code of the contract for source_read_examples's error rc: 75 (retryable) for
 * -EAGAIN, else 3 (bad data). */
int source_exit_code(int rc);

/* source_read_examples for the training loop: a failure exits with source_exit_code and
 * its message, as bad data found at start-up does. */
void source_examples(const Source *s, const size_t *idx, size_t n, PixelScale scale, float *x,
                     int32_t *y);

/* n values of type t (uint8 or float32) as the model's float32 into x: uint8 as v/255
 * (PIXEL_UNIT) or v (PIXEL_RAW), float32 unchanged. */
void source_to_float(const void *values, SourceType t, size_t n, PixelScale scale, float *x);

/* "uint8" or "float32". */
const char *source_type_name(SourceType t);

/* Parses "H,W,C" (each in [1, 65535]) into shape; returns 0 or -EINVAL. */
int source_parse_shape(const char *v, int shape[3]);

/* Parses "unit" or "raw"; returns 0 or -EINVAL. */
int source_parse_pixel_scale(const char *v, PixelScale *out);

/* Frees the arrays and closes a TFRecord source's files; NULL or an empty source is a
 * no-op. */
void source_free(Source *s);

#endif
