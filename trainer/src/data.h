/* data — the input pipeline, with tf.data's semantics:
 *     shuffle(buffer, seed, reshuffle each epoch) -> repeat -> batch(drop remainder)
 *     -> prefetch (a background thread fills the next batches)
 *
 * The stream is a concatenation of data-epochs. Data-epoch e is an independent buffered
 * shuffle of the examples determined only by (seed, e), so the whole state of the
 * stream is the cursor (data_epoch, position): a checkpoint stores it and
 * pipeline_seek restores the exact stream. Batches run across data-epoch boundaries,
 * as with repeat() before batch(); "steps per epoch" continues one iterator.
 *
 * Sharding for world > 1 (MWMS's AutoShardPolicy):
 *   SHARD_AUTO = SHARD_DATA: every worker walks the SAME shuffled stream of the whole
 *     dataset; a step consumes global_batch = batch * world examples and rank r takes
 *     the slice [r*batch, (r+1)*batch). N workers with batch b see exactly the examples
 *     one worker with batch N*b sees.
 *   SHARD_FILE: tf.data's AutoShardPolicy.FILE: the source holds only this rank's files
 *     (SourceOptions.file_shard: files r, r + world, ...); the rank shuffles and walks
 *     them as its own stream, its slice's size per step.
 *   SHARD_OFF: every worker walks the whole dataset in its own order (seed + rank).
 * FILE and OFF give each rank a stream of its own, whose cursor differs from rank to rank:
 * a rank's place there follows from the steps taken (pipeline_cursor_at_step).
 * Deterministic for a given seed. */
#ifndef KT_DATA_H
#define KT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "source.h"

typedef enum { SHARD_AUTO = 0, SHARD_DATA, SHARD_FILE, SHARD_OFF } ShardPolicy;

/* Parses "auto", "data", "file", "off"; returns 0 or -EINVAL. */
int data_parse_shard_policy(const char *s, ShardPolicy *out);
const char *data_shard_policy_name(ShardPolicy p);

/* 1 when p gives each rank a stream of its own (FILE, OFF), 0 for the one global stream. */
int data_shard_per_rank(ShardPolicy p);

typedef struct {
    uint64_t data_epoch; /* which pass over this worker's stream */
    uint64_t position;   /* examples of that pass already consumed (by all ranks for AUTO/DATA) */
} PipelineCursor;

typedef struct {
    int batch;            /* per-worker batch */
    int global_batch;     /* examples per step over all ranks; 0: batch * world */
    size_t shuffle_buffer;/* >= 1; 1 = no shuffling */
    uint64_t seed;
    int rank, world;
    ShardPolicy policy;
    PixelScale scale;     /* uint8 values as v/255 or v */
} PipelineConfig;

typedef struct {
    float *x;            /* (size, h*w*c) as source_example makes them */
    int32_t *y;          /* (size) */
    int size;            /* this rank's slice of the step (the remainder is dropped) */
    PipelineCursor next; /* the cursor after this batch */
} Batch;

typedef struct Pipeline Pipeline;

/* Rank `rank`'s share of a step's `global` examples over `world` ranks: the examples
 * [*start, *start + size) of the step, size returned. The slices tile the step in rank
 * order and differ by at most one example; with global = b * world each is b. */
int data_slice(int global, int world, int rank, int *start);

/* A pipeline over src (borrowed; must outlive the pipeline), positioned at cursor
 * (0, 0), with its prefetch thread started. Returns 0, or -EINVAL with a line in err
 * when a rank's slice would be empty (a global batch smaller than the world) or the
 * stream cannot fill one step. Free with
 * pipeline_free. */
int pipeline_create(Pipeline **out, const Source *src, const PipelineConfig *cfg, char *err,
                    size_t errlen);

/* The next batch (waits for the prefetch thread). The batch is owned by the pipeline
 * and valid until the next call of pipeline_next, pipeline_seek or pipeline_free. */
const Batch *pipeline_next(Pipeline *p);

/* Where the stream stands after the last batch pipeline_next returned. */
PipelineCursor pipeline_cursor(const Pipeline *p);

/* Repositions the stream so that the next batch is the one that followed `c`; a position
 * past the end of a pass is the same as the one it reaches in a later pass, arrived at
 * arithmetically, however far. */
void pipeline_seek(Pipeline *p, PipelineCursor c);

/* Where this rank's stream stands after `steps` steps from the start of the run, each
 * taking this rank's share: the cursor of a per-rank stream (data_shard_per_rank), which
 * a resume and a live recovery compute for themselves since every rank's differs. */
PipelineCursor pipeline_cursor_at_step(const Pipeline *p, uint64_t steps);

/* Steps in one pass over this worker's stream (examples per pass / examples per step):
 * what --steps-per-epoch 0 means. */
size_t pipeline_steps_per_pass(const Pipeline *p);

/* Stops the thread and frees; NULL is a no-op. */
void pipeline_free(Pipeline *p);

#endif
