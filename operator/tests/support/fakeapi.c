/* fakeapi — in-memory API server for tests; see fakeapi.h. */
#include "fakeapi.h"

#include "clock.h"
#include "jsonx.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct Res {
    char prefix[128], plural[64], ns[128], name[256], sub[32];
} Res;

typedef struct Obj {
    Res r;
    cJSON *obj;
} Obj;

typedef struct Event {
    long long rv;
    char type[12];
    Res r;
    char *json;
} Event;

/* Requests of one method: served, and waiting to be served now and at most
 * (fakeapi_most_at_once). */
typedef struct Count {
    char method[16];
    unsigned long n;
    int now, most;
} Count;

/* fakeapi_refuse_create: a create of `name` gets `code` after `seconds`. */
typedef struct Refusal {
    char name[256];
    int code;
    double seconds;
} Refusal;

struct FakeApi {
    int fd, port;
    volatile int stop;
    pthread_t accept_thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    Obj *objs;
    size_t nobjs, capobjs;
    Event *events;
    size_t nevents, capevents;
    long long rv, min_rv; /* watches from before min_rv get 410 */
    long long uid;
    int expire_gen;
    int unavailable; /* answer 503 and end open watches, as a restarting server would */
    int active;      /* connection threads alive */
    char discovery[128], discovery_plural[64]; /* fakeapi_serve_discovery */
    Count counts[16];
    double delay; /* fakeapi_set_delay */
    Refusal refusals[8];
    char gate[128]; /* fakeapi_gate_queued_pods; "" none */
};

/* /api/v1[/namespaces/NS]/PLURAL[/NAME[/SUB]] or /apis/G/V[...]. Returns 0 or -1. */
static int parse_path(const char *path, Res *r)
{
    memset(r, 0, sizeof *r);
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    char *q = strchr(buf, '?');
    if (q) *q = 0;
    char *parts[12];
    int n = 0;
    char *save = NULL; /* strtok_r: every connection has its own thread */
    for (char *s = strtok_r(buf, "/", &save); s && n < 12; s = strtok_r(NULL, "/", &save))
        parts[n++] = s;
    int i;
    if (n >= 2 && strcmp(parts[0], "api") == 0) {
        snprintf(r->prefix, sizeof r->prefix, "/api/%s", parts[1]);
        i = 2;
    } else if (n >= 3 && strcmp(parts[0], "apis") == 0) {
        snprintf(r->prefix, sizeof r->prefix, "/apis/%s/%s", parts[1], parts[2]);
        i = 3;
    } else {
        return -1;
    }
    if (i + 1 < n && strcmp(parts[i], "namespaces") == 0 && i + 2 < n) {
        snprintf(r->ns, sizeof r->ns, "%s", parts[i + 1]);
        i += 2;
    }
    if (i >= n) return -1;
    snprintf(r->plural, sizeof r->plural, "%s", parts[i++]);
    if (i < n) snprintf(r->name, sizeof r->name, "%s", parts[i++]);
    if (i < n) snprintf(r->sub, sizeof r->sub, "%s", parts[i++]);
    return 0;
}

static int same_collection(const Res *coll, const Res *obj)
{
    return strcmp(coll->prefix, obj->prefix) == 0 && strcmp(coll->plural, obj->plural) == 0 &&
           (!*coll->ns || strcmp(coll->ns, obj->ns) == 0);
}

static Obj *find(FakeApi *f, const Res *r)
{
    for (size_t i = 0; i < f->nobjs; i++) {
        Obj *o = &f->objs[i];
        if (same_collection(r, &o->r) && strcmp(o->r.ns, r->ns) == 0 &&
            strcmp(o->r.name, r->name) == 0)
            return o;
    }
    return NULL;
}

static void set_rv(cJSON *obj, long long rv)
{
    char b[32];
    snprintf(b, sizeof b, "%lld", rv);
    jsonx_set_str(jsonx_ensure_obj(obj, "metadata"), "resourceVersion", b);
}

