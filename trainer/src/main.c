/* kubetrain-trainer — one worker of a synchronous data-parallel training job.
 *
 *   kubetrain-trainer [train] [options]                  one worker (TF_CONFIG names the cluster)
 *   kubetrain-trainer launch --workers N [options]       N local workers, supervised (launch.h)
 *   kubetrain-trainer export --checkpoint-dir DIR --model SPEC --out FILE
 *                                                        a job's newest checkpoint as Keras
 *                                                        files (keras_export.h)
 *   kubetrain-trainer --version                          "kubetrain-trainer VERSION", as the
 *                                                        operator prints its own
 *   kubetrain-trainer --print-cpu                        "gemm: " and the kernels it runs
 *
 * A worker: TF_CONFIG -> rendezvous with its peers -> ring collective -> state sync
 * (the newest checkpoint, or a running peer's state for a replacement, broadcast and
 * verified by hash) -> train, the chief checkpointing every --checkpoint-every-steps
 * steps, at each epoch end and when stopped by SIGTERM. With --recovery-timeout > 0 a
 * lost peer does not end the run: the survivors keep the listener, wait for its
 * replacement in a new rendezvous and hand it their state (recover, state_sync;
 * docs/design.md, "Live recovery").
 *
 * Exit codes (docs/design.md, "Exit codes"): 0 done, 2 bad usage or configuration
 * (malformed TF_CONFIG, peers that disagree or do not know the secret), 3 bad data,
 * model or checkpoint, 75 retry (peers never came or were lost — with live recovery:
 * no replacement within --recovery-timeout, "recoveryTimedOut" in the termination
 * message —, stopped by SIGTERM after the checkpoint, the checkpoint or metrics volume
 * full or failing), 128+n killed by signal n. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "collective.h"
#include "config.h"
#include "gemm.h"
#include "keras_export.h"
#include "keras_import.h"
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
/* SIGUSR1 (launch rewrote KUBETRAIN_MEMBERS_FILE), or the watch of that file saw it name
 * other workers (members_look): a shrink in recover, a regroup while training. */
static volatile sig_atomic_t members_changed;
/* Ends a live recovery's rendezvous wait: set with either flag above. */
static volatile sig_atomic_t rendezvous_wake;
/* The ring is being set up (attached and its state synced, after a rendezvous): a
 * rank+1 that closes its connection meanwhile left the ring (RingOptions.watch_next). */
static volatile int ring_setup;

/* SIGTERM/SIGINT: once training runs, finish the step (the flag travels with the step
 * statistics, see train.h) or, for a survivor waiting for a replacement, end the wait
 * (the rendezvous polls the flag, see recover), and save; before that there is nothing
 * to save, so exit 75 at once, which also ends a rendezvous that waits for peers that
 * will never come. */
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
    rendezvous_wake = 1;
}

static void on_members_signal(int sig)
{
    (void)sig;
    members_changed = 1;
    rendezvous_wake = 1;
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

/* What a worker keeps to form its ring again after a lost peer (live recovery,
 * docs/design.md): its rendezvous listener, open for the whole run, the cluster and the
 * secret, and where it stands among the ring generations. */
typedef struct Recovery {
    int on;                /* --recovery-timeout > 0 on the TCP ring (not NCCL) */
    int listen_fd;         /* -1 when closed */
    TfConfig tf;           /* the ring's workers: TF_CONFIG's, or the members named since */
    /* The cluster KUBETRAIN_MEMBERS_FILE indexes: TF_CONFIG's workers, then those past
     * it whose addresses a members list gave (a job grown past its TF_CONFIG; an index
     * past TF_CONFIG that no list gave has an empty host) */
    TfConfig all;
    int tf_workers;        /* TF_CONFIG's workers, the first of all.peers */
    int *idx;              /* tf's workers as TF_CONFIG indices, ascending (tf.world) */
    int index;             /* this worker's index in it */
    char *signature;       /* the model's, compared at the rendezvous */
    unsigned char *secret;
    size_t secret_len;
    uint32_t generation;   /* of the last ring formed (state synced); 0: none yet */
    int has_state;         /* parameters and position of a run in progress */
    uint64_t incarnation;  /* this process (NetJob.incarnation) */
    uint64_t *last_ring;   /* the incarnations of the last ring formed, by rank */
    int last_ring_n;
    const char *members_path; /* KUBETRAIN_MEMBERS_FILE; NULL: unset */
    struct stat members_seen; /* that file when last read (members_look) */
    int members_looked;       /* members_seen is set */
    int *named, named_n;      /* the list it held then (NET_MEMBERS_MAX room); 0: none read */
    char *named_text;         /* that list as the file held it (regroup sends it on) */
} Recovery;

/* The bytes a members list may hold: every index the handshake's bitmap can name, each
 * with an address. */
#define MEMBERS_TEXT_MAX ((size_t)NET_MEMBERS_MAX * (TFCONFIG_HOST_MAX + 24))

/* Takes `addr`, the address `source` gives TF_CONFIG index i, into r->all. An index
 * TF_CONFIG names keeps its address there: another one exits 2 naming both. */
static void members_learn(Recovery *r, int i, const TfPeer *addr, const char *source)
{
    if (i < r->tf_workers) {
        const TfPeer *t = &r->all.peers[i];
        if (strcmp(t->host, addr->host) != 0 || t->port != addr->port)
            util_fail(KT_EXIT_USAGE,
                      "%s gives TF_CONFIG index %d the address %s:%d, and TF_CONFIG %s:%d; "
                      "expected TF_CONFIG's address or none for an index TF_CONFIG names",
                      source, i, addr->host, addr->port, t->host, t->port);
        return;
    }
    if (i >= r->all.world) {
        TfPeer *p = xcalloc((size_t)i + 1, sizeof *p);
        memcpy(p, r->all.peers, (size_t)r->all.world * sizeof *p);
        free(r->all.peers);
        r->all.peers = p, r->all.world = i + 1;
    }
    r->all.peers[i] = *addr;
}

/* Parses the members list `text` that `source` holds (docs/design.md, "Trainer
 * environment"): TF_CONFIG worker indices in ascending order, separated by commas
 * ("0,2"; blanks around them are fine), each index past this worker's TF_CONFIG followed
 * by its address ("0,1,2=job-worker-2.job-worker:2222"), which r->all takes. Writes the
 * indices into idx (NET_MEMBERS_MAX room) and returns their count. A text that is not
 * such a list, names an index past TF_CONFIG without its address, or leaves this worker
 * out exits 2 naming source. */
static int members_parse(Recovery *r, const char *text, const char *source, int *idx)
{
    int n = 0, self = 0;
    const char *p = text;
    for (;;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= NET_MEMBERS_MAX || (n > 0 && v <= idx[n - 1]))
            util_fail(KT_EXIT_USAGE,
                      "%s: expected TF_CONFIG worker indices below %d in ascending order, "
                      "separated by commas, an index past TF_CONFIG's %d workers with its "
                      "address (%d=HOST:PORT); got \"%.64s\"",
                      source, NET_MEMBERS_MAX, r->tf_workers, r->tf_workers, text);
        if (*end == '=') {
            char addr[TFCONFIG_HOST_MAX + 16], why[512];
            TfPeer peer = {.port = 0};
            const size_t len = strcspn(end + 1, ", \t\r\n");
            if (len >= sizeof addr)
                util_fail(KT_EXIT_USAGE,
                          "%s: the address of TF_CONFIG index %ld is longer than "
                          "%zu characters",
                          source, v, sizeof addr - 1);
            memcpy(addr, end + 1, len);
            addr[len] = '\0';
            if (tfconfig_parse_address(addr, peer.host, sizeof peer.host, &peer.port, why,
                                       sizeof why))
                util_fail(KT_EXIT_USAGE, "%s: the address of TF_CONFIG index %ld: %s", source, v,
                          why);
            members_learn(r, (int)v, &peer, source);
            end += 1 + len;
        } else if (v >= r->tf_workers) {
            util_fail(KT_EXIT_USAGE,
                      "%s names TF_CONFIG index %ld without its address, and this worker's "
                      "TF_CONFIG names %d workers; expected %ld=HOST:PORT, the address the new "
                      "worker's TF_CONFIG gives it",
                      source, v, r->tf_workers, v);
        }
        self |= v == r->index;
        idx[n++] = (int)v;
        p = end + strspn(end, " \t\r\n");
        if (*p != ',') break;
        p++;
    }
    if (*p) util_fail(KT_EXIT_USAGE, "%s: unexpected \"%.32s\" after the list", source, p);
    if (!self)
        util_fail(KT_EXIT_USAGE, "%s leaves this worker (TF_CONFIG index %d) out", source,
                  r->index);
    return n;
}

