/* leader — Lease-based leader election. */
#include "leader.h"

#include "clock.h"
#include "jsonx.h"
#include "metrics.h"
#include "olog.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct Leader {
    KubeClient *client;
    char *ns, *name, *identity;
    double lease_s, renew_deadline_s, retry_s;
    pthread_t thread;
    int renewing;
    ClockStop stop; /* tells the renewal thread to end; it waits on it between tries */
    void (*on_lost)(void *);
    void *ctx;
    pthread_mutex_t mu; /* serialises lease writes between renewing and releasing */
    int held;
    char observed_key[512]; /* holder|renewTime last seen, and when (monotonic) */
    double observed_at;
};

/* MicroTime: RFC 3339 with microseconds. */
static void micro_time(double t, char *out, size_t n)
{
    char base[32];
    clock_format_rfc3339(t, base, sizeof base);
    base[strlen(base) - 1] = 0; /* drop the Z */
    snprintf(out, n, "%s.%06ldZ", base, (long)((t - floor(t)) * 1e6));
}

int leader_lease_decide(const cJSON *lease, const char *ns, const char *name, const char *identity,
                        double lease_s, double now, double observed_age, cJSON **out)
{
    *out = NULL;
    const char *holder = jsonx_str(lease, "spec.holderIdentity");
    double renew = 0;
    long long dur = jsonx_int(lease, "spec.leaseDurationSeconds", 0);
    int renew_ok = clock_parse_rfc3339(jsonx_str(lease, "spec.renewTime"), &renew) == 0;
    int mine = holder && strcmp(holder, identity) == 0;
    int free_ = !holder || !*holder;
    /* Expiry by this process's own clock when it has watched the record, so that clock
     * skew between machines cannot hand the lease over early. */
    int expired =
        observed_age >= 0 ? observed_age > (double)dur : !renew_ok || renew + (double)dur < now;
    if (lease && !mine && !free_ && !expired) return 0;

    cJSON *l = lease ? cJSON_Duplicate(lease, 1) : cJSON_CreateObject();
    cJSON *md = jsonx_ensure_obj(l, "metadata");
    cJSON *spec = jsonx_ensure_obj(l, "spec");
    char ts[48];
    micro_time(now, ts, sizeof ts);
    if (!md || !spec || !jsonx_set_str(l, "apiVersion", "coordination.k8s.io/v1") ||
        !jsonx_set_str(l, "kind", "Lease") || !jsonx_set_str(md, "name", name) ||
        !jsonx_set_str(md, "namespace", ns) || !jsonx_set_str(spec, "holderIdentity", identity) ||
        !jsonx_set_num(spec, "leaseDurationSeconds", lease_s) ||
        !jsonx_set_str(spec, "renewTime", ts))
        goto nomem;
    if (!mine) {
        long long transitions = jsonx_int(lease, "spec.leaseTransitions", 0);
        if (!jsonx_set_str(spec, "acquireTime", ts) ||
            !jsonx_set_num(spec, "leaseTransitions", (double)(transitions + (lease ? 1 : 0))))
            goto nomem;
    }
    *out = l;
    return 1;
nomem:
    cJSON_Delete(l);
    return -ENOMEM;
}

Leader *leader_new(KubeClient *client, const LeaderConfig *cfg)
{
    Leader *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->client = client;
    l->ns = strdup(cfg->ns);
    l->name = strdup(cfg->name);
    l->identity = strdup(cfg->identity);
    l->lease_s = cfg->lease_s > 0 ? cfg->lease_s : 15;
    l->renew_deadline_s = cfg->renew_deadline_s > 0 ? cfg->renew_deadline_s : 10;
    l->retry_s = cfg->retry_s > 0 ? cfg->retry_s : 2;
    pthread_mutex_init(&l->mu, NULL);
    clock_stop_init(&l->stop);
    if (!l->ns || !l->name || !l->identity) {
        leader_free(l);
        return NULL;
    }
    return l;
}

void leader_free(Leader *l)
{
    if (!l) return;
    pthread_mutex_destroy(&l->mu);
    clock_stop_destroy(&l->stop);
    free(l->ns);
    free(l->name);
    free(l->identity);
    free(l);
}

