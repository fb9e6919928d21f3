/* kubetrain-trainer — one worker of a synchronous data-parallel training job.
 *
 *   kubetrain-trainer [train] [options]                  one worker (TF_CONFIG names the cluster)
 *   kubetrain-trainer launch --workers N [options]       N local workers, supervised (launch.h)
 *   kubetrain-trainer --version                          "kubetrain-trainer VERSION", as the
 *                                                        operator prints its own
 *
 * A worker: TF_CONFIG -> rendezvous with its peers -> ring collective -> restore the
 * newest checkpoint -> the chief's weights broadcast and verified by hash -> train,
 * the chief checkpointing every --checkpoint-every-steps steps, at each epoch end and
 * when stopped by SIGTERM.
 *
 * Exit codes (docs/design.md, "Exit codes"): 0 done, 2 bad usage or configuration
 * (malformed TF_CONFIG, peers that disagree or do not know the secret), 3 bad data,
 * model or checkpoint, 75 retry (peers never came or were lost, stopped by SIGTERM
 * after the checkpoint, the checkpoint or metrics volume full or failing), 128+n killed
 * by signal n. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "collective.h"
#include "config.h"
#include "launch.h"
#include "net.h"
#include "ring.h"
#include "shm.h"
#include "tfconfig.h"
#include "train.h"
#include "util.h"
#ifdef KT_GPU
#include "gpu/coll_nccl.h"
#include "gpu/gpu.h"
#include "gpu/pergpu.h"
#endif

/* trainer/trainer.mk passes the VERSION file at the top of the tree, which also tags the
 * images. */
#ifndef KT_VERSION
#error "KT_VERSION undefined: build with make (trainer/trainer.mk defines it from VERSION)"
#endif

/* Silence on a ring connection that counts as a lost peer. It must exceed the longest
 * pause of a live peer: the chief writing a checkpoint between two all-reduces. */
#define RING_IO_TIMEOUT_S 60.0

/* ---------------------------------------------------------------------------------- */
/* signals */

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t training_started;

/* SIGTERM/SIGINT: once training runs, finish the step (the flag travels with the step
 * statistics, see train.h); before that there is nothing to save, so exit 75 at once,
 * which also ends a rendezvous that waits for peers that will never come. */
static void on_stop_signal(int sig)
{
    (void)sig;
    if (!training_started) {
        static const char msg[] = "kubetrain-trainer: stopped by a signal before training "
                                  "started; exiting 75\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(KT_EXIT_RETRY);
    }
    stop_requested = 1;
}

/* ---------------------------------------------------------------------------------- */
/* collective */

#ifdef KT_GPU
/* The host as NCCL tells hosts apart: NCCL_HOSTID where set, else the host name up to its
 * first dot and the kernel's boot id; 48 bits of its hash. */
static uint64_t host_hash(void)
{
    char s[512] = "";
    const char *id = getenv("NCCL_HOSTID");
    if (id && *id) {
        snprintf(s, sizeof s, "%s", id);
    } else {
        if (gethostname(s, 256) != 0) s[0] = '\0';
        s[255] = '\0';
        s[strcspn(s, ".")] = '\0';
        FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
        if (f) {
            size_t n = strlen(s);
            if (!fgets(s + n, (int)(sizeof s - n), f)) s[n] = '\0';
            fclose(f);
        }
    }
    char hex[65];
    util_sha256_hex(s, strlen(s), hex);
    hex[12] = '\0';
    return strtoull(hex, NULL, 16);
}

/* Every rank tells the others whether it trains on a CUDA device and which GPU that is,
 * as NCCL tells GPUs apart (host_hash and the PCI bus id): ranks on GPUs and ranks on
 * CPUs step through different collectives, and NCCL refuses two ranks on one GPU. The
 * answers travel over c as 16-bit pieces of a sum (exact in floats), so every rank comes
 * to the same conclusion: *gpuless the first rank on the CPU, *gpuful the first on a
 * device, *a < *b the first two ranks on one GPU; -1 where there is none. */
