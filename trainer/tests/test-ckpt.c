/* Checkpoints: exact round trip, keep-N pruning (the checkpoint just written and the
 * newest valid ones kept, corrupt or foreign ones moved aside), a corrupt or truncated
 * newest file skipped for the previous, another model refused, a writer that died
 * before its rename leaving the previous checkpoint loadable, and intact files whose
 * header fields no run can have treated as corrupt, and the save of survivors that take
 * turns (ckpt_save_if_newest). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#define NP 10007
#define NO 20014
#define EXAMPLES 60000 /* the training set's examples: data positions stay below */

typedef struct Fixture {
    char dir[64];
    float params[NP], opt[NO];
} Fixture;

static int setup(void **state)
{
    Fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/kt-test-ckpt-XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    Fixture *f = *state;
    DIR *d = opendir(f->dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", f->dir, e->d_name);
        if (e->d_name[0] != '.' || strlen(e->d_name) > 2) unlink(p);
    }
    if (d) closedir(d);
    rmdir(f->dir);
    free(f);
    return 0;
}

static CkptState state_at(uint64_t step)
{
    CkptState s;
    memset(&s, 0, sizeof s); /* padding too: states are compared with memcmp */
    s = (CkptState){.world = 2,
                    .epoch = step / 70,
                    .step_in_epoch = step % 70,
                    .global_step = step,
                    .seed = 1,
                    .rng_state = 0x1234 + step,
                    .data_epoch = step / 100,
                    .data_position = step * 128 % 60000,
                    .optimizer_iter = step};
    snprintf(s.model_signature, sizeof s.model_signature, "tutorial-cnn:1769354");
    return s;
}

static void fill(Fixture *f, uint64_t step)
{
    for (int i = 0; i < NP; i++) f->params[i] = (float)step + (float)i * 0.5f;
    for (int i = 0; i < NO; i++) f->opt[i] = -(float)step - (float)i;
}

static void save(Fixture *f, uint64_t step, int keep)
{
    char err[512];
    fill(f, step);
    CkptState s = state_at(step);
    if (ckpt_save(f->dir, keep, &s, EXAMPLES, f->params, sizeof f->params, f->opt, sizeof f->opt,
                  err, sizeof err) != 0)
        fail_msg("save step %llu: %s", (unsigned long long)step, err);
}

/* Loads into fresh buffers and checks they hold step's contents exactly. */
static void expect_load(Fixture *f, uint64_t step, int skipped)
{
    static float p[NP], o[NO];
    CkptState s;
    CkptLoadInfo info;
    char err[512];
    memset(p, 0, sizeof p), memset(o, 0, sizeof o);
    int rc = ckpt_load_latest(f->dir, "tutorial-cnn:1769354", EXAMPLES, &s, p, sizeof p, o,
                              sizeof o, &info, err, sizeof err);
    if (rc != 0) fail_msg("load: %d %s", rc, err);
    CkptState want = state_at(step);
    assert_memory_equal(&s, &want, sizeof s);
    fill(f, step);
    assert_memory_equal(p, f->params, sizeof p);
    assert_memory_equal(o, f->opt, sizeof o);
    assert_int_equal(info.skipped, skipped);
    char name[64];
    snprintf(name, sizeof name, "/ckpt-%llu.kt", (unsigned long long)step);
    assert_non_null(strstr(info.path, name));
}

