/* config — the trainer's command line (docs/design.md, "Trainer command line").
 *
 * Every flag --some-flag can also come from the environment as KUBETRAIN_SOME_FLAG;
 * flags override the environment, the environment overrides the defaults. Flags that
 * belong to the distributed layer (collective, checkpoints, index, rendezvous, shard
 * policy, lr scaling) are parsed and stored here too. */
#ifndef KT_CONFIG_H
#define KT_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "data.h"
#include "optim.h"

typedef struct {
    char model[4096];         /* built-in name, file, or inline spec */
    char dataset[32];         /* fashion-mnist | mnist */
    char data_dir[4096];
    char data[SOURCE_NAME_MAX];      /* the training SOURCE (source.h); default idx:<data_dir> */
    char eval_data[SOURCE_NAME_MAX]; /* the evaluation SOURCE; default from data, "": none */
    PixelScale pixel_scale;
    char image_feature[256]; /* tfrecord: the image's feature (image) */
    char label_feature[256]; /* tfrecord: the label's feature (label) */
    int image_shape[3];      /* tfrecord: H, W, C of raw and float images; 0s: unset */
    int data_cache_mib;      /* tfrecord: held decoded up to this size, else streamed */
    int epochs;
    int steps_per_epoch;      /* 0: one pass over this worker's shard */
    int per_worker_batch;
    int global_batch;         /* 0: per_worker_batch * workers (config_global_batch) */
    OptimizerKind optimizer;
    double lr;
    double momentum;          /* sgd / rmsprop momentum (Keras default 0) */
    int nesterov;
    int scale_lr_by_workers;
    int shuffle_buffer;
    ShardPolicy shard_policy;
    uint64_t seed;
    char collective[16];      /* auto | ring | nccl */
    char device[8];           /* auto | cpu | gpu (gpu: make GPU=1 builds only) */
    int gpus_per_worker;      /* > 1: that many ranks in this worker, one per GPU */
    int cuda_graphs;          /* replay the GPU step as a CUDA graph (default 1) */
    char checkpoint_dir[4096];
    int checkpoint_every_steps; /* 0: at the end of each epoch only */
    int keep_checkpoints;
    char metrics_file[4096];
    char initial_weights[4096]; /* Keras weights to start from (keras_import.h); "" none */
    char export_path[4096];   /* the chief's Keras export at the end (keras_export.h); "" none */
    char tensorboard_dir[4096]; /* "": <checkpoint_dir>/logs, or none without checkpoints */
    int metrics_port;         /* the chief's Prometheus GET /metrics; 0: off */
    int eval;
    int index;                /* -1: from TF_CONFIG */
    double rendezvous_timeout;/* seconds */
    double recovery_timeout;  /* live recovery: seconds survivors wait for a replacement;
                                 0: a lost peer makes every rank exit 75 (group restart) */
    int print_weights_hash;
    int threads;              /* OpenBLAS threads, 0: OpenBLAS's own choice */
    double max_model_memory_gib; /* bound on model_memory at the per-worker batch */
} Config;

/* Fills c with the defaults, then the environment, then argv[0..argc) (the options
 * after the subcommand). Returns 0, 1 when --help was asked for, or -EINVAL with one
 * line in err naming the flag (or the variable) and what was expected. */
int config_parse(Config *c, int argc, char **argv, char *err, size_t errlen);

/* The examples of one step over all `world` workers: --global-batch, or
 * --per-worker-batch x world when it is 0. */
int config_global_batch(const Config *c, int world);

/* Writes the option summary to f. */
void config_usage(FILE *f);

#endif
