#include "ckpt.h"

#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* File layout, little-endian:
 *   magic[8] "KTCKPT\0\n" | u32 version | u32 header bytes (360)
 *   signature[256] NUL-padded | u32 world | u32 zero
 *   u64 epoch, step_in_epoch, global_step, seed, rng_state, data_epoch, data_position,
 *       optimizer_iter | u64 params bytes | u64 optimizer bytes
 *   params | optimizer state | u32 crc32 of everything before it */
static const unsigned char CKPT_MAGIC[8] = {'K', 'T', 'C', 'K', 'P', 'T', 0, '\n'};
#define HEADER_BYTES 360
#define IO_CHUNK (1u << 20)

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static void header_encode(unsigned char *h, const CkptState *st, uint64_t pb, uint64_t ob)
{
    memset(h, 0, HEADER_BYTES);
    memcpy(h, CKPT_MAGIC, 8);
    put32(h + 8, CKPT_FORMAT_VERSION);
    put32(h + 12, HEADER_BYTES);
    memcpy(h + 16, st->model_signature, strnlen(st->model_signature, CKPT_SIGNATURE_MAX - 1));
    put32(h + 272, st->world);
    const uint64_t f[10] = {
        st->epoch,      st->step_in_epoch, st->global_step,    st->seed, st->rng_state,
        st->data_epoch, st->data_position, st->optimizer_iter, pb,       ob};
    for (int i = 0; i < 10; i++) put64(h + 280 + 8 * i, f[i]);
}

static void header_decode(const unsigned char *h, CkptState *st, uint64_t *pb, uint64_t *ob)
{
    memset(st, 0, sizeof *st);
    memcpy(st->model_signature, h + 16, CKPT_SIGNATURE_MAX - 1);
    st->world = get32(h + 272);
    uint64_t *f[10] = {
        &st->epoch,      &st->step_in_epoch, &st->global_step,    &st->seed, &st->rng_state,
        &st->data_epoch, &st->data_position, &st->optimizer_iter, pb,        ob};
    for (int i = 0; i < 10; i++) *f[i] = get64(h + 280 + 8 * i);
}

/* Reads exactly n bytes; -EBADMSG when the file ends first. */
static int read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n > IO_CHUNK * 64 ? IO_CHUNK * 64 : n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -errno;
        if (r == 0) return -EBADMSG;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Parses "ckpt-<digits>.kt" into *step; 0 when the name matches. */
static int name_step(const char *name, uint64_t *step)
{
    if (strncmp(name, "ckpt-", 5) != 0) return -1;
    const char *p = name + 5;
    uint64_t v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 19) v = v * 10 + (uint64_t)(*p++ - '0'), digits++;
    if (digits == 0 || strcmp(p, ".kt") != 0) return -1;
    *step = v;
    return 0;
}

static int cmp_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Lists the steps of dir's checkpoints, newest first, into a malloc'd *steps (caller
 * frees). Returns the count or a negative errno. */
static int list_steps(const char *dir, uint64_t **steps)
{
    *steps = NULL;
    DIR *d = opendir(dir);
    if (!d) return -errno;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        uint64_t s;
        if (name_step(e->d_name, &s) < 0) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            uint64_t *grown = realloc(*steps, cap * sizeof **steps);
            if (!grown) {
                closedir(d);
                free(*steps);
                *steps = NULL;
                return -ENOMEM;
            }
            *steps = grown;
        }
        (*steps)[n++] = s;
    }
    closedir(d);
    if (n) qsort(*steps, n, sizeof **steps, cmp_desc);
    return (int)n;
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -errno;
    int rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

/* Removes temporaries left by a writer that died before its rename. */
static void remove_temporaries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, ".ckpt-", 6) != 0 || len < 4 ||
            strcmp(e->d_name + len - 4, ".tmp") != 0)
            continue;
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path) unlink(path);
    }
    closedir(d);
}