static int count_files(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static void path_of(Fixture *f, uint64_t step, char *out, size_t n)
{
    snprintf(out, n, "%s/ckpt-%llu.kt", f->dir, (unsigned long long)step);
}

static void test_round_trip(void **state)
{
    Fixture *f = *state;
    save(f, 140, 5);
    expect_load(f, 140, 0);
}

static void test_empty_dir_and_no_optimizer_state(void **state)
{
    Fixture *f = *state;
    CkptState s;
    char err[512];
    float p[4];
    assert_int_equal(
        ckpt_load_latest(f->dir, "x", EXAMPLES, &s, p, sizeof p, NULL, 0, NULL, err, sizeof err),
        -ENOENT);
    char missing[128];
    snprintf(missing, sizeof missing, "%s/none", f->dir);
    assert_int_equal(
        ckpt_load_latest(missing, "x", EXAMPLES, &s, p, sizeof p, NULL, 0, NULL, err, sizeof err),
        -ENOENT);
    /* SGD has no optimizer state */
    CkptState w = state_at(3);
    snprintf(w.model_signature, sizeof w.model_signature, "x");
    float q[4] = {1, 2, 3, 4};
    assert_int_equal(ckpt_save(f->dir, 2, &w, EXAMPLES, q, sizeof q, NULL, 0, err, sizeof err), 0);
    assert_int_equal(
        ckpt_load_latest(f->dir, "x", EXAMPLES, &s, p, sizeof p, NULL, 0, NULL, err, sizeof err),
        0);
    assert_memory_equal(p, q, sizeof q);
}

static void test_keep_newest_n(void **state)
{
    Fixture *f = *state;
    for (uint64_t step = 10; step <= 100; step += 10) save(f, step, 3);
    assert_int_equal(count_files(f->dir), 3);
    char p[256];
    for (uint64_t step = 80; step <= 100; step += 10) {
        path_of(f, step, p, sizeof p);
        assert_int_equal(access(p, F_OK), 0);
    }
    path_of(f, 70, p, sizeof p);
    assert_int_not_equal(access(p, F_OK), 0);
    expect_load(f, 100, 0);
    /* steps compare as numbers, not names: 1000 is newer than 900 */
    save(f, 900, 3);
    save(f, 1000, 3);
    expect_load(f, 1000, 0);
}

static void flip_byte(const char *path, off_t at)
{
    int fd = open(path, O_RDWR);
    unsigned char b;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x40;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

static void test_corrupt_newest_loads_previous(void **state)
{
    Fixture *f = *state;
    save(f, 10, 5);
    save(f, 20, 5);
    save(f, 30, 5);
    char p[256];
    path_of(f, 30, p, sizeof p);
    flip_byte(p, 360 + 4 * 5000); /* inside the parameters */
    path_of(f, 20, p, sizeof p);
    flip_byte(p, 20); /* inside the header's signature */
    expect_load(f, 10, 2);
}

/* ckpt_newest_from: the newest intact checkpoint named at a step or past it (a worker
 * added back looking for the run's last step); a damaged one does not count, nor one
 * below the step, nor a directory that is not there. */
static void test_newest_from(void **state)
{
    Fixture *f = *state;
    uint64_t step = 0;
    assert_int_equal(ckpt_newest_from(f->dir, 0, &step), -ENOENT);
    assert_int_equal(ckpt_newest_from("/nonexistent/kt-ckpt", 0, &step), -ENOENT);
    save(f, 10, 5);
    save(f, 20, 5);
    assert_int_equal(ckpt_newest_from(f->dir, 20, &step), 0);
    assert_int_equal(step, 20);
    assert_int_equal(ckpt_newest_from(f->dir, 21, &step), -ENOENT);
    assert_int_equal(ckpt_newest_from(f->dir, 5, &step), 0);
    assert_int_equal(step, 20);
    char p[256];
    path_of(f, 20, p, sizeof p);
    flip_byte(p, 360 + 4 * 5000); /* inside the parameters */
    assert_int_equal(ckpt_newest_from(f->dir, 20, &step), -ENOENT);
    assert_int_equal(ckpt_newest_from(f->dir, 5, &step), 0);
    assert_int_equal(step, 10);
}

static void test_truncated_newest_loads_previous(void **state)
{
    Fixture *f = *state;
    save(f, 10, 5);
    save(f, 20, 5);
    char p[256];
    path_of(f, 20, p, sizeof p);
    struct stat sb;
    stat(p, &sb);
    assert_int_equal(truncate(p, sb.st_size - 1), 0);
    expect_load(f, 10, 1);
    assert_int_equal(truncate(p, 100), 0);
    expect_load(f, 10, 1);
    assert_int_equal(truncate(p, 0), 0);
    expect_load(f, 10, 1);
}

static void test_all_corrupt_is_an_error(void **state)
{
    Fixture *f = *state;
    save(f, 10, 5);
    char p[256], err[512];
    path_of(f, 10, p, sizeof p);
    flip_byte(p, 400);
    CkptState s;
    int rc = ckpt_load_latest(f->dir, "tutorial-cnn:1769354", EXAMPLES, &s, f->params,
                              sizeof f->params, f->opt, sizeof f->opt, NULL, err, sizeof err);
    assert_int_equal(rc, -EBADMSG);
    assert_non_null(strstr(err, "none of 1 checkpoints is valid"));
}

static void test_other_model_refused(void **state)
{
    Fixture *f = *state;
    save(f, 10, 5);
    CkptState s;
    char err[512];
    int rc = ckpt_load_latest(f->dir, "mlp:101770", EXAMPLES, &s, f->params, sizeof f->params,
                              f->opt, sizeof f->opt, NULL, err, sizeof err);
    assert_int_equal(rc, -EPROTO);
    assert_non_null(strstr(err, "\"tutorial-cnn:1769354\""));
    assert_non_null(strstr(err, "\"mlp:101770\""));
    /* same signature, another optimizer's state size */
    rc = ckpt_load_latest(f->dir, "tutorial-cnn:1769354", EXAMPLES, &s, f->params, sizeof f->params,
                          f->opt, sizeof f->opt / 2, NULL, err, sizeof err);
    assert_int_equal(rc, -EPROTO);
    assert_non_null(strstr(err, "optimizer"));
}

/* ckpt_load_params (the export command): the parameters of the newest checkpoint whose
 * signature is any of those given, whatever optimizer state it holds beside them; none
 * of them: -EPROTO naming the first. */
static void test_load_params_any_optimizer(void **state)
{
    Fixture *f = *state;
    save(f, 20, 5);
    save(f, 30, 5);
    static float p[NP];
    CkptState s;
    CkptLoadInfo info;
    char err[512];
    const char *sigs[] = {"mlp:101770", "tutorial-cnn:1769354"};
    int rc = ckpt_load_params(f->dir, sigs, 2, &s, p, sizeof p, &info, err, sizeof err);
    if (rc) fail_msg("load params: %d %s", rc, err);
    assert_int_equal(s.global_step, 30);
    fill(f, 30);
    assert_memory_equal(p, f->params, sizeof p);
    assert_non_null(strstr(info.path, "/ckpt-30.kt"));
    rc = ckpt_load_params(f->dir, sigs, 1, &s, p, sizeof p, NULL, err, sizeof err);
    assert_int_equal(rc, -EPROTO);
    assert_non_null(strstr(err, "\"mlp:101770\""));
    /* the signature, but another parameter count */
    rc = ckpt_load_params(f->dir, sigs + 1, 1, &s, p, sizeof p - sizeof(float), NULL, err,
                          sizeof err);
    assert_int_equal(rc, -EPROTO);
}

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    static char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in), fclose(out);
}