static int gpu_census(Collective *c, int device, int *gpuless, int *gpuful, int *a, int *b,
                      char *err, size_t errlen)
{
    enum { PIECES = 7 }; /* has a device; the host's hash in 3; PCI domain, bus, device */
    *gpuless = *gpuful = *a = *b = -1;
    const size_t n = (size_t)c->world * PIECES;
    float *all = calloc(n, sizeof *all);
    if (!all) {
        snprintf(err, errlen, "out of memory for %d ranks' GPUs", c->world);
        return -ENOMEM;
    }
    float *mine = all + (size_t)c->rank * PIECES;
    int pci[3], rc = device >= 0 ? gpu_device_bus_id(device, pci, err, errlen) : 0;
    if (!rc && device >= 0) {
        const uint64_t h = host_hash();
        mine[0] = 1.0f;
        for (int k = 0; k < 3; k++) {
            mine[1 + k] = (float)((h >> (16 * k)) & 0xffff);
            mine[4 + k] = (float)(pci[k] & 0xffff);
        }
    }
    if (!rc) rc = coll_allreduce_sum(c, all, n, err, errlen);
    for (int i = c->world - 1; !rc && i >= 0; i--)
        *(all[(size_t)i * PIECES] == 0.0f ? gpuless : gpuful) = i;
    for (int i = 0; !rc && *gpuless < 0 && *a < 0 && i < c->world; i++)
        for (int j = i + 1; j < c->world && *a < 0; j++)
            if (!memcmp(all + (size_t)i * PIECES, all + (size_t)j * PIECES, PIECES * sizeof *all))
                *a = i, *b = j;
    free(all);
    return rc;
}
#endif

/* Forms the collective of this worker: the local one for a world of one, otherwise the
 * TCP ring after an authenticated rendezvous. Exits with the contract's code on error. */
