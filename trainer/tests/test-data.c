/* The input pipeline: shuffle/repeat/batch semantics, determinism, reshuffling per
 * data-epoch, the cursor and seek, and the sharding policies. The dataset is synthetic:
 * example i has label i % 10 and every pixel i % 251, so a batch tells which examples
 * it holds. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "data.h"

#define COUNT 103

static Source ds;

static int setup(void **s)
{
    (void)s;
    ds.count = COUNT, ds.h = 2, ds.w = 2, ds.c = 1, ds.type = SOURCE_U8;
    ds.images = malloc(COUNT * 4);
    ds.labels = malloc(COUNT * sizeof *ds.labels);
    for (int i = 0; i < COUNT; i++) {
        memset((uint8_t *)ds.images + 4 * i, i % 251, 4);
        ds.labels[i] = i % 10;
    }
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    source_free(&ds);
    return 0;
}

static int example_of(const Batch *b, int k)
{
    return (int)(b->x[4 * k] * 255.0f + 0.5f);
}

/* The examples of `steps` batches, in order, into out. */
static void collect(const PipelineConfig *pc, int steps, int *out)
{
    Pipeline *p;
    char err[256];
    assert_int_equal(pipeline_create(&p, &ds, pc, err, sizeof err), 0);
    for (int s = 0; s < steps; s++) {
        const Batch *b = pipeline_next(p);
        assert_int_equal(b->size, pc->batch);
        for (int k = 0; k < b->size; k++) {
            out[s * pc->batch + k] = example_of(b, k);
            assert_int_equal(b->y[k], out[s * pc->batch + k] % 10);
        }
    }
    pipeline_free(p);
}

static void test_each_pass_is_a_permutation(void **s)
{
    (void)s;
    PipelineConfig pc = {.batch = 1, .shuffle_buffer = 60000, .seed = 3, .world = 1};
    int ex[2 * COUNT], seen[COUNT];
    collect(&pc, 2 * COUNT, ex);
    for (int pass = 0; pass < 2; pass++) {
        memset(seen, 0, sizeof seen);
        for (int i = 0; i < COUNT; i++) seen[ex[pass * COUNT + i]]++;
        for (int i = 0; i < COUNT; i++) assert_int_equal(seen[i], 1);
    }
    /* reshuffled each epoch, and actually shuffled */
    assert_memory_not_equal(ex, ex + COUNT, COUNT * sizeof *ex);
    int in_order = 0;
    for (int i = 0; i < COUNT; i++) in_order += ex[i] == i;
    assert_true(in_order < COUNT / 4);
}

static void test_deterministic_and_seeded(void **s)
{
    (void)s;
    PipelineConfig pc = {.batch = 8, .shuffle_buffer = 10, .seed = 5, .world = 1};
    int a[80], b[80], c[80];
    collect(&pc, 10, a);
    collect(&pc, 10, b);
    assert_memory_equal(a, b, sizeof a);
    pc.seed = 6;
    collect(&pc, 10, c);
    assert_memory_not_equal(a, c, sizeof a);
}

static void test_small_buffer_is_local(void **s)
{
    (void)s;
    /* buffer 1 = no shuffling; buffer k: element j comes out no earlier than j-k+1 */
    PipelineConfig pc = {.batch = 4, .shuffle_buffer = 1, .seed = 1, .world = 1};
    int ex[COUNT + 1];
    collect(&pc, 26, ex); /* batches run across the pass boundary (repeat before batch) */
    for (int i = 0; i < COUNT; i++) assert_int_equal(ex[i], i);
    assert_int_equal(ex[COUNT], 0);
    pc.shuffle_buffer = 5;
    collect(&pc, 25, ex);
    for (int i = 0; i < 100; i++) assert_true(ex[i] <= i + 4);
}