/* Appends an event (lock held) and wakes the watchers. */
static void emit(FakeApi *f, const char *type, const Res *r, const cJSON *obj)
{
    if (f->nevents == f->capevents) {
        f->capevents = f->capevents ? f->capevents * 2 : 256;
        f->events = realloc(f->events, f->capevents * sizeof *f->events);
    }
    Event *e = &f->events[f->nevents++];
    e->rv = f->rv;
    snprintf(e->type, sizeof e->type, "%s", type);
    e->r = *r;
    e->json = cJSON_PrintUnformatted(obj);
    pthread_cond_broadcast(&f->cond);
}

/* Counts a request of `method` (lock held); returns its Count, NULL past 16 methods. */
static Count *count(FakeApi *f, const char *method)
{
    for (int i = 0; i < 16; i++) {
        if (!f->counts[i].method[0])
            snprintf(f->counts[i].method, sizeof f->counts[i].method, "%s", method);
        if (strcmp(f->counts[i].method, method) == 0) {
            f->counts[i].n++;
            return &f->counts[i];
        }
    }
    return NULL;
}

unsigned long fakeapi_requests(FakeApi *f, const char *method)
{
    pthread_mutex_lock(&f->mu);
    unsigned long n = 0;
    for (int i = 0; i < 16; i++)
        if (strcmp(f->counts[i].method, method) == 0) n = f->counts[i].n;
    pthread_mutex_unlock(&f->mu);
    return n;
}

int fakeapi_most_at_once(FakeApi *f, const char *method)
{
    pthread_mutex_lock(&f->mu);
    int most = 0;
    for (int i = 0; i < 16; i++)
        if (strcmp(f->counts[i].method, method) == 0) {
            most = f->counts[i].most;
            f->counts[i].most = f->counts[i].now;
        }
    pthread_mutex_unlock(&f->mu);
    return most;
}

void fakeapi_set_delay(FakeApi *f, double seconds)
{
    pthread_mutex_lock(&f->mu);
    f->delay = seconds;
    pthread_mutex_unlock(&f->mu);
}

void fakeapi_gate_queued_pods(FakeApi *f, const char *gate)
{
    pthread_mutex_lock(&f->mu);
    snprintf(f->gate, sizeof f->gate, "%s", gate ? gate : "");
    pthread_mutex_unlock(&f->mu);
}

void fakeapi_refuse_create(FakeApi *f, const char *name, int code, double seconds)
{
    pthread_mutex_lock(&f->mu);
    Refusal *free_slot = NULL, *same = NULL;
    for (int i = 0; i < 8; i++) {
        Refusal *r = &f->refusals[i];
        if (r->code && strcmp(r->name, name) == 0) same = r;
        if (!r->code && !free_slot) free_slot = r;
    }
    Refusal *r = same ? same : code ? free_slot : NULL;
    if (r) {
        snprintf(r->name, sizeof r->name, "%s", name);
        r->code = code;
        r->seconds = seconds;
    }
    pthread_mutex_unlock(&f->mu);
}

/* Creates (lock held). Returns the stored object's copy, or NULL with *code. */
static cJSON *create_locked(FakeApi *f, const Res *coll, cJSON *obj, int *code)
{
    Res r = *coll;
    const char *name = jsonx_str(obj, "metadata.name");
    const char *gen = jsonx_str(obj, "metadata.generateName");
    char nbuf[256];
    if (!name && gen) {
        snprintf(nbuf, sizeof nbuf, "%s%05lld", gen, ++f->uid);
        jsonx_set_str(jsonx_ensure_obj(obj, "metadata"), "name", nbuf);
        name = jsonx_str(obj, "metadata.name");
    }
    if (!name) {
        *code = 422;
        cJSON_Delete(obj);
        return NULL;
    }
    snprintf(r.name, sizeof r.name, "%s", name);
    if (!*r.ns) {
        const char *ns = jsonx_str(obj, "metadata.namespace");
        snprintf(r.ns, sizeof r.ns, "%s", ns ? ns : "");
    }
    if (find(f, &r)) {
        *code = 409;
        cJSON_Delete(obj);
        return NULL;
    }
    cJSON *md = jsonx_ensure_obj(obj, "metadata");
    char b[64], ts[40];
    snprintf(b, sizeof b, "uid-%lld", ++f->uid);
    jsonx_set_str(md, "uid", b);
    jsonx_set_str(md, "namespace", r.ns);
    jsonx_set_num(md, "generation", 1);
    clock_format_rfc3339(clock_wall(), ts, sizeof ts);
    jsonx_set_str(md, "creationTimestamp", ts);
    set_rv(obj, ++f->rv);
    if (f->nobjs == f->capobjs) {
        f->capobjs = f->capobjs ? f->capobjs * 2 : 64;
        f->objs = realloc(f->objs, f->capobjs * sizeof *f->objs);
    }
    f->objs[f->nobjs++] = (Obj){r, obj};
    emit(f, "ADDED", &r, obj);
    *code = 201;
    return cJSON_Duplicate(obj, 1);
}