static Collective *connect_collective(const Config *cfg, const TfConfig *tf)
{
    char err[1024];
    /* nccl: asked for, or auto on a GPU (trainer_pick_device, the same choice the
     * trainer makes); a world of one needs no communicator unless asked for. */
    int device, nccl = !strcmp(cfg->collective, "nccl");
    if (trainer_pick_device(cfg, tf->rank, &device, err, sizeof err))
        util_fail(KT_EXIT_USAGE, "%s", err);
#ifdef KT_GPU
    if (nccl && device < 0)
        util_fail(KT_EXIT_USAGE, "--collective nccl: needs a CUDA device (--device %s found none)",
                  cfg->device);
    const int asked = nccl;
    nccl |= !strcmp(cfg->collective, "auto") && device >= 0 && tf->world > 1;
    if (nccl && tf->world == 1) {
        Collective *c =
            coll_nccl_create(coll_local_create(), device, RING_IO_TIMEOUT_S, err, sizeof err);
        if (!c) util_fail(KT_EXIT_RETRY, "%s", err);
        util_log("NCCL communicator of 1 rank on CUDA device %d ready", device);
        return c;
    }
#else
    if (nccl)
        util_fail(KT_EXIT_USAGE, "--collective nccl: this trainer was built without NCCL (build "
                                 "with make GPU=1)");
#endif
    if (tf->world == 1) return coll_local_create();

    /* The rendezvous compares the model's signature, so build the model once for it. */
    Model *m;
    int code, rc = trainer_create_model(&m, cfg, &code, err, sizeof err);
    if (rc) util_fail(code, "%s", err);
    unsigned char *secret;
    size_t secret_len;
    if (net_secret_load(&secret, &secret_len, err, sizeof err)) util_fail(KT_EXIT_USAGE, "%s", err);

    /* Listen where TF_CONFIG says this worker is (127.0.0.1 under launch), not on every
     * interface; net_listen_task falls back to them, saying so, when that name is not an
     * address of this machine (yet). */
    int lfd, port;
    if (net_listen_task(tf->peers[tf->rank].host, tf->peers[tf->rank].port, 0, &lfd, &port, err,
                        sizeof err))
        util_fail(KT_EXIT_RETRY, "%s", err);
    NetJob job = {.world = tf->world,
                  .rank = tf->rank,
                  .model_signature = m->signature,
                  .global_batch = (uint64_t)cfg->per_worker_batch * (uint64_t)tf->world,
                  .dataset = cfg->dataset};
    NetOptions no = {.rendezvous_timeout_s = cfg->rendezvous_timeout,
                     .handshake_timeout_s = 10,
                     .secret = secret,
                     .secret_len = secret_len};
    NetRing ring;
    double t0 = util_now();
    rc = net_rendezvous(lfd, tf, &job, &no, &ring, err, sizeof err);
    close(lfd);
    free(secret);
    model_free(m);
    /* Only a peer that proved the job secret and disagrees about the job is a
     * configuration error; whatever else answered or failed to (a stale address, another
     * job's worker, a wrong secret) may be gone after a restart, so it is retryable. */
    if (rc == -EPROTO) util_fail(KT_EXIT_USAGE, "rendezvous: %s", err);
    if (rc) util_fail(KT_EXIT_RETRY, "rendezvous: %s", err);
    util_log("rendezvous done in %.2fs: receiving from %s, sending to %s", util_now() - t0,
             ring.prev_name, ring.next_name);
    RingOptions ro = {.io_timeout_s = RING_IO_TIMEOUT_S};
    /* the ring, with its shared-memory path for ranks on one host (shm.h) */
    Collective *c = shm_wrap(ring_create(tf->rank, tf->world, &ring, &ro));
#ifdef KT_GPU
    /* Every rank takes part, with a device or not, so that all choose alike. */
    int gpuless, gpuful, a, b;
    if (gpu_census(c, device, &gpuless, &gpuful, &a, &b, err, sizeof err))
        util_fail(KT_EXIT_RETRY, "comparing the ranks' devices: %s", err);
    if (gpuless >= 0 && gpuful >= 0)
        util_fail(KT_EXIT_USAGE,
                  "rank %d trains on the CPU and rank %d on a CUDA device: the "
                  "workers train all on GPUs or all on CPUs (give every worker a GPU, or run "
                  "them all with --device cpu)",
                  gpuless, gpuful);
    if (nccl && a >= 0 && asked)
        util_fail(KT_EXIT_USAGE,
                  "--collective nccl: ranks %d and %d are on one GPU, and NCCL "
                  "needs a GPU of its own for each rank (this host has %d): run at most one "
                  "worker per GPU, or use --collective ring",
                  a, b, gpu_device_count(NULL, 0));
    if (nccl && a >= 0) {
        util_log("ranks %d and %d are on one GPU, and NCCL needs a GPU of its own for each "
                 "rank: the all-reduce goes over the ring",
                 a, b);
        nccl = 0;
    }
    /* The ring carries the chief's NCCL id (it is authenticated), then broadcasts. */
    if (nccl) {
        t0 = util_now();
        if (!(c = coll_nccl_create(c, device, RING_IO_TIMEOUT_S, err, sizeof err)))
            util_fail(KT_EXIT_RETRY, "%s", err);
        util_log("NCCL communicator of %d ranks on CUDA device %d ready in %.2fs", tf->world,
                 device, util_now() - t0);
    }
#endif
    return c;
}

/* ---------------------------------------------------------------------------------- */
/* checkpoints */

/* The identity a checkpoint is matched against: the model's signature and the
 * optimizer (whose state it holds), or their hash when that is too long to store. */