static void test_cursor_and_seek(void **s)
{
    (void)s;
    PipelineConfig pc = {.batch = 16, .shuffle_buffer = 60000, .seed = 9, .world = 1};
    int all[16 * 20];
    collect(&pc, 20, all);
    Pipeline *p;
    char err[256];
    assert_int_equal(pipeline_create(&p, &ds, &pc, err, sizeof err), 0);
    for (int i = 0; i < 13; i++) pipeline_next(p);
    PipelineCursor c = pipeline_cursor(p);
    assert_int_equal(c.data_epoch, 2); /* 13*16 = 208 = 2*103 + 2 */
    assert_int_equal(c.position, 2);
    pipeline_next(p);
    pipeline_seek(p, c);
    for (int st = 13; st < 20; st++) {
        const Batch *b = pipeline_next(p);
        for (int k = 0; k < 16; k++) assert_int_equal(example_of(b, k), all[st * 16 + k]);
    }
    pipeline_free(p);
    /* a fresh pipeline seeked there gives the same */
    assert_int_equal(pipeline_create(&p, &ds, &pc, err, sizeof err), 0);
    pipeline_seek(p, c);
    const Batch *b = pipeline_next(p);
    for (int k = 0; k < 16; k++) assert_int_equal(example_of(b, k), all[13 * 16 + k]);
    pipeline_free(p);
}

/* A cursor far past the end of a pass (a forged checkpoint's 2^62) is the cursor it
 * reaches in a later pass, found by division: the pipeline used to walk there one pass
 * at a time, forever. The alarm turns such a walk into a failure of this program. */
static void test_far_position_is_arithmetic(void **s)
{
    (void)s;
    PipelineConfig pc = {.batch = 16, .shuffle_buffer = 60000, .seed = 9, .world = 2, .rank = 1};
    const uint64_t far = 1ull << 62;
    const PipelineCursor same = {.data_epoch = 7 + far / COUNT, .position = far % COUNT};
    Pipeline *p, *q;
    char err[256];
    assert_int_equal(pipeline_create(&p, &ds, &pc, err, sizeof err), 0);
    assert_int_equal(pipeline_create(&q, &ds, &pc, err, sizeof err), 0);
    alarm(20);
    pipeline_seek(p, (PipelineCursor){.data_epoch = 7, .position = far});
    pipeline_seek(q, same);
    for (int st = 0; st < 10; st++) {
        const Batch *a = pipeline_next(p), *b = pipeline_next(q);
        for (int k = 0; k < 16; k++) assert_int_equal(example_of(a, k), example_of(b, k));
        assert_int_equal(a->next.data_epoch, b->next.data_epoch);
        assert_int_equal(a->next.position, b->next.position);
    }
    alarm(0);
    pipeline_free(p);
    pipeline_free(q);
}

static void test_auto_shard_equals_big_batch(void **s)
{
    (void)s;
    /* 3 workers with batch 4 see exactly what 1 worker with batch 12 sees */
    PipelineConfig one = {.batch = 12, .shuffle_buffer = 60000, .seed = 2, .world = 1};
    int big[12 * 20], part[4 * 20];
    collect(&one, 20, big);
    for (int r = 0; r < 3; r++) {
        PipelineConfig pc = {.batch = 4,
                             .shuffle_buffer = 60000,
                             .seed = 2,
                             .rank = r,
                             .world = 3,
                             .policy = SHARD_AUTO};
        collect(&pc, 20, part);
        for (int st = 0; st < 20; st++)
            assert_memory_equal(part + 4 * st, big + 12 * st + 4 * r, 4 * sizeof(int));
    }
    Pipeline *p;
    char err[256];
    PipelineConfig pc = {.batch = 4, .shuffle_buffer = 60000, .seed = 2, .rank = 0, .world = 3};
    assert_int_equal(pipeline_create(&p, &ds, &pc, err, sizeof err), 0);
    assert_int_equal(pipeline_steps_per_pass(p), COUNT / 12);
    pipeline_free(p);
}

/* A global batch re-cut over 2, 3 and 4 ranks (10 = 5+5 = 3+3+4 = 2+3+2+3): the slices
 * tile each step in rank order, so any world walks the examples of one worker with
 * batch 10, and the slices' sizes are data_slice's. */