static void remove_at(FakeApi *f, Obj *o)
{
    set_rv(o->obj, ++f->rv);
    emit(f, "DELETED", &o->r, o->obj);
    cJSON_Delete(o->obj);
    *o = f->objs[--f->nobjs];
}

/* ------------------------------------------------------------------------------------
 * Direct access */

cJSON *fakeapi_create(FakeApi *f, const char *collection, const char *json)
{
    Res r;
    if (parse_path(collection, &r)) return NULL;
    cJSON *obj = cJSON_Parse(json);
    if (!obj) return NULL;
    pthread_mutex_lock(&f->mu);
    int code;
    cJSON *out = create_locked(f, &r, obj, &code);
    pthread_mutex_unlock(&f->mu);
    return out;
}

cJSON *fakeapi_get(FakeApi *f, const char *path)
{
    Res r;
    if (parse_path(path, &r)) return NULL;
    pthread_mutex_lock(&f->mu);
    Obj *o = find(f, &r);
    cJSON *out = o ? cJSON_Duplicate(o->obj, 1) : NULL;
    pthread_mutex_unlock(&f->mu);
    return out;
}

int fakeapi_put(FakeApi *f, const char *path, const cJSON *obj)
{
    Res r;
    if (parse_path(path, &r)) return -EINVAL;
    pthread_mutex_lock(&f->mu);
    Obj *o = find(f, &r);
    if (!o) {
        pthread_mutex_unlock(&f->mu);
        return -ENOENT;
    }
    cJSON_Delete(o->obj);
    o->obj = cJSON_Duplicate(obj, 1);
    set_rv(o->obj, ++f->rv);
    emit(f, "MODIFIED", &o->r, o->obj);
    pthread_mutex_unlock(&f->mu);
    return 0;
}

int fakeapi_delete(FakeApi *f, const char *path)
{
    Res r;
    if (parse_path(path, &r)) return -EINVAL;
    pthread_mutex_lock(&f->mu);
    Obj *o = find(f, &r);
    if (o) remove_at(f, o);
    pthread_mutex_unlock(&f->mu);
    return o ? 0 : -ENOENT;
}

cJSON *fakeapi_list(FakeApi *f, const char *collection)
{
    Res r;
    cJSON *arr = cJSON_CreateArray();
    if (parse_path(collection, &r)) return arr;
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < f->nobjs; i++)
        if (same_collection(&r, &f->objs[i].r))
            cJSON_AddItemToArray(arr, cJSON_Duplicate(f->objs[i].obj, 1));
    pthread_mutex_unlock(&f->mu);
    return arr;
}

void fakeapi_expire(FakeApi *f)
{
    pthread_mutex_lock(&f->mu);
    f->min_rv = f->rv + 1;
    f->expire_gen++;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mu);
}

void fakeapi_serve_discovery(FakeApi *f, const char *group_version, const char *plural)
{
    pthread_mutex_lock(&f->mu);
    snprintf(f->discovery, sizeof f->discovery, "/apis/%s", group_version);
    snprintf(f->discovery_plural, sizeof f->discovery_plural, "%s", plural);
    pthread_mutex_unlock(&f->mu);
}