/* The workers KUBETRAIN_MEMBERS_FILE (r->members_path) names, by members_parse, into idx
 * (NET_MEMBERS_MAX room), and the file's text into *text (the caller frees it); returns
 * their count, or 0 when the file cannot be read now (logged; it is replaced whole, by a
 * rename or the kubelet's symlink swap, so a later look finds it whole). A file longer
 * than MEMBERS_TEXT_MAX exits 2. */
static int read_members(Recovery *r, int *idx, char **text)
{
    const char *path = r->members_path;
    FILE *f = fopen(path, "r");
    if (!f) {
        util_log("elastic: cannot read KUBETRAIN_MEMBERS_FILE %s: %s", path, strerror(errno));
        return 0;
    }
    char *buf = xmalloc(MEMBERS_TEXT_MAX + 1);
    size_t got = fread(buf, 1, MEMBERS_TEXT_MAX, f);
    const int longer = got == MEMBERS_TEXT_MAX && fgetc(f) != EOF;
    fclose(f);
    buf[got] = '\0';
    if (longer)
        util_fail(KT_EXIT_USAGE,
                  "KUBETRAIN_MEMBERS_FILE %s: longer than a list of %d worker indices with their "
                  "addresses can be",
                  path, NET_MEMBERS_MAX);
    char source[PATH_MAX + 32];
    snprintf(source, sizeof source, "KUBETRAIN_MEMBERS_FILE %s", path);
    int n = members_parse(r, buf, source, idx);
    *text = xstrdup(buf);
    free(buf);
    return n;
}

/* Whether idx[0..n) are r's ring already. */
static int same_members(const Recovery *r, const int *idx, int n)
{
    return n == r->tf.world && !memcmp(idx, r->idx, (size_t)n * sizeof *idx);
}

/* idx[0..n) as "0,2,3", in a string the caller frees. */
static char *indices_text(const int *idx, int n)
{
    const size_t cap = 12 * (size_t)n + 1;
    char *list = xcalloc(cap, 1);
    for (size_t k = 0, len = 0; k < (size_t)n; k++, len = strlen(list))
        snprintf(list + len, cap - len, "%s%d", k ? "," : "", idx[k]);
    return list;
}

/* Makes the workers idx[0..n) (TF_CONFIG indices, ascending, this worker among them)
 * r's ring for its next rendezvous: they keep their TF_CONFIG order, so the lowest index
 * present is rank 0, the chief (docs/design.md, "Elastic jobs"). `joining`: this worker
 * starts, added back to a running ring (the log says so rather than a resize). */
static void members_set(Recovery *r, const int *idx, int n, int joining)
{
    TfConfig next = {.world = n, .peers = xcalloc((size_t)n, sizeof *next.peers)};
    for (int k = 0; k < n; k++) {
        next.peers[k] = r->all.peers[idx[k]];
        if (idx[k] == r->index) next.rank = k;
    }
    char *list = indices_text(idx, n);
    if (joining)
        util_log("elastic: joining the ring of %d workers (TF_CONFIG indices %s) as rank %d", n,
                 list, next.rank);
    else
        util_log("elastic: %s from %d to %d workers (TF_CONFIG indices %s) in generation %u; "
                 "this worker (index %d) is rank %d",
                 n < r->tf.world ? "shrinking" : "growing", r->tf.world, n, list, r->generation + 1,
                 r->index, next.rank);
    free(list);
    tfconfig_free(&r->tf);
    r->tf = next;
    free(r->idx);
    r->idx = xcalloc((size_t)n, sizeof *r->idx);
    memcpy(r->idx, idx, (size_t)n * sizeof *idx);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "kubetrain-trainer[rank %d]", next.rank);
    util_set_log_prefix(prefix);
}

/* The watch of KUBETRAIN_MEMBERS_FILE (docs/design.md, "Elastic jobs"): stats the file,
 * following the link (the kubelet swaps a `..data` symlink in a downwardAPI volume,
 * launch renames a file over it), and reads it when its device, inode, size or mtime
 * changed since it was last read, or when `force`. Returns 1 when it read a list other
 * than the one read before (r->named holds the newest), else 0. One stat when nothing
 * changed, so it runs at every step. */
static int members_look(Recovery *r, int force)
{
    struct stat st;
    if (!r->members_path) return 0;
    if (stat(r->members_path, &st) != 0) {
        if (force)
            util_log("elastic: cannot read KUBETRAIN_MEMBERS_FILE %s: %s", r->members_path,
                     strerror(errno));
        return 0;
    }
    const struct stat *o = &r->members_seen;
    if (!force && r->members_looked && st.st_dev == o->st_dev && st.st_ino == o->st_ino &&
        st.st_size == o->st_size && st.st_mtim.tv_sec == o->st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == o->st_mtim.tv_nsec)
        return 0;
    r->members_seen = st, r->members_looked = 1;
    char *text = NULL;
    int *idx = xcalloc(NET_MEMBERS_MAX, sizeof *idx), n = read_members(r, idx, &text);
    const int changed =
        n > 0 && (n != r->named_n || memcmp(idx, r->named, (size_t)n * sizeof *idx) != 0);
    if (changed) memcpy(r->named, idx, (size_t)n * sizeof *idx), r->named_n = n;
    /* the newest text of the list held, the addresses too */
    if (n > 0) free(r->named_text), r->named_text = text, text = NULL;
    free(text);
    free(idx);
    return changed;
}

/* Takes the list KUBETRAIN_MEMBERS_FILE named last (members_look) as r's ring when it
 * names other workers than the ring holds (a shrink or a growth; `joining` as
 * members_set). Returns 1 when it did, 0 when r is left as it is. */
static int members_take(Recovery *r, int joining)
{
    if (r->named_n == 0 || same_members(r, r->named, r->named_n)) return 0;
    members_set(r, r->named, r->named_n, joining);
    return 1;
}

/* The step's watch (Trainer.regroup_poll): a list other than the last one asks for a
 * regroup after this step, as SIGUSR1 does. */
static void members_watch(void *ctx)
{
    Recovery *r = ctx;
    if (!members_look(r, 0)) return;
    members_changed = 1;
    /* One line a change, so that a resize the log does not show is told apart from one
     * this worker never saw. */
    char *list = indices_text(r->named, r->named_n);
    util_log("elastic: KUBETRAIN_MEMBERS_FILE names %s now; the ring takes it up after this step%s",
             list, r->tf.rank == 0 ? "" : " once rank 0's file says so too");
    free(list);
}

/* The rendezvous's watch (NetOptions.poll): a new list that is not the ring ends the
 * rendezvous, for reform to take it up, as SIGUSR1 does. */
static int members_wake(void *ctx)
{
    Recovery *r = ctx;
    if (!members_look(r, 0) || same_members(r, r->named, r->named_n)) return 0;
    members_changed = 1;
    return 1;
}

/* While the first rendezvous of an elastic worker runs (first_ring): the checkpoint
 * directory and the run's last global step (--epochs x --steps-per-epoch), a checkpoint
 * of which there says the run is over (NULL: not looked for); and the step of such a
 * checkpoint once found, else -1. */
static const char *finish_dir;
static uint64_t finish_step;
static long finished_at = -1;

/* The poll of a watched rendezvous (form_ring): a changed members file (members_wake) or,
 * in the first rendezvous, once a second, the run found over: a worker added back at the
 * last steps, whose ring took no more growth and finished (docs/design.md, "Elastic
 * jobs"). Nonzero ends the rendezvous. */
static int rendezvous_poll(void *ctx)
{
    static double looked;
    uint64_t step;
    if (finish_dir && util_now() - looked >= 1) {
        looked = util_now();
        if (ckpt_newest_from(finish_dir, finish_step, &step) == 0) {
            finished_at = (long)step;
            return 1;
        }
    }
    return members_wake(ctx);
}

/* One rendezvous of r's worker within timeout_s, proposing generation r->generation + 1,
 * then the ring with its shared-memory path (shm.h). `watch`: a live recovery's, which a
 * change of KUBETRAIN_MEMBERS_FILE ends with -EINTR (members_wake). Returns 0 with *out,
 * or net_rendezvous's negative errno and err. */