int ckpt_check_counters(uint64_t epoch, uint64_t step_in_epoch, uint64_t global_step,
                        uint64_t optimizer_iter, char *why, size_t whylen)
{
    if (epoch > (uint64_t)INT_MAX - 1)
        snprintf(why, whylen, "epoch %" PRIu64 " out of range (at most %d)", epoch, INT_MAX - 1);
    else if (global_step > (uint64_t)INT64_MAX || optimizer_iter > (uint64_t)INT64_MAX)
        snprintf(why, whylen,
                 "global step %" PRIu64 " or optimizer iterations %" PRIu64 " out of range "
                 "(at most 2^63 - 1)",
                 global_step, optimizer_iter);
    else if (step_in_epoch > global_step || epoch > global_step - step_in_epoch)
        snprintf(why, whylen,
                 "inconsistent position: epoch %" PRIu64 " and step %" PRIu64 " of it exceed "
                 "global step %" PRIu64,
                 epoch, step_in_epoch, global_step);
    else return 0;
    return -EBADMSG;
}

/* Whether the fields of a header whose checksum holds can describe a run: a world of at
 * least one rank and counters that ckpt_check_counters takes. Anything else is a forged
 * or mis-written file whose values would be cast to garbage. Returns 0, or -EBADMSG with
 * the field, its value and the bound in why. */
static int check_fields(const CkptState *st, char *why, size_t whylen)
{
    if (st->world < 1) {
        snprintf(why, whylen, "world size 0 in the header");
        return -EBADMSG;
    }
    return ckpt_check_counters(st->epoch, st->step_in_epoch, st->global_step, st->optimizer_iter,
                               why, whylen);
}

/* Whether this model's checkpoint st holds a data position inside one pass over the
 * run's `examples` training examples (every stream of every sharding is at most that
 * long); beyond it the pipeline would have to walk there. Returns 0, or -EBADMSG with
 * both values in why. */
static int check_position(const CkptState *st, uint64_t examples, char *why, size_t whylen)
{
    if (st->data_position < examples) return 0;
    snprintf(why, whylen,
             "data position %" PRIu64 " outside a pass over the %" PRIu64 " training examples",
             st->data_position, examples);
    return -EBADMSG;
}

static int verify_file(const char *path, CkptState *st, uint64_t *pb, uint64_t *ob, char *why,
                       size_t whylen);

/* Whether a checkpoint that verified belongs to this run: its model signature is one of
 * the nsig in signatures and its arena sizes are this run's (the optimizer's only
 * unless any_opt). Returns 0, or -EPROTO with the two differing values (the first
 * signature) in why. */
static int check_owner_of(const CkptState *got, uint64_t pb, uint64_t ob,
                          const char *const *signatures, int nsig, int any_opt, size_t params_bytes,
                          size_t opt_bytes, char *why, size_t whylen)
{
    int i = 0;
    while (i < nsig && strcmp(got->model_signature, signatures[i]) != 0) i++;
    if (i == nsig) {
        snprintf(why, whylen, "written for model \"%s\", this run's model is \"%s\"",
                 got->model_signature, signatures[0]);
        return -EPROTO;
    }
    if (pb != params_bytes || (!any_opt && ob != opt_bytes)) {
        snprintf(why, whylen,
                 "holds %" PRIu64 " parameter and %" PRIu64 " optimizer bytes, this "
                 "run has %zu and %zu (another optimizer?)",
                 pb, ob, params_bytes, opt_bytes);
        return -EPROTO;
    }
    return 0;
}

static int check_owner(const CkptState *got, uint64_t pb, uint64_t ob, const char *signature,
                       size_t params_bytes, size_t opt_bytes, char *why, size_t whylen)
{
    return check_owner_of(got, pb, ob, &signature, 1, 0, params_bytes, opt_bytes, why, whylen);
}

/* Moves the checkpoint at path aside to <path>.bad, kept for inspection: it is no longer
 * a checkpoint name, so neither a load nor a later save looks at it again. */
