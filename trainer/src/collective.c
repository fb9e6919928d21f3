#include "collective.h"

#include "util.h"

#include <stdlib.h>

static int local_allreduce_sum(Collective *c, float *buf, size_t n, char *err, size_t errlen)
{
    (void)c, (void)buf, (void)n, (void)err, (void)errlen;
    return 0;
}

static int local_broadcast(Collective *c, void *buf, size_t n, int root, char *err, size_t errlen)
{
    (void)c, (void)buf, (void)n, (void)root, (void)err, (void)errlen;
    return 0;
}

static int local_barrier(Collective *c, char *err, size_t errlen)
{
    (void)c, (void)err, (void)errlen;
    return 0;
}

static void local_destroy(Collective *c)
{
    free(c);
}

Collective *coll_local_create(void)
{
    Collective *c = xcalloc(1, sizeof *c);
    c->rank = 0;
    c->world = 1;
    c->name = "local";
    c->device_buffers = 1; /* the identity touches no buffer, wherever it lives */
    c->allreduce_sum = local_allreduce_sum;
    c->broadcast = local_broadcast;
    c->barrier = local_barrier;
    c->destroy = local_destroy;
    return c;
}