static void checkpoint_signature(const Trainer *t, char out[CKPT_SIGNATURE_MAX])
{
    int n = snprintf(out, CKPT_SIGNATURE_MAX, "%s|optimizer=%s", t->model->signature,
                     optim_kind_name(t->cfg.optimizer));
    if (n >= CKPT_SIGNATURE_MAX)
        snprintf(out, CKPT_SIGNATURE_MAX, "sha256:%s|optimizer=%s", t->model->signature_sha256,
                 optim_kind_name(t->cfg.optimizer));
}

/* Saves a checkpoint; on error sets *exit_code: 75 for trouble with the storage or the
 * device that a restart may not meet (util_io_retryable), else 3. */
static int checkpoint_save(Trainer *t, int *exit_code, char *err, size_t errlen)
{
    CkptState cs;
    memset(&cs, 0, sizeof cs);
    checkpoint_signature(t, cs.model_signature);
    cs.world = (uint32_t)t->coll->world;
    cs.epoch = (uint64_t)t->st.epoch;
    cs.step_in_epoch = (uint64_t)t->st.step_in_epoch;
    cs.global_step = (uint64_t)t->st.global_step;
    cs.seed = t->cfg.seed;
    cs.rng_state = t->cfg.seed; /* dropout masks derive from (seed, global step, rank) */
    cs.data_epoch = t->st.cursor.data_epoch;
    cs.data_position = t->st.cursor.position;
    cs.optimizer_iter = (uint64_t)t->opt->iterations;
    double t0 = util_now();
    int rc = trainer_sync_host(t, err, errlen);
    if (rc) {
        *exit_code = KT_EXIT_RETRY;
        return rc;
    }
    rc = ckpt_save(t->cfg.checkpoint_dir, t->cfg.keep_checkpoints, &cs, t->model->params,
                   t->model->num_params * sizeof(float), t->opt->state,
                   t->opt->state_floats * sizeof(float), err, errlen);
    if (rc) {
        *exit_code = util_io_retryable(rc) ? KT_EXIT_RETRY : KT_EXIT_DATA;
        return rc;
    }
    util_log("checkpoint at step %ld saved in %.3fs", t->st.global_step, util_now() - t0);
    t->ckpt_step = t->st.global_step;
    t->ckpt_time = util_wall();
    metrics_checkpoint(t->metrics, t->ckpt_step, t->ckpt_time);
    util_termination_progress(t->st.global_step, t->ckpt_step);
    return 0;
}

/* The after-step hook of the chief: a checkpoint every --checkpoint-every-steps steps,
 * at the end of every epoch, and when the run is being stopped. */
static int checkpoint_hook(Trainer *t, void *ctx, int *exit_code, char *err, size_t errlen)
{
    (void)ctx;
    int every = t->cfg.checkpoint_every_steps;
    if ((every > 0 && t->st.global_step % every == 0) ||
        t->st.step_in_epoch == t->steps_per_epoch || t->stopping)
        return checkpoint_save(t, exit_code, err, errlen);
    return 0;
}

/* What the chief broadcasts before training: where the run stands. */
typedef struct {
    uint64_t restored, epoch, step_in_epoch, global_step, data_epoch, position, opt_iter;
    char hash[65];
} StartState;

/* Loads the newest valid checkpoint (every rank, from the shared directory), then makes
 * every rank start from the chief's parameters, optimizer state and position, verified
 * by hash. Exits with the contract's code on error. */