static void move_aside(const char *path, const char *why, uint64_t step, uint64_t written)
{
    char bad[PATH_MAX];
    if (snprintf(bad, sizeof bad, "%s.bad", path) >= (int)sizeof bad) return;
    if (rename(path, bad) < 0) {
        if (errno != ENOENT)
            util_log("checkpoint %s: %s; cannot move it aside to %s: %s", path, why, bad,
                     strerror(errno));
        return;
    }
    util_log("checkpoint %s: %s; moved aside to %s%s", path, why, bad,
             step > written ? " (newer than the checkpoint just written, it would have been "
                              "the one a restart looks at first)"
                            : "");
}

/* After a save of step st->global_step: keeps it and the newest keep - 1 older ones that
 * are valid for this run, deletes the older others, and moves every invalid one it
 * looks at aside (move_aside). A newer one than the one just written is one this run did
 * not write (skipped as invalid when the run started, or put there since): it is verified
 * whole; invalid, it is moved aside; valid, it is left and said, never deleted (a restart
 * will resume from it). Older ones are verified whole down to the keep - 1 valid it
 * keeps (in the steady state keep - 1 reads of files the page cache holds, against one
 * write) and deleted unread past them. A file that cannot be read now (an I/O error) is
 * left as it is and not counted as kept. */
static void prune(const char *dir, int keep, const CkptState *st, uint64_t examples,
                  size_t params_bytes, size_t opt_bytes)
{
    uint64_t *steps;
    int n = list_steps(dir, &steps), kept = 1;
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX], why[1024];
        const int newer = steps[i] > st->global_step;
        if (steps[i] == st->global_step || snprintf(path, sizeof path, "%s/ckpt-%" PRIu64 ".kt",
                                                    dir, steps[i]) >= (int)sizeof path)
            continue;
        if (!newer && kept >= keep) {
            if (unlink(path) < 0 && errno != ENOENT)
                util_log("checkpoint %s: cannot delete: %s", path, strerror(errno));
            continue;
        }
        CkptState got;
        uint64_t pb, ob;
        int v = verify_file(path, &got, &pb, &ob, why, sizeof why);
        if (v == 0)
            v = check_owner(&got, pb, ob, st->model_signature, params_bytes, opt_bytes, why,
                            sizeof why);
        if (v == 0) v = check_position(&got, examples, why, sizeof why);
        if (v == -EBADMSG || v == -EPROTO) move_aside(path, why, steps[i], st->global_step);
        else if (v < 0 && v != -ENOENT)
            util_log("checkpoint %s: cannot check it: %s; left as it is", path, why);
        else if (v == 0 && newer)
            util_log("warning: checkpoint %s is valid and newer than step %" PRIu64 " just "
                     "written, which this run did not write: a restart resumes from it (is "
                     "another job writing to %s?)",
                     path, st->global_step, dir);
        else if (v == 0) kept++;
    }
    free(steps);
}