static int form_ring(const Config *cfg, Recovery *r, double timeout_s, int watch, Collective **out,
                     char *err, size_t errlen)
{
    NetJob job = {.world = r->tf.world,
                  .rank = r->tf.rank,
                  .model_signature = r->signature,
                  .global_batch = (uint64_t)config_global_batch(cfg, r->tf.world),
                  .dataset = cfg->dataset,
                  .generation = r->generation + 1,
                  .has_state = r->has_state,
                  .incarnation = r->incarnation,
                  .last_ring = r->last_ring,
                  .last_ring_n = r->last_ring_n,
                  .members = r->members_path ? r->idx : NULL,
                  .cluster = r->all.world};
    NetOptions no = {.rendezvous_timeout_s = timeout_s,
                     .handshake_timeout_s = 10,
                     .secret = r->secret,
                     .secret_len = r->secret_len,
                     .stop = &rendezvous_wake,
                     .poll = watch ? rendezvous_poll : NULL,
                     .poll_arg = r};
    NetRing ring;
    double t0 = util_now();
    int rc = net_rendezvous(r->listen_fd, &r->tf, &job, &no, &ring, err, errlen);
    if (rc) return rc;
    util_log("rendezvous done in %.2fs: receiving from %s, sending to %s", util_now() - t0,
             ring.prev_name, ring.next_name);
    RingOptions ro = {.io_timeout_s = RING_IO_TIMEOUT_S, .watch_next = &ring_setup};
    *out = shm_wrap(ring_create(r->tf.rank, r->tf.world, &ring, &ro));
    return 0;
}

/* A disagreement about the members ends a wait with exit 2 only when it held to the end:
 * met within this many seconds of the deadline (the attempts that meet it come every
 * 0.1 s). One met earlier, then attempts that did not meet it (a dialer's connection in
 * flight from before its list changed, then a peer that went quiet), is a wait that ran
 * out: exit 75, as without the disagreement. */
#define DISAGREE_HELD_S 1.0

/* A disagreement about the members met in a rendezvous (-ESTALE): the line naming the
 * peer and both lists ("" when none since it was cleared), and when it was last met. */
typedef struct Disagreement {
    char what[1024];
    double at;
} Disagreement;

/* Notes the disagreement `err` met now; the first since d was cleared is logged. */
static void disagreement_note(Disagreement *d, const char *err, double deadline)
{
    if (!d->what[0])
        util_log("elastic: %s; reading KUBETRAIN_MEMBERS_FILE again every 0.1 s until the "
                 "members agree (up to %.0fs more)",
                 err, deadline - util_now());
    snprintf(d->what, sizeof d->what, "%s", err);
    d->at = util_now();
}

/* Exits 2 when the wait's deadline has passed and d held to it (DISAGREE_HELD_S), naming
 * the deadline's flag and value, the peer and both lists. */
static void disagreement_check(const Disagreement *d, double deadline, const char *flag,
                               double value)
{
    const double now = util_now();
    if (d->what[0] && now >= deadline && now - d->at <= DISAGREE_HELD_S)
        util_fail(KT_EXIT_USAGE, "elastic: the members still disagree after %s %gs: %s; exiting 2",
                  flag, value, d->what);
}

/* The first rendezvous, within --rendezvous-timeout. A worker started with
 * KUBETRAIN_MEMBERS_FILE that meets a peer naming other members (a worker joining a
 * running ring before the others' files change) waits as a live recovery does: reads its
 * own file again every 0.1 s and tries again, and when they still disagree at the
 * deadline (DISAGREE_HELD_S) exits 2 naming both lists and the peer. It watches its file
 * meanwhile (members_wake): a list that changes while it waits (an attempt that starts
 * without a worker the scheduler cannot place, or with one that was placed after all) is
 * the ring it forms instead, within the same deadline; a ring of this worker alone is the
 * local collective (its listener stays open for the workers that join later). Returns
 * form_ring's result. */
static int first_ring(const Config *cfg, Recovery *r, Collective **out, char *err, size_t errlen)
{
    const double deadline = util_now() + cfg->rendezvous_timeout;
    Disagreement disagree = {.what = "", .at = 0};
    int rc;
    if (r->members_path && cfg->checkpoint_dir[0] && cfg->steps_per_epoch > 0) {
        finish_dir = cfg->checkpoint_dir;
        finish_step = (uint64_t)cfg->epochs * (uint64_t)cfg->steps_per_epoch;
    }
    for (;;) {
        if (r->tf.world == 1) {
            *out = coll_local_create();
            finish_dir = NULL;
            return 0;
        }
        rc = form_ring(cfg, r, deadline - util_now(), r->members_path != NULL, out, err, errlen);
        if (rc == -EINTR && finished_at >= 0) break;
        if (rc == -EINTR && !stop_requested && members_changed) {
            members_changed = 0;
            char *list = indices_text(r->named, r->named_n);
            util_log("elastic: KUBETRAIN_MEMBERS_FILE names %s now, before the first ring; "
                     "forming that ring",
                     list);
            free(list);
            members_take(r, 1);
            disagree.what[0] = '\0';
            continue;
        }
        if (rc != -ESTALE || !r->members_path) break;
        disagreement_note(&disagree, err, deadline);
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        if (stop_requested) return -EINTR;
        if (util_now() >= deadline) break;
        if (members_look(r, 1)) members_take(r, 1);
    }
    finish_dir = NULL;
    if (rc && finished_at < 0)
        disagreement_check(&disagree, deadline, "--rendezvous-timeout", cfg->rendezvous_timeout);
    return rc;
}

/* Forms the collective of this worker: the local one for a world of one, otherwise the
 * TCP ring after an authenticated rendezvous. r takes what a live recovery needs (it
 * owns tf from now on). Exits with the contract's code on error. */
static Collective *connect_collective(const Config *cfg, const TfConfig *tf, Recovery *r)
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
    /* A worker of an elastic job (KUBETRAIN_MEMBERS_FILE) whose ring is itself alone
     * still listens: the workers left out at the start join it later (first_ring). */
    if (tf->world == 1 && !r->members_path) return coll_local_create();

    /* The rendezvous compares the model's signature, so build the model once for it. */
    Model *m;
    int code, rc = trainer_create_model(&m, cfg, tf->world, &code, err, sizeof err);
    if (rc) util_fail(code, "%s", err);
    r->signature = xstrdup(m->signature);
    model_free(m);
    if (net_secret_load(&r->secret, &r->secret_len, err, sizeof err))
        util_fail(KT_EXIT_USAGE, "%s", err);

    /* Listen where TF_CONFIG says this worker is (127.0.0.1 under launch), not on every
     * interface; net_listen_task falls back to them, saying so, when that name is not an
     * address of this machine (yet). */
    int port;
    if (net_listen_task(tf->peers[tf->rank].host, tf->peers[tf->rank].port, 0, &r->listen_fd, &port,
                        err, sizeof err))
        util_fail(KT_EXIT_RETRY, "%s", err);
    Collective *c;
    rc = first_ring(cfg, r, &c, err, sizeof err);
    if (finished_at >= 0) {
        /* Nothing to join: the others trained the last step and saved it. Exit 0 without
         * a result of its own (the chief of the last ring wrote the export and the
         * result); the message says where the run ended. */
        char msg[96];
        util_log("elastic: the run is over: %s holds the checkpoint of step %ld, its last, "
                 "saved before this worker could join; nothing to join, exiting 0",
                 cfg->checkpoint_dir, finished_at);
        snprintf(msg, sizeof msg, "{\"step\":%ld,\"checkpoint_step\":%ld}", finished_at,
                 finished_at);
        util_termination_write(msg);
        close(r->listen_fd);
        exit(KT_EXIT_OK);
    }
    /* Only a peer that proved the job secret and disagrees about the job or the members
     * is a configuration error; whatever else answered or failed to (a stale address,
     * another job's worker, a wrong secret) may be gone after a restart, so it is
     * retryable. */
    if (rc == -EPROTO || rc == -ESTALE) util_fail(KT_EXIT_USAGE, "rendezvous: %s", err);
    if (rc) util_fail(KT_EXIT_RETRY, "rendezvous: %s", err);
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
        double t0 = util_now();
        if (!(c = coll_nccl_create(c, device, RING_IO_TIMEOUT_S, err, sizeof err)))
            util_fail(KT_EXIT_RETRY, "%s", err);
        util_log("NCCL communicator of %d ranks on CUDA device %d ready in %.2fs", tf->world,
                 device, util_now() - t0);
        if (cfg->recovery_timeout > 0)
            util_log("live recovery is off with NCCL: a communicator cannot take in a new rank, "
                     "so a lost peer restarts the group from the newest checkpoint");
    }
    r->on = !nccl && cfg->recovery_timeout > 0;