void fakeapi_set_unavailable(FakeApi *f, int on)
{
    pthread_mutex_lock(&f->mu);
    f->unavailable = on;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mu);
}

/* ------------------------------------------------------------------------------------
 * HTTP */

static void send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

static void reply(int fd, int code, const cJSON *body)
{
    char *s = body ? cJSON_PrintUnformatted(body) : NULL;
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     code, s ? strlen(s) : 0);
    send_all(fd, head, (size_t)n);
    if (s) send_all(fd, s, strlen(s));
    free(s);
}

static void reply_status(int fd, int code, const char *reason, const char *msg)
{
    cJSON *st = cJSON_CreateObject();
    jsonx_set_str(st, "kind", "Status");
    jsonx_set_str(st, "status", "Failure");
    jsonx_set_num(st, "code", code);
    jsonx_set_str(st, "reason", reason);
    jsonx_set_str(st, "message", msg);
    reply(fd, code, st);
    cJSON_Delete(st);
}

static void query_param(const char *path, const char *name, char *out, size_t n)
{
    out[0] = 0;
    const char *q = strchr(path, '?');
    size_t len = strlen(name);
    for (const char *p = q; p && *p; p = strchr(p + 1, '&')) {
        if (strncmp(p + 1, name, len) == 0 && p[1 + len] == '=') {
            const char *v = p + 2 + len;
            size_t k = 0;
            for (; *v && *v != '&' && k + 1 < n; v++) {
                if (*v == '%' && v[1] && v[2]) {
                    char hex[3] = {v[1], v[2], 0};
                    out[k++] = (char)strtol(hex, NULL, 16);
                    v += 2;
                } else {
                    out[k++] = *v;
                }
            }
            out[k] = 0;
            return;
        }
    }
}

static int selector_matches(const char *sel, const cJSON *obj)
{
    if (!*sel) return 1;
    char key[256];
    const char *eq = strchr(sel, '=');
    if (!eq) return 1;
    snprintf(key, sizeof key, "%.*s", (int)(eq - sel), sel);
    const char *v = jsonx_key_str(jsonx_obj(obj, "metadata.labels"), key);
    return v && strcmp(v, eq + 1) == 0;
}

static void send_chunk(int fd, const char *s)
{
    char h[32];
    size_t n = strlen(s);
    int k = snprintf(h, sizeof h, "%zx\r\n", n + 1);
    send_all(fd, h, (size_t)k);
    send_all(fd, s, n);
    send_all(fd, "\n\r\n", 3);
}

static void serve_watch(FakeApi *f, int fd, const Res *coll, const char *path)
{
    char rvs[32], sel[256], to[32];
    query_param(path, "resourceVersion", rvs, sizeof rvs);
    query_param(path, "labelSelector", sel, sizeof sel);
    query_param(path, "timeoutSeconds", to, sizeof to);
    long long cursor = atoll(rvs);
    double end = clock_mono() + (*to ? atof(to) : 300);
    const char *head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                       "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    send_all(fd, head, strlen(head));
    pthread_mutex_lock(&f->mu);
    int gen = f->expire_gen;
    for (;;) {
        if (__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE) || f->unavailable) break;
        if (cursor + 1 < f->min_rv || gen != f->expire_gen) {
            pthread_mutex_unlock(&f->mu);
            send_chunk(fd, "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,"
                           "\"reason\":\"Expired\",\"message\":\"too old resource version\"}}");
            pthread_mutex_lock(&f->mu);
            break;
        }
        size_t i = 0;
        while (i < f->nevents && f->events[i].rv <= cursor)
            i++;
        int sent = 0;
        for (; i < f->nevents; i++) {
            Event *e = &f->events[i];
            cursor = e->rv;
            if (!same_collection(coll, &e->r)) continue;
            cJSON *obj = cJSON_Parse(e->json);
            int match = selector_matches(sel, obj);
            cJSON_Delete(obj);
            if (!match) continue;
            size_t n = strlen(e->json) + 64;
            char *line = malloc(n);
            snprintf(line, n, "{\"type\":\"%s\",\"object\":%s}", e->type, e->json);
            pthread_mutex_unlock(&f->mu);
            send_chunk(fd, line);
            free(line);
            pthread_mutex_lock(&f->mu);
            sent = 1;
        }
        if (sent) continue;
        if (clock_mono() >= end) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&f->cond, &f->mu, &ts);
    }
    pthread_mutex_unlock(&f->mu);
    send_all(fd, "0\r\n\r\n", 5);
}