int ckpt_save(const char *dir, int keep, const CkptState *st, uint64_t examples, const void *params,
              size_t params_bytes, const void *opt, size_t opt_bytes, char *err, size_t errlen)
{
    char tmp[PATH_MAX], final[PATH_MAX];
    int rc, fd = -1;
    if (keep < 1) {
        snprintf(err, errlen, "checkpoint keep count %d: expected at least 1", keep);
        return -EINVAL;
    }
    char why[256];
    if ((rc = util_mkdir_p(dir)) < 0) {
        util_io_strerror(rc, why, sizeof why);
        snprintf(err, errlen, "checkpoint directory %s: %s", dir, why);
        return rc;
    }
    remove_temporaries(dir);
    if (snprintf(tmp, sizeof tmp, "%s/.ckpt-%" PRIu64 ".kt.tmp", dir, st->global_step) >=
            (int)sizeof tmp ||
        snprintf(final, sizeof final, "%s/ckpt-%" PRIu64 ".kt", dir, st->global_step) >=
            (int)sizeof final) {
        snprintf(err, errlen, "checkpoint directory %s: path too long", dir);
        return -ENAMETOOLONG;
    }

    unsigned char h[HEADER_BYTES], tail[4];
    header_encode(h, st, params_bytes, opt_bytes);
    uLong crc = crc32_z(0L, Z_NULL, 0);
    crc = crc32_z(crc, h, HEADER_BYTES);
    if (params_bytes) crc = crc32_z(crc, params, params_bytes);
    if (opt_bytes) crc = crc32_z(crc, opt, opt_bytes);
    put32(tail, (uint32_t)crc);

    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        goto err;
    }
    if ((rc = util_write_all(fd, h, HEADER_BYTES)) < 0 ||
        (rc = util_write_all(fd, params, params_bytes)) < 0 ||
        (opt_bytes && (rc = util_write_all(fd, opt, opt_bytes)) < 0) ||
        (rc = util_write_all(fd, tail, sizeof tail)) < 0)
        goto err;
    if (fsync(fd) < 0) {
        rc = -errno;
        goto err;
    }
    if (close(fd) < 0) {
        fd = -1;
        rc = -errno;
        goto err;
    }
    fd = -1;
    if (rename(tmp, final) < 0) {
        rc = -errno;
        goto err;
    }
    if ((rc = fsync_dir(dir)) < 0) {
        util_io_strerror(rc, why, sizeof why);
        snprintf(err, errlen, "checkpoint directory %s: fsync after writing %s: %s", dir, final,
                 why);
        return rc;
    }
    prune(dir, keep, st, examples, params_bytes, opt_bytes);
    return 0;
err:
    util_io_strerror(rc, why, sizeof why);
    snprintf(err, errlen,
             "checkpoint %s: %s while writing it (as %s); the older checkpoints are "
             "kept%s",
             final, why, tmp,
             rc == -ENOSPC || rc == -EDQUOT ? ": free space on the volume or make it larger" : "");
    if (fd >= 0) close(fd);
    unlink(tmp);
    return rc;
}

/* Checks one file: header sanity, exact size, checksum, then the header's fields
 * (check_fields). Fills *st, *pb, *ob. Returns 0, -EBADMSG with the reason in why, or
 * another negative errno. */
static int verify_file(const char *path, CkptState *st, uint64_t *pb, uint64_t *ob, char *why,
                       size_t whylen)
{
    unsigned char h[HEADER_BYTES];
    unsigned char *chunk = NULL;
    int rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        snprintf(why, whylen, "%s", strerror(errno));
        return rc;
    }
    struct stat sb;
    if (fstat(fd, &sb) < 0) {
        rc = -errno;
        snprintf(why, whylen, "%s", strerror(errno));
        goto out;
    }
    rc = -EBADMSG;
    if ((uint64_t)sb.st_size < HEADER_BYTES + 4 || read_all(fd, h, HEADER_BYTES) < 0) {
        snprintf(why, whylen, "truncated: %lld bytes, shorter than a header",
                 (long long)sb.st_size);
        goto out;
    }
    if (memcmp(h, CKPT_MAGIC, 8) != 0) {
        snprintf(why, whylen, "not a kubetrain checkpoint (bad magic)");
        goto out;
    }
    if (get32(h + 8) != CKPT_FORMAT_VERSION || get32(h + 12) != HEADER_BYTES) {
        snprintf(why, whylen, "format version %u, expected %d", get32(h + 8), CKPT_FORMAT_VERSION);
        goto out;
    }
    header_decode(h, st, pb, ob);
    uint64_t want = HEADER_BYTES + 4;
    if (*pb > (uint64_t)sb.st_size || *ob > (uint64_t)sb.st_size ||
        (want += *pb + *ob) != (uint64_t)sb.st_size) {
        snprintf(why, whylen, "truncated or padded: %lld bytes, header says %" PRIu64,
                 (long long)sb.st_size, want);
        goto out;
    }
    uLong crc = crc32_z(crc32_z(0L, Z_NULL, 0), h, HEADER_BYTES);
    chunk = malloc(IO_CHUNK);
    if (!chunk) {
        rc = -ENOMEM;
        snprintf(why, whylen, "out of memory");
        goto out;
    }
    for (uint64_t left = *pb + *ob; left > 0;) {
        size_t n = left > IO_CHUNK ? IO_CHUNK : (size_t)left;
        if (read_all(fd, chunk, n) < 0) {
            snprintf(why, whylen, "read error");
            goto out;
        }
        crc = crc32_z(crc, chunk, n);
        left -= n;
    }
    unsigned char tail[4];
    if (read_all(fd, tail, 4) < 0) {
        snprintf(why, whylen, "read error");
        goto out;
    }
    if (get32(tail) != (uint32_t)crc) {
        snprintf(why, whylen, "checksum mismatch (crc32 %08x, stored %08x)", (unsigned)crc,
                 get32(tail));
        goto out;
    }
    rc = check_fields(st, why, whylen);