/* Another model's checkpoint, newer than this model's (copied in after the last save):
 * skipped for the newest of this model, as a corrupt one is, not a reason to exit 3. */
static void test_foreign_newest_skipped_at_load(void **state)
{
    Fixture *f = *state;
    char other[64], from[256], to[256], err[512];
    snprintf(other, sizeof other, "/tmp/kt-test-ckpt-other-XXXXXX");
    assert_non_null(mkdtemp(other));
    CkptState s = state_at(1000);
    snprintf(s.model_signature, sizeof s.model_signature, "mlp:101770");
    assert_int_equal(
        ckpt_save(other, 1, &s, EXAMPLES, f->params, sizeof f->params, NULL, 0, err, sizeof err),
        0);
    save(f, 10, 5);
    save(f, 20, 5);
    snprintf(from, sizeof from, "%s/ckpt-1000.kt", other);
    path_of(f, 1000, to, sizeof to);
    copy_file(from, to);
    unlink(from);
    rmdir(other);
    expect_load(f, 20, 1);
}

/* A writer killed after writing its temporary file but before the rename. */
static void test_crash_before_rename_keeps_previous(void **state)
{
    Fixture *f = *state;
    save(f, 10, 5);
    save(f, 20, 5);
    char from[256], tmp[256];
    path_of(f, 20, from, sizeof from);
    snprintf(tmp, sizeof tmp, "%s/.ckpt-30.kt.tmp", f->dir);
    /* the dead writer's partial file: the first half of a valid checkpoint */
    FILE *in = fopen(from, "rb"), *out = fopen(tmp, "wb");
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, in);
    fwrite(buf, 1, n / 2, out);
    fclose(in), fclose(out);
    expect_load(f, 20, 0);
    /* the next save clears the leftover */
    save(f, 40, 5);
    assert_int_not_equal(access(tmp, F_OK), 0);
    expect_load(f, 40, 0);

    /* and a real writer SIGKILLed mid-save: whatever it left, a valid one loads */
    pid_t pid = fork();
    if (pid == 0) {
        for (uint64_t step = 50;; step += 10) save(f, step, 5);
    }
    usleep(30 * 1000);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    CkptState s;
    CkptLoadInfo info;
    char err[512];
    assert_int_equal(ckpt_load_latest(f->dir, "tutorial-cnn:1769354", EXAMPLES, &s, f->params,
                                      sizeof f->params, f->opt, sizeof f->opt, &info, err,
                                      sizeof err),
                     0);
    assert_int_equal(info.skipped, 0);
    static float p[NP];
    memcpy(p, f->params, sizeof p);
    fill(f, s.global_step);
    assert_memory_equal(p, f->params, sizeof p);
}