/* RFC 7386: target with patch merged in; takes both, returns the result (NULL: the
 * member is removed). */
static cJSON *merge_patch(cJSON *target, cJSON *patch)
{
    if (!cJSON_IsObject(patch)) {
        cJSON_Delete(target);
        return cJSON_Duplicate(patch, 1);
    }
    if (!cJSON_IsObject(target)) {
        cJSON_Delete(target);
        target = cJSON_CreateObject();
    }
    cJSON *m;
    cJSON_ArrayForEach(m, patch)
    {
        cJSON *old = cJSON_DetachItemFromObjectCaseSensitive(target, m->string);
        if (cJSON_IsNull(m)) {
            cJSON_Delete(old);
            continue;
        }
        cJSON *v = merge_patch(old, m);
        if (v) cJSON_AddItemToObject(target, m->string, v);
    }
    return target;
}

/* Replaces o's object with next (taken over), raises its resourceVersion, tells the
 * watchers and answers 200 with the stored object; called with f->mu held, which it
 * releases. */
static void store_modified(FakeApi *f, int fd, Obj *o, cJSON *next)
{
    cJSON_Delete(o->obj);
    o->obj = next;
    set_rv(next, ++f->rv);
    emit(f, "MODIFIED", &o->r, next);
    cJSON *c = cJSON_Duplicate(next, 1);
    pthread_mutex_unlock(&f->mu);
    reply(fd, 200, c);
    cJSON_Delete(c);
}