#else
    r->on = cfg->recovery_timeout > 0;
#endif
    /* Without live recovery nobody connects again: closed, late connections are refused
     * instead of queued. */
    if (!r->on) {
        close(r->listen_fd);
        r->listen_fd = -1;
    }
    return c;
}

/* ---------------------------------------------------------------------------------- */
/* checkpoints */

/* The identity a checkpoint of this run is matched against. */
static void checkpoint_signature(const Trainer *t, char out[CKPT_SIGNATURE_MAX])
{
    trainer_checkpoint_signature(t->model, t->cfg.optimizer, out);
}

/* Saves a checkpoint of t's state as a run of `world` ranks; with `if_newest` (a survivor
 * of a lost peer that gives up, see recovery_give_up) only when the directory holds no
 * valid checkpoint at this step or later, returning 1 when it does. On error sets
 * *exit_code: 75 for trouble with the storage or the device that a restart may not meet
 * (util_io_retryable), else 3. */
static int checkpoint_save(Trainer *t, int world, int if_newest, int *exit_code, char *err,
                           size_t errlen)
{
    CkptState cs;
    memset(&cs, 0, sizeof cs);
    checkpoint_signature(t, cs.model_signature);
    cs.world = (uint32_t)world;
    cs.epoch = (uint64_t)t->st.epoch;
    cs.step_in_epoch = (uint64_t)t->st.step_in_epoch;
    cs.global_step = (uint64_t)t->st.global_step;
    cs.seed = t->cfg.seed;
    cs.rng_state = t->cfg.seed; /* dropout masks derive from (seed, global step, rank) */
    const PipelineCursor cur = trainer_shared_cursor(t);
    cs.data_epoch = cur.data_epoch;
    cs.data_position = cur.position;
    cs.optimizer_iter = (uint64_t)t->opt->iterations;
    double t0 = util_now();
    int rc = trainer_sync_host(t, err, errlen);
    if (rc) {
        *exit_code = KT_EXIT_RETRY;
        return rc;
    }
    const size_t pbytes = t->model->num_params * sizeof(float);
    const size_t obytes = t->opt->state_floats * sizeof(float);
    uint64_t newer = 0;
    if (if_newest)
        rc = ckpt_save_if_newest(t->cfg.checkpoint_dir, t->cfg.keep_checkpoints, &cs,
                                 t->train.count, t->model->params, pbytes, t->opt->state, obytes,
                                 &newer, err, errlen);
    else
        rc = ckpt_save(t->cfg.checkpoint_dir, t->cfg.keep_checkpoints, &cs, t->train.count,
                       t->model->params, pbytes, t->opt->state, obytes, err, errlen);
    if (rc < 0) {
        *exit_code = util_io_retryable(rc) ? KT_EXIT_RETRY : KT_EXIT_DATA;
        return rc;
    }
    if (rc == 1) {
        util_log("not saving step %ld: the directory holds a checkpoint of step %llu already",
                 t->st.global_step, (unsigned long long)newer);
        return 1;
    }
    util_log("checkpoint at step %ld saved in %.3fs", t->st.global_step, util_now() - t0);
    t->ckpt_step = t->st.global_step;
    t->ckpt_time = util_wall();
    metrics_checkpoint(t->metrics, t->ckpt_step, t->ckpt_time);
    util_termination_progress(t->st.global_step, t->ckpt_step);
    return 0;
}

/* The after-step hook of the chief: a checkpoint every --checkpoint-every-steps steps,
 * at the end of every epoch, and when the run is being stopped. It also runs before the
 * first step and after a live recovery, where the state (a replacement's, or a survivor's
 * that was a step behind) may sit on such a boundary without this rank having trained
 * that step (an epoch's end is then the next epoch's step 0): saved unless the newest
 * checkpoint is of that step already (a run resumed from it, a chief that saved it). */
static int checkpoint_hook(Trainer *t, void *ctx, int *exit_code, char *err, size_t errlen)
{
    (void)ctx;
    const long every = t->cfg.checkpoint_every_steps, step = t->st.global_step;
    const int epoch_end =
        t->st.step_in_epoch == t->steps_per_epoch || (t->st.step_in_epoch == 0 && step > 0);
    if (t->ckpt_step >= step) return 0;
    if ((every > 0 && step % every == 0) || epoch_end || t->stopping)
        return checkpoint_save(t, t->coll->world, 0, exit_code, err, errlen);
    return 0;
}

/* What each rank tells the others before a state sync. */
typedef struct {
    uint64_t has_state, global_step, generation, incarnation;
} RankInfo;

/* What the root of a state sync broadcasts: where the run stands, everything a rank
 * needs besides the parameters and the optimizer state to go on bit-exactly. */
typedef struct {
    uint64_t restored, epoch, step_in_epoch, global_step, data_epoch, position, opt_iter;
    uint64_t generation;
    int64_t ckpt_step;
    double ckpt_time;
    EpochSums ep;
    char hash[65];
} SyncState;

/* Loads the newest valid checkpoint from the shared directory into t's parameters and
 * optimizer state and ss. Exits with the contract's code on error. */
static void restore_checkpoint(Trainer *t, SyncState *ss)
{
    char err[1024], sig[CKPT_SIGNATURE_MAX];
    Model *m = t->model;
    const size_t pbytes = m->num_params * sizeof(float);
    const size_t obytes = t->opt->state_floats * sizeof(float);
    CkptState cs;
    CkptLoadInfo info;
    checkpoint_signature(t, sig);
    int rc = ckpt_load_latest(t->cfg.checkpoint_dir, sig, t->train.count, &cs, m->params, pbytes,
                              t->opt->state, obytes, &info, err, sizeof err);
    if (rc == -EPROTO) util_fail(KT_EXIT_DATA, "checkpoint of another model: %s", err);
    if (rc && rc != -ENOENT)
        util_fail(rc == -EBADMSG ? KT_EXIT_DATA : KT_EXIT_RETRY, "checkpoint: %s", err);
    if (rc) {
        if (t->coll->rank == 0)
            util_log("no checkpoint in %s: starting from scratch", t->cfg.checkpoint_dir);
        return;
    }
    if (info.skipped)
        util_log("skipped %d newer checkpoint(s) that failed validation or belong to "
                 "another model",
                 info.skipped);
    ss->restored = 1;
    struct stat sb;
    ss->ckpt_time = stat(info.path, &sb) == 0 ? (double)sb.st_mtime : util_wall();
    ss->epoch = cs.epoch, ss->step_in_epoch = cs.step_in_epoch;
    ss->global_step = cs.global_step;
    ss->ckpt_step = (int64_t)cs.global_step;
    ss->data_epoch = cs.data_epoch, ss->position = cs.data_position;
    ss->opt_iter = cs.optimizer_iter;
    if (cs.seed != t->cfg.seed)
        util_log("warning: %s was written with --seed %llu, this run has --seed %llu", info.path,
                 (unsigned long long)cs.seed, (unsigned long long)t->cfg.seed);
    /* With file/off sharding each rank's stream has a cursor of its own, which
     * trainer_seek computes from the global step; one written before that rule (the
     * chief's) would not fit the other ranks' streams. */
    const int global = !data_shard_per_rank(t->cfg.shard_policy);
    if (!global) ss->data_epoch = ss->position = 0;
    /* Another world size: weights and optimizer carry over; the data is re-sharded. With
     * auto/data sharding every rank walks one global stream whose cursor counts examples
     * of all ranks, so it continues at the same example; with file/off sharding each new
     * shard is where a run of this size would be at that step. */
    if (cs.world != (uint32_t)t->coll->world)
        util_log("%s was written by %u workers, this run has %d: weights and optimizer "
                 "restored, data re-sharded (%s)",
                 info.path, cs.world, t->coll->world,
                 global ? "the global stream continues at the same example"
                        : "each new shard is where a run of this size would be at that step");
    if (t->coll->rank == 0)
        util_log("resuming from %s: epoch %llu, step %llu of the epoch, global step %llu",
                 info.path, (unsigned long long)cs.epoch + 1, (unsigned long long)cs.step_in_epoch,
                 (unsigned long long)cs.global_step);
}

/* Reads --initial-weights into t's parameters. Called only where a run starts fresh (no
 * rank holds state, no checkpoint was restored), so that a resumed run, a restarted
 * group and a live recovery's replacement never read the file: the weights come from
 * the checkpoint or the peers, and a file moved or deleted since does not fail them.
 * Exits 3 on a file that is damaged or of another model. */