out:
    free(chunk);
    close(fd);
    return rc;
}

int ckpt_save_if_newest(const char *dir, int keep, const CkptState *st, uint64_t examples,
                        const void *params, size_t params_bytes, const void *opt, size_t opt_bytes,
                        uint64_t *newer, char *err, size_t errlen)
{
    char lock[PATH_MAX], why[1024];
    int rc;
    if ((rc = util_mkdir_p(dir)) < 0 ||
        snprintf(lock, sizeof lock, "%s/.ckpt.lock", dir) >= (int)sizeof lock) {
        if (rc == 0) rc = -ENAMETOOLONG;
        util_io_strerror(rc, why, sizeof why);
        snprintf(err, errlen, "checkpoint directory %s: %s", dir, why);
        return rc;
    }
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    rc = fd < 0 ? -errno : 0;
    while (rc == 0 && flock(fd, LOCK_EX) < 0)
        if (errno != EINTR) rc = -errno;
    if (rc) {
        util_io_strerror(rc, why, sizeof why);
        snprintf(err, errlen, "checkpoint lock %s: %s", lock, why);
        if (fd >= 0) close(fd);
        return rc;
    }
    uint64_t *steps;
    int n = list_steps(dir, &steps);
    rc = 0;
    for (int i = 0; i < n && steps[i] >= st->global_step && rc == 0; i++) {
        char path[PATH_MAX];
        CkptState got;
        uint64_t pb, ob;
        snprintf(path, sizeof path, "%s/ckpt-%" PRIu64 ".kt", dir, steps[i]);
        if (verify_file(path, &got, &pb, &ob, why, sizeof why) == 0 &&
            check_owner(&got, pb, ob, st->model_signature, params_bytes, opt_bytes, why,
                        sizeof why) == 0 &&
            check_position(&got, examples, why, sizeof why) == 0)
            *newer = steps[i], rc = 1;
    }
    free(steps);
    if (rc == 0)
        rc = ckpt_save(dir, keep, st, examples, params, params_bytes, opt, opt_bytes, err, errlen);
    close(fd); /* and with it the lock */
    return rc;
}

/* ckpt_load_latest for any of nsig signatures; with any_opt the optimizer's state is
 * neither checked nor read (opt NULL). */