static void restore_and_sync(Trainer *t)
{
    char err[1024], sig[CKPT_SIGNATURE_MAX];
    Model *m = t->model;
    const size_t pbytes = m->num_params * sizeof(float);
    const size_t obytes = t->opt->state_floats * sizeof(float);
    StartState ss;
    memset(&ss, 0, sizeof ss);
    TrainState st = {0};

    if (t->cfg.checkpoint_dir[0]) {
        CkptState cs;
        CkptLoadInfo info;
        checkpoint_signature(t, sig);
        int rc = ckpt_load_latest(t->cfg.checkpoint_dir, sig, &cs, m->params, pbytes, t->opt->state,
                                  obytes, &info, err, sizeof err);
        if (rc == -EPROTO) util_fail(KT_EXIT_DATA, "checkpoint of another model: %s", err);
        if (rc && rc != -ENOENT)
            util_fail(rc == -EBADMSG ? KT_EXIT_DATA : KT_EXIT_RETRY, "checkpoint: %s", err);
        if (!rc) {
            if (info.skipped)
                util_log("skipped %d newer checkpoint(s) that failed validation or belong to "
                         "another model",
                         info.skipped);
            ss.restored = 1;
            struct stat sb;
            t->ckpt_time = stat(info.path, &sb) == 0 ? (double)sb.st_mtime : util_wall();
            ss.epoch = cs.epoch, ss.step_in_epoch = cs.step_in_epoch;
            ss.global_step = cs.global_step;
            ss.data_epoch = cs.data_epoch, ss.position = cs.data_position;
            ss.opt_iter = cs.optimizer_iter;
            if (cs.seed != t->cfg.seed)
                util_log("warning: %s was written with --seed %llu, this run has --seed %llu",
                         info.path, (unsigned long long)cs.seed, (unsigned long long)t->cfg.seed);
            /* Another world size: weights and optimizer carry over; the data is
             * re-sharded. With auto/data sharding every rank walks one global stream whose
             * cursor counts examples of all ranks, so it continues at the same example;
             * with file/off sharding the per-rank streams change, so the new shards start
             * at the beginning of the same data epoch. */
            if (cs.world != (uint32_t)t->coll->world) {
                int global = t->cfg.shard_policy == SHARD_AUTO || t->cfg.shard_policy == SHARD_DATA;
                if (!global) ss.position = 0;
                util_log("%s was written by %u workers, this run has %d: weights and optimizer "
                         "restored, data re-sharded (%s)",
                         info.path, cs.world, t->coll->world,
                         global ? "the global stream continues at the same example"
                                : "the new shards start the same data epoch from the beginning");
            }
            if (t->coll->rank == 0)
                util_log("resuming from %s: epoch %llu, step %llu of the epoch, global step %llu",
                         info.path, (unsigned long long)cs.epoch + 1,
                         (unsigned long long)cs.step_in_epoch, (unsigned long long)cs.global_step);
        } else if (t->coll->rank == 0) {
            util_log("no checkpoint in %s: starting from scratch", t->cfg.checkpoint_dir);
        }
    }
    if (t->coll->world > 1) {
        char mine[65];
        util_sha256_hex(m->params, pbytes, mine);
        if (t->coll->rank == 0) memcpy(ss.hash, mine, sizeof mine);
        int rc = coll_broadcast(t->coll, &ss, sizeof ss, 0, err, sizeof err);
        if (!rc) rc = coll_broadcast(t->coll, m->params, pbytes, 0, err, sizeof err);
        if (!rc && obytes) rc = coll_broadcast(t->coll, t->opt->state, obytes, 0, err, sizeof err);
        if (rc) util_fail(KT_EXIT_RETRY, "initial broadcast from the chief: %s", err);
        char got[65];
        util_sha256_hex(m->params, pbytes, got);
        ss.hash[64] = '\0';
        if (strcmp(got, ss.hash) != 0)
            util_fail(KT_EXIT_RETRY,
                      "initial weights differ from the chief's after the broadcast: "
                      "sha256 %s here, %s at rank 0",
                      got, ss.hash);
        if (t->coll->rank != 0 && strcmp(mine, ss.hash) != 0)
            util_log("warning: this rank's initial weights (sha256 %.12s) differed from the "
                     "chief's (%.12s); training from the chief's",
                     mine, ss.hash);
        util_log("initial weights verified: sha256 %s", got);
    }
    st.epoch = (int)ss.epoch;
    st.step_in_epoch = (long)ss.step_in_epoch;
    st.global_step = (long)ss.global_step;
    st.cursor.data_epoch = ss.data_epoch;
    st.cursor.position = ss.position;
    t->opt->iterations = (int64_t)ss.opt_iter;
    if (ss.restored) t->ckpt_step = st.global_step;
    trainer_seek(t, &st);
}