static void load_initial_weights(Trainer *t)
{
    char why[4600];
    if (t->cfg.initial_weights[0] &&
        keras_import_weights(t->model, t->model->params, t->cfg.initial_weights, why, sizeof why))
        util_fail(KT_EXIT_DATA, "--initial-weights %s", why);
}

/* Exits 75 when the state that root sent in a sync cannot be one of this run (a broken
 * or hostile peer; casting it would make garbage of the position, or the pipeline walk
 * to it): its position (trainer_check_position; a running peer's state must also lie
 * within --epochs and the steps per epoch), the global step it announced before the
 * sync, the generation every rank computed alike, a newest checkpoint within the global
 * step. */
static void check_sync(const Trainer *t, const SyncState *ss, int from_state, int root,
                       uint64_t announced, uint64_t generation)
{
    char why[512];
    const TrainPosition p = {.epoch = ss->epoch,
                             .step_in_epoch = ss->step_in_epoch,
                             .global_step = ss->global_step,
                             .data_epoch = ss->data_epoch,
                             .position = ss->position,
                             .opt_iter = ss->opt_iter};
    int bad = trainer_check_position(t, &p, from_state, why, sizeof why) != 0;
    if (!bad && from_state && ss->global_step != announced)
        bad = 1, snprintf(why, sizeof why, "global step %llu after announcing %llu",
                          (unsigned long long)ss->global_step, (unsigned long long)announced);
    else if (!bad && ss->generation != generation)
        bad = 1, snprintf(why, sizeof why, "generation %llu where every rank agreed on %llu",
                          (unsigned long long)ss->generation, (unsigned long long)generation);
    else if (!bad && (ss->ckpt_step < -1 || ss->ckpt_step > (int64_t)ss->global_step))
        bad = 1, snprintf(why, sizeof why, "checkpoint step %lld past global step %llu",
                          (long long)ss->ckpt_step, (unsigned long long)ss->global_step);
    if (bad)
        util_fail(KT_EXIT_RETRY,
                  "state sync: rank %d sent a state no rank of this run can hold: %s; exiting "
                  "75",
                  root, why);
}

/* KUBETRAIN_TEST_DIE_AT=POINT:GENERATION:WORLD, for the tests of a failure during a
 * resize (trainer/tests/test-elastic-resize.sh) and for nothing else: the process logs
 * the hook and kills itself with SIGKILL, as a lost pod dies, when it reaches POINT of
 * the state sync of ring generation GENERATION among WORLD ranks, a window that no
 * signal timed by a log line hits reliably. The points, both after the SyncState went
 * out and before the parameters: "sync-send", the rank that sends its training state to
 * the others (a running ring's, not the first sync's); "sync-join", a rank without state
 * that receives it (a worker joining a running ring). Unset: nothing. */
static struct {
    char point[16]; /* "": unset */
    unsigned long long generation;
    int world;
} die_at;

/* Reads KUBETRAIN_TEST_DIE_AT when the worker starts; a value not of that form exits 2
 * naming it. */
static void die_at_load(void)
{
    const char *env = getenv("KUBETRAIN_TEST_DIE_AT");
    int end = 0;
    if (!env || !*env) return;
    int ok = sscanf(env, "%15[a-z-]:%llu:%d%n", die_at.point, &die_at.generation, &die_at.world,
                    &end) == 3;
    ok = ok && !env[end];
    ok = ok && (!strcmp(die_at.point, "sync-send") || !strcmp(die_at.point, "sync-join"));
    if (!ok)
        util_fail(KT_EXIT_USAGE,
                  "KUBETRAIN_TEST_DIE_AT=%s: expected POINT:GENERATION:WORLD with POINT "
                  "sync-send or sync-join (a test hook: unset it outside the tests)",
                  env);
}

/* Dies when the hook names this point of this sync. */
static void die_at_check(const char *point, uint64_t generation, int world)
{
    if (!die_at.point[0] || strcmp(die_at.point, point) || die_at.generation != generation ||
        die_at.world != world)
        return;
    util_log("test hook KUBETRAIN_TEST_DIE_AT=%s:%llu:%d: dying (SIGKILL) at %s of generation "
             "%llu among %d ranks",
             die_at.point, die_at.generation, world, point, die_at.generation, world);
    raise(SIGKILL);
}

/* The one state sync, at the start and after every live recovery: the ranks agree on
 * the root, the rank that holds training state with the highest global step (ties: the
 * lowest rank; survivors of a lost peer may be one step apart, since a ring all-reduce
 * can complete on some ranks and not on others). When no rank holds state every rank
 * restores the newest checkpoint (none: a start from scratch) and the chief is the root.
 * The root broadcasts its parameters, optimizer state and SyncState, and every rank
 * checks the weights' hash against the root's and the state against the run
 * (check_sync). Dropout masks derive from (seed, global step, rank), so no RNG state
 * travels. Every rank also tells its incarnation, and a completed sync keeps them as
 * r->last_ring: a rank of this ring whose sync broke off proposes a lower generation
 * next and must still be accepted (NetJob). Returns 0, or the collective's negative
 * errno with err (a peer lost during the sync); a hash mismatch or a state no rank can
 * hold exits 75. */