/* One attempt to take or renew. Returns 1 held, 0 held by another, < 0 error. */
static int try_once(Leader *l)
{
    char path[512], err[512];
    KubeResponse r = {0};
    kpath(path, sizeof path, "coordination.k8s.io/v1", l->ns, "leases", l->name, NULL);
    int rc = kclient_request(l->client, "GET", path, NULL, NULL, &r, err, sizeof err);
    if (rc && rc != -ENOENT) {
        olog(OLOG_WARN, NULL, "leader election: %s", err);
        kresp_free(&r);
        return rc;
    }
    /* When the holder and renewTime last changed, by the monotonic clock. */
    char key[512] = "";
    if (rc == 0) {
        const char *h = jsonx_str(r.body, "spec.holderIdentity");
        const char *t = jsonx_str(r.body, "spec.renewTime");
        snprintf(key, sizeof key, "%s|%s", h ? h : "", t ? t : "");
        if (strcmp(key, l->observed_key) != 0) {
            snprintf(l->observed_key, sizeof l->observed_key, "%s", key);
            l->observed_at = clock_mono();
        }
    }
    cJSON *body = NULL;
    int may =
        leader_lease_decide(rc == 0 ? r.body : NULL, l->ns, l->name, l->identity, l->lease_s,
                            clock_wall(), rc == 0 ? clock_mono() - l->observed_at : -1, &body);
    int existed = rc == 0;
    kresp_free(&r);
    if (may <= 0) return may;
    if (existed) {
        rc = kclient_request(l->client, "PUT", path, body, NULL, NULL, err, sizeof err);
    } else {
        kpath(path, sizeof path, "coordination.k8s.io/v1", l->ns, "leases", NULL, NULL);
        cJSON *md = cJSON_GetObjectItemCaseSensitive(body, "metadata");
        cJSON_DeleteItemFromObjectCaseSensitive(md, "resourceVersion");
        rc = kclient_request(l->client, "POST", path, body, NULL, NULL, err, sizeof err);
    }
    cJSON_Delete(body);
    if (rc == -ESTALE || rc == -EEXIST) return 0; /* someone else wrote first */
    if (rc) {
        olog(OLOG_WARN, NULL, "leader election: %s", err);
        return rc;
    }
    return 1;
}

int leader_acquire(Leader *l, ClockStop *stop)
{
    int logged = 0;
    while (!clock_stop_is_set(stop)) {
        pthread_mutex_lock(&l->mu);
        int rc = try_once(l);
        if (rc == 1) l->held = 1;
        pthread_mutex_unlock(&l->mu);
        if (rc == 1) {
            olog(OLOG_INFO, NULL, "leader election: %s holds lease %s/%s", l->identity, l->ns,
                 l->name);
            metrics_set_leader(1);
            return 0;
        }
        if (!logged) {
            olog(OLOG_INFO, NULL, "leader election: waiting for lease %s/%s", l->ns, l->name);
            logged = 1;
        }
        clock_stop_wait(stop, l->retry_s);
    }
    return -ECANCELED;
}

static void *renew_main(void *arg)
{
    Leader *l = arg;
    double last_ok = clock_mono();
    pthread_setname_np(pthread_self(), "kt-leader"); /* as top -H, perf and gdb show it */
    while (!clock_stop_is_set(&l->stop)) {
        clock_stop_wait(&l->stop, l->retry_s);
        if (clock_stop_is_set(&l->stop)) break;
        pthread_mutex_lock(&l->mu);
        int rc = l->held ? try_once(l) : 0;
        pthread_mutex_unlock(&l->mu);
        if (rc == 1) {
            last_ok = clock_mono();
        } else if (rc == 0 || clock_mono() - last_ok > l->renew_deadline_s) {
            olog(OLOG_ERROR, NULL, "leader election: lost lease %s/%s", l->ns, l->name);
            pthread_mutex_lock(&l->mu);
            l->held = 0;
            pthread_mutex_unlock(&l->mu);
            metrics_set_leader(0);
            if (l->on_lost) l->on_lost(l->ctx);
            break;
        }
    }
    return NULL;
}

int leader_start_renewing(Leader *l, void (*on_lost)(void *ctx), void *ctx)
{
    l->on_lost = on_lost;
    l->ctx = ctx;
    clock_stop_set(&l->stop, 0);
    int rc = pthread_create(&l->thread, NULL, renew_main, l);
    if (rc) return -rc;
    l->renewing = 1;
    return 0;
}

void leader_release(Leader *l)
{
    if (!l) return;
    if (l->renewing) {
        clock_stop_set(&l->stop, 1);
        pthread_join(l->thread, NULL);
        l->renewing = 0;
    }
    pthread_mutex_lock(&l->mu);
    if (l->held) {
        char path[512], err[512];
        KubeResponse r = {0};
        kpath(path, sizeof path, "coordination.k8s.io/v1", l->ns, "leases", l->name, NULL);
        if (kclient_request(l->client, "GET", path, NULL, NULL, &r, err, sizeof err) == 0) {
            const char *holder = jsonx_str(r.body, "spec.holderIdentity");
            cJSON *spec =
                jsonx_obj(r.body, "spec") ? cJSON_GetObjectItemCaseSensitive(r.body, "spec") : NULL;
            if (holder && strcmp(holder, l->identity) == 0 && spec) {
                jsonx_set_str(spec, "holderIdentity", "");
                jsonx_set_num(spec, "leaseDurationSeconds", 1);
                if (kclient_request(l->client, "PUT", path, r.body, NULL, NULL, err, sizeof err) ==
                    0)
                    olog(OLOG_INFO, NULL, "leader election: released lease %s/%s", l->ns, l->name);
                else
                    olog(OLOG_WARN, NULL, "leader election: release failed: %s", err);
            }
        }
        kresp_free(&r);
        l->held = 0;
        metrics_set_leader(0);
    }
    pthread_mutex_unlock(&l->mu);
}
