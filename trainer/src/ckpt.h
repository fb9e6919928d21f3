/* ckpt — checkpoints on the shared volume: a header (model signature, world size,
 * position in training, RNG and data cursor), the parameter arena, the optimizer state
 * arena and a checksum, written atomically (temporary name, fsync, rename, directory
 * fsync) as <dir>/ckpt-<global step>.kt, keeping the one just written and the newest
 * valid older ones, N in all; an invalid one (corrupt, truncated, another model's) is
 * moved aside to <name>.bad rather than left to be the newest. Loading takes the newest
 * valid one of the model and reports and skips those that are truncated, fail their
 * checksum or belong to another model. Valid means more than an intact file: the
 * header's fields must describe a run (an epoch that fits an int, a step in the epoch
 * and an epoch count within the global step, a data position inside one pass over the
 * training set); a file whose checksum holds but whose fields do not is corrupt like any
 * other.
 *
 * Checksum: zlib's crc32 over everything before it. The threat is a torn or bit-rotted
 * file, not an adversary, and crc32 runs several times faster than SHA-256 on these
 * CPUs (no SHA extensions), which matters for the 2% checkpoint budget; the length
 * fields are checked against the file size first, so truncation is caught exactly.
 *
 * The API takes plain pointers and sizes so it does not depend on the model's types. */
#ifndef KT_CKPT_H
#define KT_CKPT_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_FORMAT_VERSION 1
#define CKPT_SIGNATURE_MAX 256

typedef struct CkptState {
    char model_signature[CKPT_SIGNATURE_MAX]; /* NUL-terminated; describes the model */
    uint32_t world;           /* world size of the run that wrote it */
    uint64_t epoch;           /* current epoch, 0-based */
    uint64_t step_in_epoch;   /* steps done in that epoch */
    uint64_t global_step;     /* steps done in total; names the file */
    uint64_t seed;            /* the run's --seed */
    uint64_t rng_state;       /* splitmix64 state of the training RNG (dropout, ...) */
    uint64_t data_epoch;      /* data cursor: pass over the data set ... */
    uint64_t data_position;   /* ... and the position in that pass */
    uint64_t optimizer_iter;  /* optimizer step counter (Adam's t) */
} CkptState;

/* What ckpt_load_latest found. */
typedef struct CkptLoadInfo {
    char path[4096]; /* the file loaded */
    int skipped;     /* newer files skipped: corrupt, truncated or another model's */
} CkptLoadInfo;

/* Whether a training position's counters can describe a run at all: an epoch that fits
 * an int (with room for the epoch-end increment); a global step and optimizer iterations
 * that fit an int64; a step in the epoch and an epoch count that the global step covers
 * (every epoch begun took at least one step, whatever --steps-per-epoch was). A
 * checkpoint's header and a peer's state sync are both held to it. Returns 0, or
 * -EBADMSG with the field, its value and the bound in why. */
int ckpt_check_counters(uint64_t epoch, uint64_t step_in_epoch, uint64_t global_step,
                        uint64_t optimizer_iter, char *why, size_t whylen);

/* Writes a checkpoint of `st`, `params` (params_bytes) and `opt` (opt_bytes; NULL with
 * 0 when the optimizer has no state) into dir, for a run on `examples` training examples
 * (the bound of a valid data position), creating dir if needed, and removes any
 * temporary file a crashed writer left. Then it keeps `keep` (>= 1) checkpoints: the one
 * just written, never deleted, and the newest keep - 1 older ones that are valid for
 * this model (signature and arena sizes of st and the sizes given), deleting the older
 * others. Invalid ones (corrupt, truncated, another model's), every one newer than the
 * one just written and the older ones it looks at, are moved aside to <name>.bad and
 * logged, so that a corrupt or foreign file with a higher step never outlives this
 * run's checkpoints nor is the one a restart finds first; a valid newer one is left (a
 * restart resumes from it) and logged. Only the chief calls it. Returns 0 or a negative
 * errno with the reason in err, which names the file (and says "disk full" for ENOSPC
 * and EDQUOT); on failure the older checkpoints are left as they were. */
int ckpt_save(const char *dir, int keep, const CkptState *st, uint64_t examples, const void *params,
              size_t params_bytes, const void *opt, size_t opt_bytes, char *err, size_t errlen);

/* ckpt_save, unless dir already holds a valid checkpoint of this model at st's global
 * step or later: then it writes nothing, sets *newer to that step and returns 1. For
 * processes that may save at once into one shared directory, each holding the whole
 * state and perhaps a step apart (the survivors of a lost peer that give up waiting): an
 * exclusive flock on <dir>/.ckpt.lock, held from the look to the end of the write, makes
 * them take turns, so the newest state is written once and no writer's temporary is
 * removed or overwritten by another's. Returns 0 (saved), 1, or ckpt_save's negative
 * errno with err (also for the lock file, which it names). */
int ckpt_save_if_newest(const char *dir, int keep, const CkptState *st, uint64_t examples,
                        const void *params, size_t params_bytes, const void *opt, size_t opt_bytes,
                        uint64_t *newer, char *err, size_t errlen);

/* Whether dir holds an intact checkpoint (header, size and checksum; of any model) named
 * at global step `at_least` or past it: 0 with *step, the newest such, or -ENOENT (no
 * such file, no directory). Only files named at or past at_least are read, so a look
 * while there is none costs one listing of dir. */
int ckpt_newest_from(const char *dir, uint64_t at_least, uint64_t *step);

/* Loads the newest checkpoint in dir that is valid and this model's into *st, params and
 * opt, whose sizes must equal the ones saved, for a run on `examples` training examples.
 * Files that are truncated, fail the checksum, hold fields no run can have (ckpt.h's
 * top) or belong to another model (signature or arena sizes differ) are logged and
 * skipped for the previous one; it writes nothing, every rank runs it. Returns 0 on
 * success (info filled when not NULL); -ENOENT when dir has no checkpoint; -EPROTO when
 * none is this model's but some valid one is another's (the CLI exits 3; err names the
 * newest such file and the two differing values); -EBADMSG when none is valid; another
 * negative errno on an I/O error. */
int ckpt_load_latest(const char *dir, const char *model_signature, uint64_t examples, CkptState *st,
                     void *params, size_t params_bytes, void *opt, size_t opt_bytes,
                     CkptLoadInfo *info, char *err, size_t errlen);

/* The parameters alone, of a model trained with any optimizer: ckpt_load_latest's
 * search, for the newest valid checkpoint whose model signature is one of
 * signatures[0..nsig) (the model's with each optimizer, see trainer_checkpoint_signature)
 * and whose parameter arena is params_bytes; the optimizer's state is not read and the
 * data position is not bounded. The same returns, -EPROTO's err naming signatures[0]. */
int ckpt_load_params(const char *dir, const char *const *signatures, int nsig, CkptState *st,
                     void *params, size_t params_bytes, CkptLoadInfo *info, char *err,
                     size_t errlen);

#endif