static int state_sync(Trainer *t, Recovery *r, char *err, size_t errlen)
{
    Model *m = t->model;
    Collective *c = t->coll;
    const size_t pbytes = m->num_params * sizeof(float);
    const size_t obytes = t->opt->state_floats * sizeof(float);
    const int fresh = !r->has_state, running = r->generation > 0; /* trainer_run has begun */
    SyncState ss;
    memset(&ss, 0, sizeof ss);
    ss.ckpt_step = -1;
    int root = -1, rc = 0;
    uint64_t generation = r->generation + 1, announced = 0;
    /* the ring's processes, kept as r->last_ring once the sync completes */
    uint64_t *ring = xcalloc((size_t)c->world, sizeof *ring);
    ring[c->rank] = r->incarnation;
    if (c->world > 1) {
        RankInfo *all = xcalloc((size_t)c->world, sizeof *all);
        all[c->rank] = (RankInfo){.has_state = (uint64_t)r->has_state,
                                  .global_step = (uint64_t)t->st.global_step,
                                  .generation = generation,
                                  .incarnation = r->incarnation};
        for (int q = 0; q < c->world && !rc; q++)
            rc = coll_broadcast(c, &all[q], sizeof all[q], q, err, errlen);
        for (int q = 0; q < c->world && !rc; q++) {
            if (all[q].has_state && (root < 0 || all[q].global_step > all[root].global_step))
                root = q;
            if (all[q].generation > generation) generation = all[q].generation;
            ring[q] = all[q].incarnation;
        }
        if (root >= 0) announced = all[root].global_step;
        free(all);
        if (rc) {
            free(ring);
            return rc;
        }
    }
    const int from_state = root >= 0;
    if (!from_state && running) {
        /* Every rank that held state lost it in an interrupted sync, and this process's
         * metrics already run past the checkpoint: the group restart is the way back. */
        util_termination_mark("recoveryTimedOut");
        util_fail(KT_EXIT_RETRY, "live recovery: no rank holds the training state any more "
                                 "(a sync was interrupted); exiting 75 for a restart of the "
                                 "group from the newest checkpoint");
    }
    /* A receiver that holds state (a survivor) takes the root's into scratch arenas and
     * keeps its own until the sync completes: when the sync breaks off (the root lost
     * mid-transfer) it still holds the state of its last completed step and can be the
     * next root, where a receiver that had been written into would hold none, and with
     * every survivor a receiver, no rank would (issue 46). One without state receives
     * in place: a sync that breaks off leaves its arenas half written, and it holds no
     * state until one completes. */
    const int keep = from_state && c->rank != root && r->has_state;
    if (c->rank != root && !keep) r->has_state = 0;
    if (!from_state) {
        root = 0;
        if (t->cfg.checkpoint_dir[0]) restore_checkpoint(t, &ss);
        if (!ss.restored) load_initial_weights(t);
    } else if (c->rank == root) {
        if ((rc = trainer_sync_host(t, err, errlen))) util_fail(KT_EXIT_RETRY, "%s", err);
        ss.epoch = (uint64_t)t->st.epoch, ss.step_in_epoch = (uint64_t)t->st.step_in_epoch;
        ss.global_step = (uint64_t)t->st.global_step;
        const PipelineCursor cur = trainer_shared_cursor(t);
        ss.data_epoch = cur.data_epoch, ss.position = cur.position;
        ss.opt_iter = (uint64_t)t->opt->iterations;
        ss.ckpt_step = t->ckpt_step;
        ss.ckpt_time = t->ckpt_time;
        ss.ep = t->ep;
    }
    ss.generation = generation;
    if (c->world > 1) {
        char mine[65];
        util_sha256_hex(m->params, pbytes, mine);
        if (c->rank == root) memcpy(ss.hash, mine, sizeof mine);
        float *params = keep ? xmalloc(pbytes) : m->params;
        float *ostate = keep && obytes ? xmalloc(obytes) : t->opt->state;
        rc = coll_broadcast(c, &ss, sizeof ss, root, err, errlen);
        if (!rc && from_state)
            die_at_check(c->rank == root ? "sync-send" : (fresh ? "sync-join" : "-"), generation,
                         c->world);
        if (!rc) rc = coll_broadcast(c, params, pbytes, root, err, errlen);
        if (!rc && obytes) rc = coll_broadcast(c, ostate, obytes, root, err, errlen);
        if (!rc && keep) {
            memcpy(m->params, params, pbytes);
            if (obytes) memcpy(t->opt->state, ostate, obytes);
        }
        if (keep) {
            free(params);
            if (obytes) free(ostate);
        }
        if (rc) {
            free(ring);
            return rc;
        }
        char got[65];
        util_sha256_hex(m->params, pbytes, got);
        ss.hash[64] = '\0';
        if (strcmp(got, ss.hash) != 0)
            util_fail(KT_EXIT_RETRY,
                      "weights differ from rank %d's after its broadcast: sha256 %s here, %s "
                      "there",
                      root, got, ss.hash);
        if (c->rank != root) check_sync(t, &ss, from_state, root, announced, generation);
        if (!from_state && c->rank != 0 && strcmp(mine, ss.hash) != 0)
            util_log("warning: this rank's initial weights (sha256 %.12s) differed from the "
                     "chief's (%.12s); training from the chief's",
                     mine, ss.hash);
        if (!from_state) util_log("initial weights verified: sha256 %s", got);
        else {
            util_log("live recovery: generation %llu formed; state of step %llu sent by rank %d, "
                     "weights sha256 %s",
                     (unsigned long long)generation, (unsigned long long)ss.global_step, root, got);
            if (fresh)
                util_log("joined generation %llu: state of step %llu received from rank %d, no "
                         "checkpoint read",
                         (unsigned long long)generation, (unsigned long long)ss.global_step, root);
        }
    }
    TrainState st = {.epoch = (int)ss.epoch,
                     .step_in_epoch = (long)ss.step_in_epoch,
                     .global_step = (long)ss.global_step,
                     .cursor = {.data_epoch = ss.data_epoch, .position = ss.position}};
    t->opt->iterations = (int64_t)ss.opt_iter;
    if (from_state) {
        /* The root's may be older than this rank's own: only the chief writes, and it
         * was not necessarily the root. */
        if (ss.ckpt_step > t->ckpt_step) {
            t->ckpt_step = (long)ss.ckpt_step;
            t->ckpt_time = ss.ckpt_time;
        }
        t->ep = ss.ep;
    } else if (ss.restored) {
        t->ckpt_step = st.global_step;
        t->ckpt_time = ss.ckpt_time;
    }
    trainer_seek(t, &st);
    if (running && (rc = trainer_sync_device(t, err, errlen))) util_fail(KT_EXIT_RETRY, "%s", err);
    r->generation = (uint32_t)generation;
    r->has_state = 1;
    free(r->last_ring);
    r->last_ring = ring, r->last_ring_n = c->world;
    if (t->metrics) metrics_checkpoint(t->metrics, t->ckpt_step, t->ckpt_time);
    util_termination_progress(t->st.global_step, t->ckpt_step);
    return 0;
}

/* The lost peer and why, from the collective's message ("... lost rank 2 (host:port)
 * during all-reduce: connection closed"), for the log line of the survivors. */
static void lost_peer(const char *msg, char *peer, size_t peerlen, char *why, size_t whylen)
{
    const char *l = strstr(msg, "lost "), *d = l ? strstr(l, " during ") : NULL;
    if (!d) {
        snprintf(peer, peerlen, "a peer");
        snprintf(why, whylen, "%s", msg);
        return;
    }
    snprintf(peer, peerlen, "%.*s", (int)(d - l - 5), l + 5);
    snprintf(why, whylen, "%.*s%s", (int)(l - msg), msg, d + 8);
}

/* A survivor of a lost peer that gives up its wait for a replacement (stopped by a
 * signal, or the deadline passed) saves the state it holds before it exits 75, or the
 * steps since the last checkpoint are lost. Every survivor holds the whole state, they
 * may be a step apart, and the chief may be the one lost, so each that holds state tries
 * (a rank whose sync broke off holds none), taking turns on the shared directory
 * (ckpt_save_if_newest): the newest state is written once, the others find it there. A
 * failed save is logged; the exit is 75 either way. timed_out adds "recoveryTimedOut"
 * to the termination message (the group restart). */
static void recovery_give_up(Trainer *t, const Recovery *r, int timed_out, const char *why)
{
    char err[1024];
    int code;
    if (t->cfg.checkpoint_dir[0] && r->has_state &&
        checkpoint_save(t, r->tf.world, 1, &code, err, sizeof err) < 0)
        util_log("live recovery: could not save step %ld before exiting: %s", t->st.global_step,
                 err);
    if (timed_out) util_termination_mark("recoveryTimedOut");
    util_fail(KT_EXIT_RETRY, "%s", why);
}

/* The rendezvous loop of a ring formed again (recover, regroup): the collective is gone;
 * waits until `deadline` for the workers of r's ring, taking up a new members list
 * whenever the supervisor signals one or the watch sees one (every 0.1 s,
 * members_wake), forms the next generation's ring and syncs the state from the rank with
 * the newest one. A peer that names other members (its file, or this worker's, has not
 * changed yet: the kubelet updates each pod's on its own sync) has this worker read its
 * own file again every 0.1 s and try again; when they still disagree at the deadline
 * (DISAGREE_HELD_S) it exits 2 naming both lists and the peer. A peer lost during the
 * sync starts the wait again within the same deadline. When the deadline passes, or a
 * signal stops the wait, the worker saves its state and exits 75 (recovery_give_up),
 * at the deadline with "recoveryTimedOut": true in the termination message, which asks
 * for the group restart; `awaited` names what it waited for in that message. Then the log says the
 * new size where it is not `world_before`, and the chief's duties follow rank 0. */