/* ---------------------------------------------------------------------------------- */
/* train */

static int cmd_train(int argc, char **argv)
{
    Config cfg;
    char err[1024];
    int code;
    int rc = config_parse(&cfg, argc, argv, err, sizeof err);
    if (rc == 1) {
        config_usage(stdout);
        return KT_EXIT_OK;
    }
    if (rc) util_fail(KT_EXIT_USAGE, "%s", err);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (cfg.gpus_per_worker > 1) {
#ifdef KT_GPU
        return pergpu_main(cfg.gpus_per_worker, cfg.index, argc, argv);
#else
        util_fail(KT_EXIT_USAGE,
                  "--gpus-per-worker %d: this trainer was built without CUDA "
                  "(build it with make GPU=1)",
                  cfg.gpus_per_worker);
#endif
    }
    util_on_stop_signals(on_stop_signal);

    TfConfig tf;
    if (tfconfig_parse(getenv("TF_CONFIG"), cfg.index, &tf, err, sizeof err))
        util_fail(KT_EXIT_USAGE, "TF_CONFIG: %s", err);
    if (tf.world > 1) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "kubetrain-trainer[rank %d]", tf.rank);
        util_set_log_prefix(prefix);
        /* the chief alone writes summaries, as in MWMS */
        if (tf.rank != 0) cfg.metrics_file[0] = '\0';
    }
    Collective *coll = connect_collective(&cfg, &tf);
    tfconfig_free(&tf);

    Trainer *t;
    if (trainer_create(&t, &cfg, coll, &code, err, sizeof err)) util_fail(code, "%s", err);
    restore_and_sync(t);
    util_termination_progress(t->st.global_step, t->ckpt_step);
    if (coll->rank == 0 && cfg.checkpoint_dir[0]) t->after_step = checkpoint_hook;
    t->stop_request = &stop_requested;
    training_started = 1;
    if (stop_requested) util_fail(KT_EXIT_RETRY, "stopped by a signal before the first step");
    if (trainer_run(t, &code, err, sizeof err)) util_fail(code, "%s", err);

    char hash[65];
    trainer_weights_hash(t, hash);
    if (cfg.print_weights_hash) printf("weights-sha256: %s\n", hash);
    cJSON *res = cJSON_CreateObject();
    cJSON_AddNumberToObject(res, "step", (double)t->st.global_step);
    cJSON_AddNumberToObject(res, "epoch", t->st.epoch);
    cJSON_AddNumberToObject(res, "loss", t->last_loss);
    cJSON_AddNumberToObject(res, "accuracy", t->last_accuracy);
    cJSON_AddStringToObject(res, "weights_sha256", hash);
    char *json = cJSON_PrintUnformatted(res);
    if (json) util_termination_write(json);
    free(json);
    cJSON_Delete(res);
    trainer_free(t);
    coll_destroy(coll);
    return KT_EXIT_OK;
}

int main(int argc, char **argv)
{
    /* anywhere among the arguments, as kubetrain-operator takes it */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--version")) {
            printf("kubetrain-trainer %s\n", KT_VERSION);
            return KT_EXIT_OK;
        }
    if (argc > 1 && !strcmp(argv[1], "train")) return cmd_train(argc - 2, argv + 2);
    if (argc > 1 && !strcmp(argv[1], "launch")) return launch_main(argc - 2, argv + 2, argv[0]);
    if (argc > 1 && strncmp(argv[1], "-", 1) != 0)
        util_fail(KT_EXIT_USAGE, "%s: unknown command (expected train or launch)", argv[1]);
    return cmd_train(argc - 1, argv + 1);
}