/* Whether dir/name exists, with the listing in the failure message. */
static void expect_file(Fixture *f, const char *name, int present)
{
    char p[256], all[1024] = "";
    snprintf(p, sizeof p, "%s/%s", f->dir, name);
    if ((access(p, F_OK) == 0) == present) return;
    DIR *d = opendir(f->dir);
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            strncat(strncat(all, " ", sizeof all - strlen(all) - 1), e->d_name,
                    sizeof all - strlen(all) - 1);
    closedir(d);
    fail_msg("%s: expected %s; the directory holds:%s", name, present ? "present" : "absent", all);
}

/* A corrupt checkpoint with a higher step than the run's (a restart skipped it for the
 * previous one): with --keep-checkpoints 1 every save used to delete the checkpoint it
 * had just written, by step order, and leave the corrupt one, the only one a restart
 * then found. Now the save keeps what it wrote and moves the corrupt one aside. */
static void test_corrupt_newer_never_wins(void **state)
{
    Fixture *f = *state;
    save(f, 2, 1);
    char from[256], bad[256];
    path_of(f, 2, from, sizeof from);
    path_of(f, 1000, bad, sizeof bad);
    copy_file(from, bad);
    flip_byte(bad, 360 + 4 * 5000);
    expect_load(f, 2, 1);
    for (uint64_t step = 4; step <= 8; step += 2) {
        save(f, step, 1);
        char name[32];
        snprintf(name, sizeof name, "ckpt-%llu.kt", (unsigned long long)step);
        expect_file(f, name, 1);
    }
    expect_file(f, "ckpt-1000.kt", 0);
    expect_file(f, "ckpt-1000.kt.bad", 1);
    expect_file(f, "ckpt-6.kt", 0);
    assert_int_equal(count_files(f->dir), 2);
    expect_load(f, 8, 0);
}

/* A valid checkpoint of another model with a higher step would make every restart exit
 * 3; the save moves it aside too. */
static void test_foreign_newer_moved_aside(void **state)
{
    Fixture *f = *state;
    char err[512];
    CkptState other = state_at(1000);
    snprintf(other.model_signature, sizeof other.model_signature, "mlp:101770");
    assert_int_equal(ckpt_save(f->dir, 5, &other, EXAMPLES, f->params, sizeof f->params, NULL, 0,
                               err, sizeof err),
                     0);
    save(f, 10, 2);
    save(f, 20, 2);
    expect_file(f, "ckpt-1000.kt", 0);
    expect_file(f, "ckpt-1000.kt.bad", 1);
    expect_file(f, "ckpt-10.kt", 1);
    expect_load(f, 20, 0);
}

/* A valid checkpoint of this model newer than the one just written (another writer):
 * never deleted, even by --keep-checkpoints 1, and the one a restart resumes from. */
static void test_valid_newer_left(void **state)
{
    Fixture *f = *state;
    save(f, 10, 5);
    save(f, 1000, 5);
    save(f, 20, 1);
    expect_file(f, "ckpt-1000.kt", 1);
    expect_file(f, "ckpt-20.kt", 1);
    expect_file(f, "ckpt-10.kt", 0);
    expect_load(f, 1000, 0);
}