static void reform(Trainer *t, Recovery *r, double deadline, const char *awaited, int world_before)
{
    char e2[1024], msg[2048];
    Disagreement disagree = {.what = "", .at = 0};
    int rc = 0;
    for (;;) {
        const int signalled = members_changed, reread = signalled || rc == -ESTALE;
        if (signalled) {
            /* cleared before the file is read: a later signal wakes the rendezvous */
            rendezvous_wake = stop_requested;
            members_changed = 0;
        }
        if ((members_look(r, reread) || reread) && members_take(r, 0)) disagree.what[0] = '\0';
        double left = deadline - util_now();
        Collective *c = NULL;
        rc = stop_requested ? -EINTR
             : left > 0     ? form_ring(&t->cfg, r, left, 1, &c, e2, sizeof e2)
                            : -ETIMEDOUT;
        if (rc == -EPROTO) util_fail(KT_EXIT_USAGE, "rendezvous: %s", e2);
        if (rc == -EINTR && !stop_requested) continue; /* the members changed */
        if (rc == -ESTALE) disagreement_note(&disagree, e2, deadline);
        if (rc)
            disagreement_check(&disagree, deadline, "--recovery-timeout", t->cfg.recovery_timeout);
        if (rc == -EINTR) {
            snprintf(msg, sizeof msg,
                     "live recovery: stopped by a signal while waiting for a %s; exiting 75",
                     awaited);
            recovery_give_up(t, r, 0, msg);
        }
        if (rc && util_now() >= deadline) {
            snprintf(msg, sizeof msg,
                     "live recovery: no %s within %gs (%s); exiting 75 for a restart of the "
                     "group from the newest checkpoint",
                     awaited, t->cfg.recovery_timeout,
                     rc == -ETIMEDOUT && left <= 0 ? "time is up" : e2);
            recovery_give_up(t, r, 1, msg);
        }
        if (rc) {
            if (rc != -ESTALE) util_log("live recovery: %s; trying again", e2);
            struct timespec ts = {0, 100 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        ring_setup = 1;
        rc = trainer_attach_collective(t, c, e2, sizeof e2);
        if (!rc) rc = state_sync(t, r, e2, sizeof e2);
        ring_setup = 0;
        if (!rc) break;
        util_log("live recovery: generation %u failed to form: %s; waiting again",
                 r->generation + 1, e2);
        disagree.what[0] = '\0'; /* the ring formed: its members agreed */
        trainer_detach_collective(t);
        coll_destroy(c);
        t->coll = NULL;
    }
    if (r->tf.world != world_before)
        util_log("elastic: generation %u of %d workers goes on from step %ld: no process "
                 "restarted, no checkpoint read",
                 r->generation, r->tf.world, t->st.global_step);
    /* The chief's duties follow rank 0, which moves to the lowest index present: to a
     * survivor after a shrink, back to a lower index that joins (the metrics file stays
     * with the process of index 0; /metrics follows rank 0: trainer_attach_collective).
     * Before training, cmd_train gives them out. */
    const int chief = t->coll->rank == 0 && t->cfg.checkpoint_dir[0];
    if (!training_started) return;
    if (chief && !t->after_step) {
        util_log("elastic: this worker (TF_CONFIG index %d) is the chief now and takes over "
                 "the checkpoints",
                 r->index);
        t->after_step = checkpoint_hook;
    } else if (!chief && t->after_step) {
        util_log("elastic: TF_CONFIG index %d is the chief now: this worker (index %d) hands "
                 "over the checkpoints",
                 r->idx[0], r->index);
        t->after_step = NULL;
    }
}

/* The TrainRecoverHook (train.h) of live recovery: the collective failed in a step. The
 * survivors drop the ring and wait up to --recovery-timeout for the replacement in a new
 * rendezvous on the listener they kept open (reform). When the supervisor drops workers
 * instead (KUBETRAIN_MEMBERS_FILE, signalled or watched: members_look), the survivors
 * form the smaller ring and go on. */
static int recover(Trainer *t, void *ctx, const char *why, int *exit_code, char *err, size_t errlen)
{
    Recovery *r = ctx;
    char peer[NET_NAME_MAX + 16], reason[1024], awaited[NET_NAME_MAX + 48];
    lost_peer(why, peer, sizeof peer, reason, sizeof reason);
    const double timeout = t->cfg.recovery_timeout;
    util_log("lost %s: %s; waiting up to %gs for a replacement (generation %u)", peer, reason,
             timeout, r->generation + 1);
    trainer_detach_collective(t);
    coll_destroy(t->coll);
    t->coll = NULL;
    snprintf(awaited, sizeof awaited, "replacement for %s", peer);
    reform(t, r, util_now() + timeout, awaited, r->tf.world);
    (void)exit_code, (void)err, (void)errlen;
    return 0;
}

/* The TrainRecoverHook (train.h) of a regroup: after the same step every rank learned
 * that KUBETRAIN_MEMBERS_FILE changed on some rank (SIGUSR1, or members_watch: each
 * pod's copy changes at its own time). Rank 0 reads the file and sends its text over the
 * ring, the addresses of workers past TF_CONFIG with it, so that every rank takes the
 * same list (each reading it could see two versions of it). When the list is the
 * ring's, the ring goes on; otherwise every rank leaves it for the rendezvous of the
 * listed workers (reform): a worker added back joins there and receives the state, as a
 * live replacement does. */
static int regroup(Trainer *t, void *ctx, const char *why, int *exit_code, char *err, size_t errlen)
{
    Recovery *r = ctx;
    Collective *c = t->coll;
    /* cleared before the file is read: a later signal asks for the next regroup, or
     * wakes the rendezvous below to take up its list */
    rendezvous_wake = stop_requested;
    members_changed = 0;
    /* Rank 0's text, the addresses of the workers past TF_CONFIG with it: its length,
     * then its bytes (0: rank 0 read no list). */
    uint64_t len = 0;
    if (c->rank == 0) {
        members_look(r, 1);
        if (r->named_n) len = strlen(r->named_text);
    }
    char e2[1024], *text = NULL;
    int rc = coll_broadcast(c, &len, sizeof len, 0, e2, sizeof e2);
    if (!rc && len > MEMBERS_TEXT_MAX)
        util_fail(KT_EXIT_RETRY,
                  "elastic: rank 0 sent a members list of %llu bytes, longer than "
                  "any file a worker reads; exiting 75",
                  (unsigned long long)len);
    if (!rc && len) {
        text = xcalloc((size_t)len + 1, 1);
        if (c->rank == 0) memcpy(text, r->named_text, (size_t)len);
        rc = coll_broadcast(c, text, (size_t)len, 0, e2, sizeof e2);
    }
    if (rc) {
        free(text);
        /* A peer left before the regroup (a dropped worker's pod deleted as its peers'
         * files change): the list this worker read, by the watch before the step or just
         * now, is not its ring, and the file will not change again; the recovery's
         * rendezvous must take it up rather than wait for the ring of before. */
        if (r->named_n && !same_members(r, r->named, r->named_n)) members_changed = 1;
        return recover(t, ctx, e2, exit_code, err, errlen);
    }
    int *idx = xcalloc(NET_MEMBERS_MAX, sizeof *idx), n = 0;
    if (text) {
        char source[PATH_MAX + 48];
        snprintf(source, sizeof source, "KUBETRAIN_MEMBERS_FILE %s (rank 0's)", r->members_path);
        n = members_parse(r, text, source, idx);
        free(text);
    }
    if (n == 0 || same_members(r, idx, n)) {
        free(idx);
        return 0;
    }
    util_log("elastic: %s after step %ld: forming the ring of the workers KUBETRAIN_MEMBERS_FILE "
             "names",
             why, t->st.global_step);
    const int world_before = r->tf.world;
    members_set(r, idx, n, 0);
    free(idx);
    trainer_detach_collective(t);
    coll_destroy(t->coll);
    t->coll = NULL;
    reform(t, r, util_now() + t->cfg.recovery_timeout, "ring of the workers named", world_before);
    return 0;
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
    die_at_load();

    TfConfig tf;
    if (tfconfig_parse(getenv("TF_CONFIG"), cfg.index, &tf, err, sizeof err))
        util_fail(KT_EXIT_USAGE, "TF_CONFIG: %s", err);
    if (config_global_batch(&cfg, tf.world) < tf.world)
        util_fail(KT_EXIT_USAGE,
                  "--global-batch %d: fewer examples than the %d workers; expected at least one "
                  "per worker",
                  cfg.global_batch, tf.world);
    /* fixed now: a smaller ring (a shrink) trains the same global batch */
    cfg.global_batch = config_global_batch(&cfg, tf.world);
    /* the chief's export path is tried now, not found wrong after the training */
    if (tf.rank == 0 && cfg.export_path[0] && keras_export_check(cfg.export_path, err, sizeof err))
        util_fail(KT_EXIT_USAGE, "--export %s", err);
    if (tf.world > 1) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "kubetrain-trainer[rank %d]", tf.rank);
        util_set_log_prefix(prefix);
        /* the chief alone writes summaries, as in MWMS */
        if (tf.rank != 0) cfg.metrics_file[0] = '\0';
    }
    Recovery rec = {.listen_fd = -1, .tf = tf, .index = tf.rank, .tf_workers = tf.world};
    rec.all = (TfConfig){
        .world = tf.world, .rank = tf.rank, .peers = xcalloc((size_t)tf.world, sizeof *tf.peers)};
    memcpy(rec.all.peers, tf.peers, (size_t)tf.world * sizeof *tf.peers);
    rec.idx = xcalloc((size_t)tf.world, sizeof *rec.idx);
    for (int i = 0; i < tf.world; i++) rec.idx[i] = i;
    rec.named = xcalloc(NET_MEMBERS_MAX, sizeof *rec.named);
    /* a process of this run, told apart from an earlier one of the same index (NetJob) */
    while (!rec.incarnation)
        if (getrandom(&rec.incarnation, sizeof rec.incarnation, 0) != sizeof rec.incarnation)
            util_fail(KT_EXIT_RETRY, "getrandom: %s", strerror(errno));
    /* a worker added back to an elastic job joins the ring of the members named now;
     * one whose TF_CONFIG names it alone watches the file too, for workers made past it */
    const char *members_path = getenv("KUBETRAIN_MEMBERS_FILE");
    if (cfg.recovery_timeout > 0 && members_path && *members_path) {
        rec.members_path = members_path;
        members_look(&rec, 1);
        members_take(&rec, 1);
    }
    signal(SIGUSR1, SIG_IGN); /* until training runs (recover) */
    Collective *coll = connect_collective(&cfg, &rec.tf, &rec);

    Trainer *t = NULL;
    ring_setup = 1;
    const int made = trainer_create(&t, &cfg, coll, &code, err, sizeof err);
    if (made && !(t && rec.on)) {
        trainer_free(t);
        coll_destroy(coll); /* the ring and its ports are closed before the exit */
        util_fail(code, "%s", err);
    }
    /* a peer lost as the ring is set up or during the first sync (it left that ring: a
     * grow whose members' lists still differ): with live recovery, wait for it like a
     * survivor */
    if (made || state_sync(t, &rec, err, sizeof err)) {
        char e2[1024];
        ring_setup = 0;
        if (!rec.on) util_fail(KT_EXIT_RETRY, "state sync: %s", err);
        if (recover(t, &rec, err, &code, e2, sizeof e2)) util_fail(code, "%s", e2);
    }
    ring_setup = 0;
    if (t->coll->rank == 0 && cfg.checkpoint_dir[0]) t->after_step = checkpoint_hook;
    t->stop_request = &stop_requested;
    if (rec.on) {
        t->recover = recover, t->recover_ctx = &rec;
        t->regroup = regroup, t->regroup_request = &members_changed;
        t->regroup_poll = members_watch;
    }
    training_started = 1;
    if (rec.on) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_members_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART;
        sigaction(SIGUSR1, &sa, NULL);
    }
    if (stop_requested) util_fail(KT_EXIT_RETRY, "stopped by a signal before the first step");
    if (trainer_run(t, &code, err, sizeof err)) util_fail(code, "%s", err);

    char hash[65];
    trainer_weights_hash(t, hash);
    if (cfg.print_weights_hash) printf("weights-sha256: %s\n", hash);
    if (t->coll->rank == 0 && cfg.export_path[0]) {
        int rc2 = keras_export_write(t->model, t->model->params, cfg.export_path, err, sizeof err);
        if (rc2)
            util_fail(util_io_retryable(rc2) ? KT_EXIT_RETRY : KT_EXIT_DATA, "--export %s", err);
        util_log("exported the model to %s", cfg.export_path);
    }
    cJSON *res = cJSON_CreateObject();
    cJSON_AddNumberToObject(res, "step", (double)t->st.global_step);
    cJSON_AddNumberToObject(res, "epoch", t->st.epoch);
    cJSON_AddNumberToObject(res, "loss", t->last_loss);
    cJSON_AddNumberToObject(res, "accuracy", t->last_accuracy);
    cJSON_AddStringToObject(res, "weights_sha256", hash);
    if (t->coll->rank == 0 && cfg.export_path[0])
        cJSON_AddStringToObject(res, "export", cfg.export_path);
    char *json = cJSON_PrintUnformatted(res);
    /* a path too long for the message is left out rather than the whole result cut */
    if (json && strlen(json) >= KT_TERMINATION_MAX && cJSON_HasObjectItem(res, "export")) {
        cJSON_DeleteItemFromObjectCaseSensitive(res, "export");
        free(json);
        json = cJSON_PrintUnformatted(res);
    }
    if (json) util_termination_write(json);
    free(json);
    cJSON_Delete(res);
    coll = t->coll;
    trainer_free(t);
    coll_destroy(coll);
    if (rec.listen_fd >= 0) close(rec.listen_fd);
    tfconfig_free(&rec.tf);
    tfconfig_free(&rec.all);
    free(rec.idx);
    free(rec.named);
    free(rec.named_text);
    free(rec.last_ring);
    free(rec.signature);
    free(rec.secret);
    return KT_EXIT_OK;
}