static void test_global_batch_uneven_slices(void **s)
{
    (void)s;
    enum { G = 10, STEPS = 20 };
    PipelineConfig one = {.batch = G, .shuffle_buffer = 60000, .seed = 6, .world = 1};
    int big[G * STEPS];
    collect(&one, STEPS, big);
    static const int sizes[5][4] = {[2] = {5, 5}, [3] = {3, 3, 4}, [4] = {2, 3, 2, 3}};
    for (int w = 2; w <= 4; w++) {
        int at = 0;
        for (int r = 0; r < w; r++) {
            int first, len = data_slice(G, w, r, &first);
            assert_int_equal(len, sizes[w][r]);
            assert_int_equal(first, at);
            /* --per-worker-batch (.batch) does not count once the global batch is set */
            PipelineConfig pc = {.batch = 7,
                                 .global_batch = G,
                                 .shuffle_buffer = 60000,
                                 .seed = 6,
                                 .rank = r,
                                 .world = w};
            Pipeline *p;
            char err[256];
            assert_int_equal(pipeline_create(&p, &ds, &pc, err, sizeof err), 0);
            assert_int_equal(pipeline_steps_per_pass(p), COUNT / G);
            for (int st = 0; st < STEPS; st++) {
                const Batch *b = pipeline_next(p);
                assert_int_equal(b->size, len);
                for (int k = 0; k < len; k++)
                    assert_int_equal(example_of(b, k), big[st * G + first + k]);
            }
            pipeline_free(p);
            at += len;
        }
        assert_int_equal(at, G);
    }
}

static void test_global_batch_below_world(void **s)
{
    (void)s;
    PipelineConfig pc = {.batch = 4, .global_batch = 2, .shuffle_buffer = 10, .world = 3};
    Pipeline *p = NULL;
    char err[256];
    assert_int_equal(pipeline_create(&p, &ds, &pc, err, sizeof err), -EINVAL);
    assert_string_equal(err, "global batch 2 over 3 workers: expected at least one example per "
                             "worker");
}

static void test_file_and_off_shards(void **s)
{
    (void)s;
    int ex[2][50];
    for (int r = 0; r < 2; r++) {
        PipelineConfig pc = {.batch = 5,
                             .shuffle_buffer = 60000,
                             .seed = 4,
                             .rank = r,
                             .world = 2,
                             .policy = SHARD_FILE};
        /* the source holds the rank's files alone (source.h), so the rank walks all of
         * it: 30 steps of 5 are one pass of 103 and 47 of the next; after each step its
         * cursor is the one computed from the step alone, as a resume computes it */
        Pipeline *p;
        char err[256];
        assert_int_equal(pipeline_create(&p, &ds, &pc, err, sizeof err), 0);
        for (uint64_t step = 1; step <= 30; step++) {
            pipeline_next(p);
            PipelineCursor got = pipeline_cursor(p), want = pipeline_cursor_at_step(p, step);
            assert_int_equal(got.data_epoch, want.data_epoch);
            assert_int_equal(got.position, want.position);
        }
        assert_int_equal(pipeline_cursor(p).data_epoch, 1);
        assert_int_equal(pipeline_cursor(p).position, 150 - COUNT);
        pipeline_free(p);
        collect(&pc, 10, ex[r]);
    }
    for (int r = 0; r < 2; r++) {
        PipelineConfig pc = {.batch = 5,
                             .shuffle_buffer = 60000,
                             .seed = 4,
                             .rank = r,
                             .world = 2,
                             .policy = SHARD_OFF};
        collect(&pc, 10, ex[r]);
    }
    assert_memory_not_equal(ex[0], ex[1], sizeof ex[0]);
    ShardPolicy sp;
    assert_int_equal(data_parse_shard_policy("file", &sp), 0);
    assert_int_equal(sp, SHARD_FILE);
    assert_int_not_equal(data_parse_shard_policy("rows", &sp), 0);
}

static void test_too_big_batch(void **s)
{
    (void)s;
    PipelineConfig pc = {.batch = 60, .shuffle_buffer = 10, .seed = 1, .rank = 0, .world = 2};
    Pipeline *p = NULL;
    char err[256];
    assert_int_not_equal(pipeline_create(&p, &ds, &pc, err, sizeof err), 0);
    assert_non_null(strstr(err, "fewer than one step takes (120)"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_pass_is_a_permutation),
        cmocka_unit_test(test_deterministic_and_seeded),
        cmocka_unit_test(test_small_buffer_is_local),
        cmocka_unit_test(test_cursor_and_seek),
        cmocka_unit_test(test_far_position_is_arithmetic),
        cmocka_unit_test(test_auto_shard_equals_big_batch),
        cmocka_unit_test(test_global_batch_uneven_slices),
        cmocka_unit_test(test_global_batch_below_world),
        cmocka_unit_test(test_file_and_off_shards),
        cmocka_unit_test(test_too_big_batch),
    };
    return cmocka_run_group_tests_name("data", tests, setup, teardown);
}