static void nap(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static const char *reason_for(int code)
{
    return code == 403   ? "Forbidden"
           : code == 404 ? "NotFound"
           : code == 409 ? "AlreadyExists"
           : code == 422 ? "Invalid"
           : code == 500 ? "InternalError"
                         : "Error";
}

/* Waits as a loaded server would before serving a request (lock not held), counted in
 * `n` (its method's Count, or NULL) meanwhile: the waits of requests sent one after
 * another never overlap, since each ends before its answer starts. For a create that
 * fakeapi_refuse_create names, answers the refusal and returns 1. */
static int delay_or_refuse(FakeApi *f, int fd, Count *n, const char *method, const Res *r,
                           const cJSON *in)
{
    const char *name = jsonx_str(in, "metadata.name");
    int code = 0;
    pthread_mutex_lock(&f->mu);
    if (n && ++n->now > n->most) n->most = n->now;
    double wait = f->delay;
    for (int i = 0; i < 8 && strcmp(method, "POST") == 0 && !*r->name && name; i++)
        if (f->refusals[i].code && strcmp(f->refusals[i].name, name) == 0) {
            code = f->refusals[i].code;
            wait = f->refusals[i].seconds;
        }
    pthread_mutex_unlock(&f->mu);
    if (wait > 0) nap(wait);
    if (n) {
        pthread_mutex_lock(&f->mu);
        n->now--;
        pthread_mutex_unlock(&f->mu);
    }
    if (!code) return 0;
    char msg[512];
    snprintf(msg, sizeof msg, "%s \"%s\": refused by the test", r->plural, name);
    reply_status(fd, code, reason_for(code), msg);
    return 1;
}

static void handle(FakeApi *f, int fd)
{
    char *req = malloc(1 << 20);
    size_t len = 0;
    char *body = NULL;
    while (len < (1u << 20) - 1) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 5000) <= 0) goto out;
        ssize_t r = recv(fd, req + len, (1u << 20) - 1 - len, 0);
        if (r <= 0) goto out;
        len += (size_t)r;
        req[len] = 0;
        char *end = strstr(req, "\r\n\r\n");
        if (end) {
            const char *cl = strcasestr(req, "Content-Length:");
            size_t want = cl ? (size_t)atol(cl + 15) : 0;
            if (len - (size_t)(end + 4 - req) >= want) {
                body = end + 4;
                break;
            }
        }
    }
    if (!body) goto out;
    char method[16], path[2048], q[32];
    if (sscanf(req, "%15s %2047s", method, path) != 2) goto out;
    Res r;
    if (parse_path(path, &r)) {
        pthread_mutex_lock(&f->mu);
        count(f, "DISCOVERY");
        int served = *f->discovery && strcmp(path, f->discovery) == 0;
        cJSON *list = NULL;
        if (served) {
            list = cJSON_CreateObject();
            cJSON *res = jsonx_set(list, "resources", cJSON_CreateArray());
            cJSON *one = cJSON_CreateObject();
            jsonx_set_str(list, "kind", "APIResourceList");
            jsonx_set_str(list, "groupVersion", f->discovery + 6);
            jsonx_set_str(one, "name", f->discovery_plural);
            cJSON_AddItemToArray(res, one);
        }
        pthread_mutex_unlock(&f->mu);
        if (served)
            reply(fd, 200, list);
        else
            reply_status(fd, 404, "NotFound", "no such path");
        cJSON_Delete(list);
        goto out;
    }
    /* PodGroups only in the group version discovery lists, as a real API server serves
     * them only where the Workload API is on: elsewhere 404. */
    pthread_mutex_lock(&f->mu);
    int unserved = strcmp(r.plural, "podgroups") == 0 && strcmp(r.prefix, f->discovery) != 0;
    if (unserved) count(f, method);
    pthread_mutex_unlock(&f->mu);
    if (unserved) {
        reply_status(fd, 404, "NotFound", "the server could not find the requested resource");
        goto out;
    }
    query_param(path, "watch", q, sizeof q);
    int watch = *q != 0, listing = strcmp(method, "GET") == 0 && !*r.name;
    pthread_mutex_lock(&f->mu);
    Count *counted = count(f, watch ? "WATCH" : listing ? "LIST" : method);
    int unavailable = f->unavailable;
    pthread_mutex_unlock(&f->mu);
    if (unavailable) {
        reply_status(fd, 503, "ServiceUnavailable", "the server is restarting");
        goto out;
    }
    if (watch) {
        serve_watch(f, fd, &r, path);
        goto out;
    }
    cJSON *in = *body ? cJSON_Parse(body) : NULL;
    if (!listing && delay_or_refuse(f, fd, counted, method, &r, in)) {
        cJSON_Delete(in);
        goto out;
    }
    pthread_mutex_lock(&f->mu);
    if (listing) {
        char sel[256], rv[32];
        query_param(path, "labelSelector", sel, sizeof sel);
        cJSON *list = cJSON_CreateObject(), *items = cJSON_AddArrayToObject(list, "items");
        jsonx_set_str(list, "kind", "List");
        snprintf(rv, sizeof rv, "%lld", f->rv);
        jsonx_set_str(jsonx_ensure_obj(list, "metadata"), "resourceVersion", rv);
        /* Pages of `limit` objects; the continue token is where the next one starts. */
        char lim[32], cont[32];
        query_param(path, "limit", lim, sizeof lim);
        query_param(path, "continue", cont, sizeof cont);
        size_t i = *cont ? (size_t)atoll(cont) : 0, n = 0;
        size_t most = *lim && atoll(lim) > 0 ? (size_t)atoll(lim) : (size_t)-1;
        for (; i < f->nobjs && n < most; i++)
            if (same_collection(&r, &f->objs[i].r) && selector_matches(sel, f->objs[i].obj)) {
                cJSON_AddItemToArray(items, cJSON_Duplicate(f->objs[i].obj, 1));
                n++;
            }
        if (n == most && i < f->nobjs) {
            char next[32];
            snprintf(next, sizeof next, "%zu", i);
            jsonx_set_str(jsonx_ensure_obj(list, "metadata"), "continue", next);
        }
        pthread_mutex_unlock(&f->mu);
        reply(fd, 200, list);
        cJSON_Delete(list);
    } else if (strcmp(method, "GET") == 0) {
        Obj *o = find(f, &r);
        cJSON *c = o ? cJSON_Duplicate(o->obj, 1) : NULL;
        pthread_mutex_unlock(&f->mu);
        if (c)
            reply(fd, 200, c);
        else
            reply_status(fd, 404, "NotFound", "not found");
        cJSON_Delete(c);
    } else if (strcmp(method, "POST") == 0 && !*r.name) {
        int code = 400;
        cJSON *obj = in ? cJSON_Duplicate(in, 1) : NULL;
        if (obj && *f->gate && strcmp(r.plural, "pods") == 0 &&
            jsonx_key_str(jsonx_obj(obj, "metadata.labels"), "kueue.x-k8s.io/queue-name")) {
            cJSON *g = cJSON_CreateArray(), *one = cJSON_CreateObject();
            cJSON_AddStringToObject(one, "name", f->gate);
            cJSON_AddItemToArray(g, one);
            jsonx_set(jsonx_ensure_obj(obj, "spec"), "schedulingGates", g);
        }
        cJSON *c = obj ? create_locked(f, &r, obj, &code) : NULL;
        pthread_mutex_unlock(&f->mu);
        if (c)
            reply(fd, 201, c);
        else if (code == 409)
            reply_status(fd, 409, "AlreadyExists", "already exists");
        else
            reply_status(fd, code, "Invalid", "invalid object");
        cJSON_Delete(c);
    } else if (strcmp(method, "PUT") == 0 && *r.name) {
        Obj *o = find(f, &r);
        const char *want = jsonx_str(in, "metadata.resourceVersion");
        const char *have = o ? jsonx_str(o->obj, "metadata.resourceVersion") : NULL;
        if (!o) {
            pthread_mutex_unlock(&f->mu);
            reply_status(fd, 404, "NotFound", "not found");
        } else if (!want || strcmp(want, have) != 0) {
            pthread_mutex_unlock(&f->mu);
            reply_status(fd, 409, "Conflict", "the object has been modified");
        } else {
            cJSON *next = cJSON_Duplicate(o->obj, 1);
            if (strcmp(r.sub, "status") == 0) {
                jsonx_set(next, "status", cJSON_Duplicate(jsonx_at(in, "status"), 1));
            } else {
                cJSON *st = cJSON_DetachItemFromObjectCaseSensitive(next, "status");
                cJSON_Delete(next);
                next = cJSON_Duplicate(in, 1);
                if (st) jsonx_set(next, "status", st);
            }
            store_modified(f, fd, o, next);
        }
    } else if (strcmp(method, "PATCH") == 0 && *r.name) {
        /* JSON merge patch (RFC 7386) only, as the operator sends it; metadata.uid and
         * metadata.resourceVersion in the patch are preconditions, as on the real server. */
        Obj *o = find(f, &r);
        const char *ctype = strcasestr(req, "Content-Type:");
        const char *uid = jsonx_str(in, "metadata.uid");
        const char *rv = jsonx_str(in, "metadata.resourceVersion");
        if (!ctype ||
            strncasecmp(ctype + 13 + strspn(ctype + 13, " "), "application/merge-patch+json", 28) !=
                0 ||
            !cJSON_IsObject(in)) {
            pthread_mutex_unlock(&f->mu);
            reply_status(fd, 415, "UnsupportedMediaType", "only merge patches");
        } else if (!o) {
            pthread_mutex_unlock(&f->mu);
            reply_status(fd, 404, "NotFound", "not found");
        } else if ((uid && strcmp(uid, jsonx_str(o->obj, "metadata.uid")) != 0) ||
                   (rv && strcmp(rv, jsonx_str(o->obj, "metadata.resourceVersion")) != 0)) {
            pthread_mutex_unlock(&f->mu);
            reply_status(fd, 409, "Conflict", "precondition failed");
        } else {
            /* The status subresource takes only the patch's status; the object itself
             * everything but its status. */
            cJSON *next = cJSON_Duplicate(o->obj, 1);
            cJSON *patch = cJSON_Duplicate(in, 1);
            cJSON *pst = cJSON_DetachItemFromObjectCaseSensitive(patch, "status");
            if (strcmp(r.sub, "status") == 0) {
                cJSON *st = cJSON_DetachItemFromObjectCaseSensitive(next, "status");
                if (pst) st = merge_patch(st, pst);
                if (st) jsonx_set(next, "status", st);
            } else {
                next = merge_patch(next, patch);
            }
            cJSON_Delete(pst);
            cJSON_Delete(patch);
            store_modified(f, fd, o, next);
        }
    } else if (strcmp(method, "DELETE") == 0 && *r.name) {
        Obj *o = find(f, &r);
        const char *uid = jsonx_str(in, "preconditions.uid");
        if (!o) {
            pthread_mutex_unlock(&f->mu);
            reply_status(fd, 404, "NotFound", "not found");
        } else if (uid && strcmp(uid, jsonx_str(o->obj, "metadata.uid")) != 0) {
            pthread_mutex_unlock(&f->mu);
            reply_status(fd, 409, "Conflict", "precondition failed: uid");
        } else {
            /* Like the real server for an object without finalizers: deleted at once,
             * and the answer is the object as it was. */
            cJSON *gone = cJSON_Duplicate(o->obj, 1);
            remove_at(f, o);
            pthread_mutex_unlock(&f->mu);
            reply(fd, 200, gone);
            cJSON_Delete(gone);
        }
    } else {
        pthread_mutex_unlock(&f->mu);
        reply_status(fd, 405, "MethodNotAllowed", "not supported by the fake");
    }
    cJSON_Delete(in);