/* The kept ones are the newest valid: a corrupt older one does not take a place. */
static void test_corrupt_older_not_kept(void **state)
{
    Fixture *f = *state;
    save(f, 10, 3);
    save(f, 20, 3);
    save(f, 30, 3);
    char p[256];
    path_of(f, 20, p, sizeof p);
    flip_byte(p, 360 + 4 * 7);
    save(f, 40, 3);
    expect_file(f, "ckpt-40.kt", 1);
    expect_file(f, "ckpt-30.kt", 1);
    expect_file(f, "ckpt-10.kt", 1);
    expect_file(f, "ckpt-20.kt", 0);
    expect_file(f, "ckpt-20.kt.bad", 1);
    save(f, 50, 3);
    expect_file(f, "ckpt-10.kt", 0);
    assert_int_equal(count_files(f->dir), 4); /* 50, 40, 30 and 20's .bad */
}

/* A checkpoint whose checksum holds but whose header no run can have (forged, or written
 * by a broken writer): a data position of 2^62 made the pipeline walk there one pass at a
 * time, forever, and an epoch over INT_MAX was cast to an int. Each is skipped at load
 * for the previous one, like a corrupt file, and moved aside by the next save. */
static void test_forged_fields_are_corrupt(void **state)
{
    Fixture *f = *state;
    static const struct {
        const char *field;
        uint64_t world, epoch, step_in_epoch, global_step, position, iter;
    } cases[] = {
        {"data position 2^62", 2, 0, 5, 20, 1ull << 62, 20},
        {"data position = examples", 2, 0, 5, 20, EXAMPLES, 20},
        {"epoch 2^32", 2, 1ull << 32, 0, 1ull << 40, 0, 20},
        {"epoch INT_MAX", 2, 2147483647, 0, 1ull << 40, 0, 20},
        {"world 0", 0, 0, 5, 20, 0, 20},
        {"global step 2^63", 2, 0, 5, 1ull << 63, 0, 20},
        {"iterations 2^63", 2, 0, 5, 20, 0, 1ull << 63},
        {"step in epoch past the global step", 2, 0, 21, 20, 0, 20},
        {"epochs past the global step", 2, 16, 5, 20, 0, 20},
    };
    char err[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        teardown(state);
        setup(state);
        f = *state;
        save(f, 10, 5);
        CkptState bad = state_at(20);
        bad.world = (uint32_t)cases[i].world, bad.epoch = cases[i].epoch;
        bad.step_in_epoch = cases[i].step_in_epoch, bad.global_step = cases[i].global_step;
        bad.data_position = cases[i].position, bad.optimizer_iter = cases[i].iter;
        /* the writer checks nothing: a CRC-valid file with these fields, named ckpt-N.kt */
        assert_int_equal(ckpt_save(f->dir, 5, &bad, EXAMPLES, f->params, sizeof f->params, f->opt,
                                   sizeof f->opt, err, sizeof err),
                         0);
        char name[64], aside[80];
        snprintf(name, sizeof name, "ckpt-%llu.kt", (unsigned long long)bad.global_step);
        snprintf(aside, sizeof aside, "%s.bad", name);
        print_message("# %s\n", cases[i].field);
        expect_load(f, 10, 1);
        /* alone in the directory, it is no checkpoint to resume from */
        CkptState s;
        static float p[NP], o[NO];
        char path[256];
        path_of(f, 10, path, sizeof path);
        assert_int_equal(unlink(path), 0);
        int rc = ckpt_load_latest(f->dir, "tutorial-cnn:1769354", EXAMPLES, &s, p, sizeof p, o,
                                  sizeof o, NULL, err, sizeof err);
        assert_int_equal(rc, -EBADMSG);
        save(f, 15, 5);
        expect_file(f, name, 0);
        expect_file(f, aside, 1);
        expect_load(f, 15, 0);
    }
}