/* ---------------------------------------------------------------------------------- */
/* export */

static const char export_usage[] =
    "usage: kubetrain-trainer export --checkpoint-dir DIR --model SPEC --out FILE\n"
    "  the newest valid checkpoint in DIR of the model SPEC (--model of the run, any\n"
    "  --optimizer) as FILE.keras (Keras's model.save) or FILE.weights.h5\n"
    "  (model.save_weights)\n";

/* kubetrain-trainer export: the parameters of the newest checkpoint of a job, finished
 * or running, as the files --export writes (keras_export.h). Exit 2 for bad usage or an
 * --out that cannot be created, 3 when DIR holds no valid checkpoint of SPEC, 75 for
 * trouble reading or writing that a retry may not meet. */
static int cmd_export(int argc, char **argv)
{
    const char *dir = NULL, *spec = NULL, *out = NULL;
    for (int a = 0; a < argc; a++) {
        if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) {
            fputs(export_usage, stdout);
            return KT_EXIT_OK;
        }
        const char **slot = !strcmp(argv[a], "--checkpoint-dir") ? &dir
                            : !strcmp(argv[a], "--model")        ? &spec
                            : !strcmp(argv[a], "--out")          ? &out
                                                                 : NULL;
        if (!slot)
            util_fail(KT_EXIT_USAGE,
                      "export: %s: unknown option (expected --checkpoint-dir, "
                      "--model and --out)",
                      argv[a]);
        if (a + 1 == argc) util_fail(KT_EXIT_USAGE, "export: %s: expected a value", argv[a]);
        *slot = argv[++a];
    }
    if (!dir || !spec || !out)
        util_fail(KT_EXIT_USAGE, "export: expected --checkpoint-dir DIR --model SPEC --out FILE");
    char err[1024];
    if (keras_export_check(out, err, sizeof err)) util_fail(KT_EXIT_USAGE, "export: --out %s", err);
    Model *m;
    int rc = model_create(&m, spec, 1, err, sizeof err);
    if (rc) util_fail(rc == -ENOENT ? KT_EXIT_USAGE : KT_EXIT_DATA, "export: %s", err);
    /* the optimizer is the run's, which the command is not told: any will do, its state
     * is not exported */
    char sigs[OPT_ADAM_AMSGRAD + 1][CKPT_SIGNATURE_MAX];
    const char *list[OPT_ADAM_AMSGRAD + 1];
    for (int k = OPT_SGD; k <= OPT_ADAM_AMSGRAD; k++) {
        trainer_checkpoint_signature(m, (OptimizerKind)k, sigs[k]);
        list[k] = sigs[k];
    }
    CkptState cs;
    CkptLoadInfo info;
    rc = ckpt_load_params(dir, list, OPT_ADAM_AMSGRAD + 1, &cs, m->params,
                          m->num_params * sizeof(float), &info, err, sizeof err);
    if (rc == -EPROTO)
        util_fail(KT_EXIT_DATA, "export: --model %s is not the checkpoint's: %s", spec, err);
    if (rc)
        util_fail(rc == -ENOENT || rc == -EBADMSG ? KT_EXIT_DATA : KT_EXIT_RETRY, "export: %s",
                  err);
    if ((rc = keras_export_write(m, m->params, out, err, sizeof err)))
        util_fail(util_io_retryable(rc) ? KT_EXIT_RETRY : KT_EXIT_DATA, "export: %s", err);
    util_log("exported %s (step %llu) to %s", info.path, (unsigned long long)cs.global_step, out);
    model_free(m);
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
    /* Before anything uses OpenBLAS: this may run the program again with its core type. */
    gemm_select_kernels(argv);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--print-cpu")) {
            char kernels[512];
            gemm_describe(kernels, sizeof kernels);
            printf("gemm: %s\n", kernels);
            if (gemm_kernels()->warning[0]) printf("warning: gemm: %s\n", gemm_kernels()->warning);
            return KT_EXIT_OK;
        }
    ConvAlgo algo;
    if (conv_algo_parse(getenv("KUBETRAIN_CONV"), &algo))
        util_fail(KT_EXIT_USAGE,
                  "KUBETRAIN_CONV=%s: unknown Conv2D algorithm; expected auto, im2col or winograd "
                  "(or leave it unset)",
                  getenv("KUBETRAIN_CONV"));
    conv_set_algo(algo);
    if (argc > 1 && !strcmp(argv[1], "train")) return cmd_train(argc - 2, argv + 2);
    if (argc > 1 && !strcmp(argv[1], "launch")) return launch_main(argc - 2, argv + 2, argv[0]);
    if (argc > 1 && !strcmp(argv[1], "export")) return cmd_export(argc - 2, argv + 2);
    if (argc > 1 && strncmp(argv[1], "-", 1) != 0)
        util_fail(KT_EXIT_USAGE, "%s: unknown command (expected train, launch or export)", argv[1]);
    return cmd_train(argc - 1, argv + 1);
}