out:
    free(req);
}

typedef struct Conn {
    FakeApi *f;
    int fd;
} Conn;

static void *conn_main(void *arg)
{
    Conn *c = arg;
    handle(c->f, c->fd);
    close(c->fd);
    pthread_mutex_lock(&c->f->mu);
    c->f->active--;
    pthread_cond_broadcast(&c->f->cond);
    pthread_mutex_unlock(&c->f->mu);
    free(c);
    return NULL;
}

static void *accept_main(void *arg)
{
    FakeApi *f = arg;
    while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) {
        struct pollfd p = {.fd = f->fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0) continue;
        int fd = accept(f->fd, NULL, NULL);
        if (fd < 0) continue;
        Conn *c = malloc(sizeof *c);
        c->f = f;
        c->fd = fd;
        pthread_mutex_lock(&f->mu);
        f->active++;
        pthread_mutex_unlock(&f->mu);
        pthread_t t;
        if (pthread_create(&t, NULL, conn_main, c) != 0) {
            close(fd);
            free(c);
            pthread_mutex_lock(&f->mu);
            f->active--;
            pthread_mutex_unlock(&f->mu);
            continue;
        }
        pthread_detach(t);
    }
    return NULL;
}

FakeApi *fakeapi_start(void)
{
    FakeApi *f = calloc(1, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cond, NULL);
    f->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (bind(f->fd, (struct sockaddr *)&a, sizeof a) || listen(f->fd, 128) ||
        getsockname(f->fd, (struct sockaddr *)&a, &al)) {
        close(f->fd);
        free(f);
        return NULL;
    }
    f->port = ntohs(a.sin_port);
    pthread_create(&f->accept_thread, NULL, accept_main, f);
    return f;
}

int fakeapi_port(FakeApi *f)
{
    return f->port;
}

void fakeapi_stop(FakeApi *f)
{
    if (!f) return;
    pthread_mutex_lock(&f->mu);
    __atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->accept_thread, NULL);
    pthread_mutex_lock(&f->mu);
    while (f->active > 0)
        pthread_cond_wait(&f->cond, &f->mu);
    pthread_mutex_unlock(&f->mu);
    close(f->fd);
    for (size_t i = 0; i < f->nobjs; i++)
        cJSON_Delete(f->objs[i].obj);
    for (size_t i = 0; i < f->nevents; i++)
        free(f->events[i].json);
    free(f->objs);
    free(f->events);
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->mu);
    free(f);
}