/* The bounds themselves are valid: the last position of a pass, the largest epoch. */
static void test_fields_at_their_bounds_load(void **state)
{
    Fixture *f = *state;
    char err[512];
    CkptState s = state_at(1ull << 40);
    s.epoch = 2147483646, s.step_in_epoch = 7, s.data_position = EXAMPLES - 1;
    fill(f, 1);
    assert_int_equal(ckpt_save(f->dir, 5, &s, EXAMPLES, f->params, sizeof f->params, f->opt,
                               sizeof f->opt, err, sizeof err),
                     0);
    CkptState got;
    CkptLoadInfo info;
    int rc = ckpt_load_latest(f->dir, "tutorial-cnn:1769354", EXAMPLES, &got, f->params,
                              sizeof f->params, f->opt, sizeof f->opt, &info, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_int_equal(info.skipped, 0);
    assert_memory_equal(&got, &s, sizeof s);
}

static int save_if_newest(Fixture *f, uint64_t step, uint64_t *newer)
{
    char err[512];
    fill(f, step);
    CkptState s = state_at(step);
    int rc = ckpt_save_if_newest(f->dir, 5, &s, EXAMPLES, f->params, sizeof f->params, f->opt,
                                 sizeof f->opt, newer, err, sizeof err);
    if (rc < 0) fail_msg("save_if_newest step %llu: %s", (unsigned long long)step, err);
    return rc;
}

/* The save of a survivor that gives up: only when no valid checkpoint at its step or
 * later is there; an invalid newer one does not count (and is moved aside). */
static void test_save_if_newest(void **state)
{
    Fixture *f = *state;
    uint64_t newer = 0;
    save(f, 10, 5);
    assert_int_equal(save_if_newest(f, 20, &newer), 0);
    expect_load(f, 20, 0);
    assert_int_equal(save_if_newest(f, 20, &newer), 1);
    assert_int_equal(newer, 20);
    assert_int_equal(save_if_newest(f, 15, &newer), 1);
    assert_int_equal(newer, 20);
    expect_file(f, "ckpt-15.kt", 0);
    char from[256], bad[256];
    path_of(f, 20, from, sizeof from);
    path_of(f, 1000, bad, sizeof bad);
    copy_file(from, bad);
    flip_byte(bad, 360 + 4 * 11);
    assert_int_equal(save_if_newest(f, 30, &newer), 0);
    expect_file(f, "ckpt-1000.kt.bad", 1);
    expect_load(f, 30, 0);
}

/* Survivors that give up at once take turns: while one holds <dir>/.ckpt.lock (here
 * the test, standing for a survivor in the middle of its write) another waits, and then
 * finds the checkpoint written instead of writing it again over the first one's files. */
static void test_save_if_newest_takes_turns(void **state)
{
    Fixture *f = *state;
    char lock[256];
    snprintf(lock, sizeof lock, "%s/.ckpt.lock", f->dir);
    int fd = open(lock, O_RDWR | O_CREAT, 0644);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX), 0);
    pid_t pid = fork();
    if (pid == 0) {
        uint64_t newer = 0;
        int rc = save_if_newest(f, 40, &newer);
        _exit(rc == 1 && newer == 40 ? 0 : 1);
    }
    assert_true(pid > 0);
    usleep(300 * 1000);
    expect_file(f, "ckpt-40.kt", 0); /* the other writer waits for the lock */
    save(f, 40, 5);
    assert_int_equal(flock(fd, LOCK_UN), 0);
    close(fd);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0); /* it found step 40 there and wrote nothing */
    expect_load(f, 40, 0);
}

static void test_bad_keep(void **state)
{
    Fixture *f = *state;
    CkptState s = state_at(1);
    char err[256];
    assert_int_equal(ckpt_save(f->dir, 0, &s, EXAMPLES, f->params, 4, NULL, 0, err, sizeof err),
                     -EINVAL);
    assert_non_null(strstr(err, "keep"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_dir_and_no_optimizer_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keep_newest_n, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_newest_loads_previous, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated_newest_loads_previous, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newest_from, setup, teardown),
        cmocka_unit_test_setup_teardown(test_all_corrupt_is_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_model_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_newest_skipped_at_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_params_any_optimizer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_before_rename_keeps_previous, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_newer_never_wins, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_newer_moved_aside, setup, teardown),
        cmocka_unit_test_setup_teardown(test_valid_newer_left, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_older_not_kept, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_keep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forged_fields_are_corrupt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fields_at_their_bounds_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_save_if_newest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_save_if_newest_takes_turns, setup, teardown),
    };
    return cmocka_run_group_tests_name("ckpt", tests, NULL, NULL);
}