static int load_newest(const char *dir, const char *const *signatures, int nsig, int any_opt,
                       uint64_t examples, CkptState *st, void *params, size_t params_bytes,
                       void *opt, size_t opt_bytes, CkptLoadInfo *info, char *err, size_t errlen)
{
    uint64_t *steps;
    int n = list_steps(dir, &steps);
    if (n == -ENOENT || n == 0) {
        free(steps);
        snprintf(err, errlen, "checkpoint directory %s: no checkpoint", dir);
        return -ENOENT;
    }
    if (n < 0) {
        snprintf(err, errlen, "checkpoint directory %s: %s", dir, strerror(-n));
        return n;
    }
    int rc = -EBADMSG, skipped = 0, foreign = 0;
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX], why[1024];
        snprintf(path, sizeof path, "%s/ckpt-%" PRIu64 ".kt", dir, steps[i]);
        CkptState got;
        uint64_t pb, ob;
        int v = verify_file(path, &got, &pb, &ob, why, sizeof why);
        if (v == -EBADMSG) {
            util_log("checkpoint %s: %s; skipped for the previous one", path, why);
            skipped++;
            continue;
        }
        if (v == -ENOENT) continue; /* deleted since the listing (a writer's keep-N) */
        if (v < 0) {
            snprintf(err, errlen, "checkpoint %s: %s", path, why);
            rc = v;
            break;
        }
        if (check_owner_of(&got, pb, ob, signatures, nsig, any_opt, params_bytes, opt_bytes, why,
                           sizeof why)) {
            /* another model's (DESIGN: skipped like a corrupt one); the error when none
             * of this model's follows names the newest */
            util_log("checkpoint %s: %s; skipped for the previous one", path, why);
            if (!foreign++)
                snprintf(err, errlen,
                         "checkpoint %s: %s, and no checkpoint in %s is this "
                         "model's; use another --checkpoint-dir",
                         path, why, dir);
            skipped++;
            continue;
        }
        if (check_position(&got, examples, why, sizeof why)) {
            util_log("checkpoint %s: %s; skipped for the previous one", path, why);
            skipped++;
            continue;
        }
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            rc = -errno;
            snprintf(err, errlen, "checkpoint %s: %s", path, strerror(errno));
            break;
        }
        if (lseek(fd, HEADER_BYTES, SEEK_SET) < 0 ||
            (rc = read_all(fd, params, params_bytes)) < 0 ||
            (!any_opt && opt_bytes && (rc = read_all(fd, opt, opt_bytes)) < 0)) {
            if (rc == 0) rc = -errno;
            snprintf(err, errlen, "checkpoint %s: changed while it was read", path);
            close(fd);
            break;
        }
        close(fd);
        *st = got;
        if (info) {
            snprintf(info->path, sizeof info->path, "%s", path);
            info->skipped = skipped;
        }
        rc = 0;
        break;
    }
    if (rc == -EBADMSG && foreign) rc = -EPROTO;
    else if (rc == -EBADMSG)
        snprintf(err, errlen, "checkpoint directory %s: none of %d checkpoints is valid", dir, n);
    free(steps);
    return rc;
}

int ckpt_newest_from(const char *dir, uint64_t at_least, uint64_t *step)
{
    uint64_t *steps;
    int n = list_steps(dir, &steps), rc = -ENOENT;
    for (int i = 0; i < n && rc && steps[i] >= at_least; i++) {
        char path[4096], why[256];
        CkptState st;
        uint64_t pb, ob;
        snprintf(path, sizeof path, "%s/ckpt-%" PRIu64 ".kt", dir, steps[i]);
        if (verify_file(path, &st, &pb, &ob, why, sizeof why) == 0 && st.global_step == steps[i]) {
            *step = steps[i];
            rc = 0;
        }
    }
    free(steps);
    return rc;
}

int ckpt_load_latest(const char *dir, const char *model_signature, uint64_t examples, CkptState *st,
                     void *params, size_t params_bytes, void *opt, size_t opt_bytes,
                     CkptLoadInfo *info, char *err, size_t errlen)
{
    return load_newest(dir, &model_signature, 1, 0, examples, st, params, params_bytes, opt,
                       opt_bytes, info, err, errlen);
}

int ckpt_load_params(const char *dir, const char *const *signatures, int nsig, CkptState *st,
                     void *params, size_t params_bytes, CkptLoadInfo *info, char *err,
                     size_t errlen)
{
    return load_newest(dir, signatures, nsig, 1, UINT64_MAX, st, params, params_bytes, NULL, 0,
                       info, err, errlen);
}
