/* informer — list + watch into a cache; see informer.h. */
#include "informer.h"

#include "clock.h"
#include "jsonpack.h"
#include "jsonx.h"
#include "metrics.h"
#include "olog.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBUCKETS 2048
/* The stop flag is written by the stopping thread and polled by the informer's. */
#define STOPPED(inf) __atomic_load_n(&(inf)->stop, __ATOMIC_ACQUIRE)

/* A cached object is kept as its compact JSON text (a parsed cJSON tree takes several
 * times the memory, and the cache is most of the operator's heap with many jobs), with
 * what lookups filter on beside it: its labels and resourceVersion. Readers get a tree
 * parsed from the text. */
typedef struct Entry {
    struct Entry *next;
    /* The text packed (jsonpack.h): a Running pod's 820 bytes take 290. */
    char *json;
    /* metadata.labels with string values as "key\0value\0...key\0value\0\0" in one
     * block, or NULL: a parsed copy took about 700 bytes a pod, a quarter of the cache
     * at 8,000 pods (bench-operator-scale). */
    char *labels;
    long long rv; /* metadata.resourceVersion, -1 when not an integer */
    /* rv of the latest version that changed more than the quiet paths (every version
     * without quiet paths): what informer_foreach_wanted offers. */
    long long loud_rv;
    /* Digests of the object without the quiet paths and resourceVersion (rest) and of
     * the quiet paths alone (quiet); both 0 without quiet paths. */
    uint64_t rest, quiet;
    /* The labels are in the block only, not in json (when every value is a string, as
     * the API server makes them): entry_object puts them back. Kept twice they were 180
     * of the 1,270 bytes a Running pod takes as text. */
    int labels_apart;
    /* When the latest version changed only the quiet paths (and resourceVersion, then
     * rv) since json was written: {"<quiet path>": value or null when absent, ...},
     * which entry_object puts in place of json's; else NULL. The jobs informer gets the
     * progress thread's every status patch back, and printing and packing the whole job
     * for it was a quarter of that watch's CPU. */
    char *quiet_json;
    char key[]; /* "namespace/name" */
} Entry;

struct Informer {
    KubeClient *client;
    char *group_version, *plural, *ns, *selector;
    InformerHandler handler;
    void *ctx;
    int watch_timeout_s;
    void (*transform)(cJSON *obj);
    const char *const *quiet_paths;
    void (*skipped)(void *ctx, const InformerSkip *s);
    pthread_rwlock_t lock;
    Entry *buckets[NBUCKETS];
    size_t size;
    char rv[64];              /* the resourceVersion to watch from */
    long long deleted_rv_max; /* newest resourceVersion of a DELETED event */
    /* The current run of failed lists and watches (informer thread only). */
    unsigned failures;
    double failing_since, failure_logged;
    volatile int stop;
    int synced;
    int started;
    pthread_t thread;
};

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

int informer_key(const cJSON *obj, char *out, size_t n)
{
    const char *name = jsonx_str(obj, "metadata.name");
    const char *ns = jsonx_str(obj, "metadata.namespace");
    if (!name) return -EINVAL;
    snprintf(out, n, "%s/%s", ns ? ns : "", name);
    return 0;
}

Informer *informer_new(KubeClient *client, const InformerOptions *opt)
{
    Informer *inf = calloc(1, sizeof *inf);
    if (!inf) return NULL;
    inf->client = client;
    inf->group_version = strdup(opt->group_version);
    inf->plural = strdup(opt->plural);
    inf->ns = strdup(opt->ns ? opt->ns : "");
    inf->selector = strdup(opt->label_selector ? opt->label_selector : "");
    inf->handler = opt->handler;
    inf->ctx = opt->ctx;
    inf->watch_timeout_s = opt->watch_timeout_s > 0 ? opt->watch_timeout_s : 300;
    inf->transform = opt->transform;
    inf->quiet_paths = opt->quiet_paths;
    inf->skipped = opt->skipped;
    pthread_rwlock_init(&inf->lock, NULL);
    if (!inf->group_version || !inf->plural || !inf->ns || !inf->selector) {
        informer_free(inf);
        return NULL;
    }
    return inf;
}

static void entry_free(Entry *e)
{
    if (!e) return;
    free(e->json);
    free(e->labels);
    free(e->quiet_json);
    free(e);
}

/* Puts v at the dotted path under o, the objects on the way made, in place of what is
 * there; v NULL removes it. Takes v. Returns 0, or -ENOMEM. */
static int put_at(cJSON *o, const char *path, cJSON *v)
{
    char up[256];
    const char *last = strrchr(path, '.');
    snprintf(up, sizeof up, "%.*s", last ? (int)(last - path) : 0, path);
    cJSON *parent = last ? jsonx_ensure_obj(o, up) : o;
    const char *name = last ? last + 1 : path;
    if (!parent) {
        cJSON_Delete(v);
        return -ENOMEM;
    }
    if (!v) {
        cJSON_DeleteItemFromObjectCaseSensitive(parent, name);
        return 0;
    }
    return jsonx_set(parent, name, v) ? 0 : -ENOMEM;
}

/* Puts e->quiet_json's paths and e->rv into o (see Entry). Returns 0, or -ENOMEM. */
static int put_quiet(const Entry *e, cJSON *o)
{
    cJSON *q = cJSON_Parse(e->quiet_json);
    if (!q) return -ENOMEM;
    int rc = 0;
    for (cJSON *it = q->child, *next; it && !rc; it = next) {
        next = it->next;
        cJSON_DetachItemViaPointer(q, it);
        if (cJSON_IsNull(it)) {
            rc = put_at(o, it->string, NULL);
            cJSON_Delete(it);
        } else {
            char path[256]; /* it->string goes with it into o, renamed */
            snprintf(path, sizeof path, "%s", it->string);
            rc = put_at(o, path, it);
        }
    }
    cJSON_Delete(q);
    if (rc) return rc;
    char rvs[24];
    snprintf(rvs, sizeof rvs, "%lld", e->rv);
    cJSON *md = jsonx_ensure_obj(o, "metadata");
    return md && jsonx_set_str(md, "resourceVersion", rvs) ? 0 : -ENOMEM;
}

/* The entry's object as a new tree, its labels back in place (caller frees), or NULL on
 * allocation failure. */
static cJSON *entry_object(const Entry *e)
{
    size_t n;
    char *text = jsonpack_decode(e->json, &n);
    cJSON *o = text ? cJSON_ParseWithLength(text, n) : NULL;
    free(text);
    if (o && e->quiet_json && put_quiet(e, o)) {
        cJSON_Delete(o);
        return NULL;
    }
    if (!o || !e->labels_apart) return o;
    cJSON *md = cJSON_GetObjectItemCaseSensitive(o, "metadata");
    cJSON *l = cJSON_CreateObject();
    if (!cJSON_IsObject(md) || !l || !cJSON_AddItemToObject(md, "labels", l)) {
        cJSON_Delete(l);
        cJSON_Delete(o);
        return NULL;
    }
    for (const char *p = e->labels; *p;) {
        const char *v = p + strlen(p) + 1;
        if (!cJSON_AddStringToObject(l, p, v)) {
            cJSON_Delete(o);
            return NULL;
        }
        p = v + strlen(v) + 1;
    }
    return o;
}

static long long rv_number(const cJSON *obj);

/* metadata.labels of obj as an Entry's flat block (string values only), or NULL when it
 * has none; *nomem is set when one was needed and could not be had, *all when every
 * label is in the block. */
static char *flat_labels(const cJSON *obj, int *nomem, int *all)
{
    const cJSON *l = jsonx_obj(obj, "metadata.labels"), *it;
    size_t n = 1;
    *nomem = 0;
    *all = 1;
    cJSON_ArrayForEach(it, l)
    {
        if (cJSON_IsString(it))
            n += strlen(it->string) + strlen(it->valuestring) + 2;
        else
            *all = 0;
    }
    if (n == 1) return NULL;
    char *out = malloc(n), *p = out;
    if (!out) {
        *nomem = 1;
        return NULL;
    }
    cJSON_ArrayForEach(it, l)
    {
        if (!cJSON_IsString(it)) continue;
        size_t k = strlen(it->string) + 1, v = strlen(it->valuestring) + 1;
        memcpy(p, it->string, k);
        memcpy(p + k, it->valuestring, v);
        p += k + v;
    }
    *p = 0;
    return out;
}

/* The value of label `key` in an Entry's flat block, or NULL. */
static const char *flat_label(const char *labels, const char *key)
{
    for (const char *p = labels; p && *p;) {
        const char *v = p + strlen(p) + 1;
        if (strcmp(p, key) == 0) return v;
        p = v + strlen(v) + 1;
    }
    return NULL;
}

/* Makes e hold obj, which stays the caller's (its labels are detached while it is
 * printed, then put back). Returns 0 or -ENOMEM (e unchanged then). */
static int entry_set(Entry *e, cJSON *obj)
{
    int nomem, all;
    char *labels = flat_labels(obj, &nomem, &all);
    int apart = labels && all;
    cJSON *md = NULL, *kept = NULL;
    if (apart) {
        md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
        kept = cJSON_DetachItemFromObjectCaseSensitive(md, "labels");
    }
    char *text = cJSON_PrintUnformatted(obj);
    if (kept && !cJSON_AddItemToObject(md, "labels", kept)) cJSON_Delete(kept);
    char *json = text ? jsonpack_encode(text) : NULL;
    long long rv = rv_number(obj);
    free(text);
    if (!json || nomem) {
        free(json);
        free(labels);
        return -ENOMEM;
    }
    free(e->json);
    free(e->labels);
    free(e->quiet_json);
    e->quiet_json = NULL;
    e->json = json;
    e->labels = labels;
    e->labels_apart = apart;
    e->rv = rv;
    return 0;
}

/* Frees every entry of the table `buckets` and the table itself. */
static void free_table(Entry **buckets)
{
    for (size_t b = 0; b < NBUCKETS; b++) {
        Entry *e = buckets[b];
        while (e) {
            Entry *next = e->next;
            entry_free(e);
            e = next;
        }
    }
    free(buckets);
}

static void clear_cache(Informer *inf)
{
    for (size_t b = 0; b < NBUCKETS; b++) {
        Entry *e = inf->buckets[b];
        while (e) {
            Entry *next = e->next;
            entry_free(e);
            e = next;
        }
        inf->buckets[b] = NULL;
    }
    inf->size = 0;
}

void informer_free(Informer *inf)
{
    if (!inf) return;
    clear_cache(inf);
    pthread_rwlock_destroy(&inf->lock);
    free(inf->group_version);
    free(inf->plural);
    free(inf->ns);
    free(inf->selector);
    free(inf);
}

int informer_synced(Informer *inf)
{
    return __atomic_load_n(&inf->synced, __ATOMIC_ACQUIRE);
}

/* FNV-1a over a tree: member names, types and values, in order. */
static uint64_t digest_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static uint64_t digest_tree(uint64_t h, const cJSON *o)
{
    for (; o; o = o->next) {
        int type = o->type & 0xff;
        h = digest_bytes(h, &type, sizeof type);
        if (o->string) h = digest_bytes(h, o->string, strlen(o->string) + 1);
        if (cJSON_IsNumber(o)) h = digest_bytes(h, &o->valuedouble, sizeof o->valuedouble);
        if (cJSON_IsString(o) && o->valuestring)
            h = digest_bytes(h, o->valuestring, strlen(o->valuestring) + 1);
        if (cJSON_IsArray(o) || cJSON_IsObject(o)) {
            h = digest_tree(h, o->child);
            h = digest_bytes(h, "]", 1); /* ends the container: [[a],b] is not [[a,b]] */
        }
    }
    return h;
}

/* The item at a dotted path (at most 7 levels) of obj, or NULL. */
static cJSON *item_at(cJSON *obj, const char *path, cJSON **parent)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    cJSON *cur = obj, *up = NULL;
    for (char *save = NULL, *tok = strtok_r(buf, ".", &save); tok && cur;
         tok = strtok_r(NULL, ".", &save)) {
        up = cur;
        cur = cJSON_IsObject(cur) ? cJSON_GetObjectItemCaseSensitive(cur, tok) : NULL;
    }
    *parent = up;
    return cur == obj ? NULL : cur;
}

/* Sets e->rest and e->quiet for obj: the quiet paths and resourceVersion are detached
 * while the rest is digested, then put back (at the end of their objects: member order
 * means nothing to a reader). */
static void digest_set(const Informer *inf, Entry *e, cJSON *obj)
{
    e->rest = e->quiet = 0;
    if (!inf->quiet_paths) return;
    enum { QMAX = 16 };
    cJSON *item[QMAX + 1], *parent[QMAX + 1];
    size_t n = 0;
    uint64_t quiet = 1469598103934665603ull;
    for (size_t i = 0; inf->quiet_paths[i] && n < QMAX; i++) {
        cJSON *it = item_at(obj, inf->quiet_paths[i], &parent[n]);
        quiet = digest_bytes(quiet, inf->quiet_paths[i], strlen(inf->quiet_paths[i]) + 1);
        if (!it) continue;
        cJSON_DetachItemViaPointer(parent[n], it);
        item[n++] = it;
        /* digest_tree follows ->next; a detached item has none. */
        quiet = digest_tree(quiet, it);
    }
    cJSON *rvparent;
    cJSON *rv = item_at(obj, "metadata.resourceVersion", &rvparent);
    if (rv) {
        parent[n] = rvparent;
        item[n++] = cJSON_DetachItemViaPointer(rvparent, rv);
    }
    e->quiet = quiet;
    /* The members only: a watch event's object bears its member name ("object"). */
    e->rest = digest_tree(1469598103934665603ull, obj->child);
    for (size_t i = n; i-- > 0;)
        cJSON_AddItemToObject(parent[i], item[i]->string, item[i]);
}

/* Makes e hold obj, which differs from e's object only in the quiet paths and
 * resourceVersion (rv, an integer): those go into e->quiet_json, json stays. Returns 0,
 * or -ENOMEM (e unchanged then). */
static int entry_set_quiet(const Informer *inf, Entry *e, cJSON *obj, long long rv)
{
    cJSON *q = cJSON_CreateObject();
    int ok = q != NULL;
    for (size_t i = 0; ok && inf->quiet_paths[i]; i++) {
        cJSON *parent;
        cJSON *it = item_at(obj, inf->quiet_paths[i], &parent);
        /* A reference: printed, never copied or freed with q. */
        ok = it ? cJSON_AddItemReferenceToObject(q, inf->quiet_paths[i], it)
                : cJSON_AddNullToObject(q, inf->quiet_paths[i]) != NULL;
    }
    char *text = ok ? cJSON_PrintUnformatted(q) : NULL;
    cJSON_Delete(q);
    if (!text) return -ENOMEM;
    free(e->quiet_json);
    e->quiet_json = text;
    e->rv = rv;
    return 0;
}

/* Replaces or inserts key -> obj (left to the caller) in the table `buckets` of *size
 * entries. Returns 0 when obj differs from the cached object only in inf's quiet paths
 * (and resourceVersion), else 1. */
static int put_in(const Informer *inf, Entry **buckets, size_t *size, const char *key, cJSON *obj)
{
    Entry d = {0};
    if (obj) digest_set(inf, &d, obj);
    size_t b = hash(key) % NBUCKETS;
    for (Entry *e = buckets[b]; e; e = e->next) {
        if (strcmp(e->key, key) == 0) {
            int loud = !inf->quiet_paths || e->rest != d.rest;
            int news = loud || e->quiet == d.quiet;
            long long rv = loud ? -1 : rv_number(obj);
            if (rv >= 0 && entry_set_quiet(inf, e, obj, rv) == 0) {
                e->quiet = d.quiet;
                return news;
            }
            if (entry_set(e, obj)) {
                olog(OLOG_ERROR, key, "informer: out of memory caching the object");
                return 1;
            }
            e->rest = d.rest, e->quiet = d.quiet;
            if (loud) e->loud_rv = e->rv;
            return news;
        }
    }
    size_t n = strlen(key);
    Entry *e = calloc(1, sizeof *e + n + 1);
    if (!e || entry_set(e, obj)) {
        olog(OLOG_ERROR, key, "informer: out of memory caching the object");
        free(e);
        return 1;
    }
    e->rest = d.rest, e->quiet = d.quiet;
    e->loud_rv = e->rv;
    memcpy(e->key, key, n + 1);
    e->next = buckets[b];
    buckets[b] = e;
    (*size)++;
    return 1;
}

/* put_in on the cache; returns like put_in. Write lock held. */
static int put_locked(Informer *inf, const char *key, cJSON *obj)
{
    return put_in(inf, inf->buckets, &inf->size, key, obj);
}

/* Removes key if cached. Write lock held. */
static void drop_locked(Informer *inf, const char *key)
{
    size_t b = hash(key) % NBUCKETS;
    for (Entry **pp = &inf->buckets[b]; *pp; pp = &(*pp)->next) {
        if (strcmp((*pp)->key, key) == 0) {
            Entry *e = *pp;
            *pp = e->next;
            entry_free(e);
            inf->size--;
            return;
        }
    }
}

/* True when key ("namespace/name") is in namespace ns. */
static int key_in_ns(const char *key, const char *ns)
{
    size_t n = strlen(ns);
    return strncmp(key, ns, n) == 0 && key[n] == '/';
}

/* Drops what the cache need not hold: metadata.managedFields (never read, often the
 * largest part of an object) and whatever the informer's transform prunes. */
static void slim(Informer *inf, cJSON *obj)
{
    cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    if (cJSON_IsObject(md)) cJSON_DeleteItemFromObjectCaseSensitive(md, "managedFields");
    if (inf->transform && cJSON_IsObject(obj)) inf->transform(obj);
}

static cJSON *slim_copy(Informer *inf, const cJSON *obj)
{
    cJSON *c = cJSON_Duplicate(obj, 1);
    if (c) slim(inf, c);
    return c;
}

/* resourceVersion as an integer, or -1 when it is not one. */
static long long rv_number(const cJSON *obj)
{
    const char *rv = jsonx_str(obj, "metadata.resourceVersion");
    if (!rv || !*rv || strlen(rv) > 18) return -1;
    long long v = 0;
    for (const char *p = rv; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

void informer_store(Informer *inf, const cJSON *obj)
{
    char key[512];
    if (informer_key(obj, key, sizeof key)) return;
    long long rv = rv_number(obj);
    pthread_rwlock_wrlock(&inf->lock);
    const Entry *cur = NULL;
    size_t b = hash(key) % NBUCKETS;
    for (Entry *e = inf->buckets[b]; e; e = e->next)
        if (strcmp(e->key, key) == 0) cur = e;
    int store;
    if (cur) {
        long long have = cur->rv;
        store = rv >= 0 && have >= 0 && rv > have;
    } else {
        /* Absent: new, unless a watch event already removed a version at least as new. */
        store = rv < 0 || rv > inf->deleted_rv_max;
    }
    cJSON *c = store ? slim_copy(inf, obj) : NULL;
    if (c) put_locked(inf, key, c);
    cJSON_Delete(c);
    pthread_rwlock_unlock(&inf->lock);
}

void informer_remove(Informer *inf, const char *ns, const char *name)
{
    char key[512];
    snprintf(key, sizeof key, "%s/%s", ns ? ns : "", name);
    pthread_rwlock_wrlock(&inf->lock);
    drop_locked(inf, key);
    pthread_rwlock_unlock(&inf->lock);
}

/* The entry of ns/name, or NULL. Call with the lock held. */
static const Entry *entry_of(const Informer *inf, const char *ns, const char *name)
{
    char key[512];
    snprintf(key, sizeof key, "%s/%s", ns ? ns : "", name);
    for (const Entry *e = inf->buckets[hash(key) % NBUCKETS]; e; e = e->next)
        if (strcmp(e->key, key) == 0) return e;
    return NULL;
}

cJSON *informer_get(Informer *inf, const char *ns, const char *name)
{
    pthread_rwlock_rdlock(&inf->lock);
    const Entry *e = entry_of(inf, ns, name);
    cJSON *out = e ? entry_object(e) : NULL;
    pthread_rwlock_unlock(&inf->lock);
    return out;
}

/* The quiet paths of e's object as a new object into *out (see informer_get_quiet).
 * Returns 0 or -ENOMEM. */
static int entry_quiet(const Informer *inf, const Entry *e, cJSON **out)
{
    cJSON *o = cJSON_CreateObject(), *whole = NULL;
    if (!o) return -ENOMEM;
    if (e->quiet_json) {
        if (put_quiet(e, o)) goto nomem;
        *out = o;
        return 0;
    }
    if (!(whole = entry_object(e))) goto nomem;
    for (size_t i = 0; inf->quiet_paths && inf->quiet_paths[i]; i++) {
        const char *path = inf->quiet_paths[i];
        cJSON *parent, *it = item_at(whole, path, &parent);
        if (it && put_at(o, path, cJSON_DetachItemViaPointer(parent, it))) goto nomem;
    }
    cJSON_Delete(whole);
    *out = o;
    return 0;
nomem:
    cJSON_Delete(whole);
    cJSON_Delete(o);
    return -ENOMEM;
}

int informer_get_quiet(Informer *inf, const char *ns, const char *name, cJSON **out,
                       long long *loud_rv)
{
    int rc = -ENOENT;
    *out = NULL;
    pthread_rwlock_rdlock(&inf->lock);
    const Entry *e = entry_of(inf, ns, name);
    if (e) {
        rc = entry_quiet(inf, e, out);
        *loud_rv = e->loud_rv;
    }
    pthread_rwlock_unlock(&inf->lock);
    return rc;
}

cJSON *informer_list(Informer *inf, const char *ns, const char *label_key, const char *label_value)
{
    cJSON *arr = cJSON_CreateArray();
    if (!arr) return NULL;
    pthread_rwlock_rdlock(&inf->lock);
    for (size_t b = 0; b < NBUCKETS; b++) {
        for (Entry *e = inf->buckets[b]; e; e = e->next) {
            if (ns && !key_in_ns(e->key, ns)) continue;
            if (label_key) {
                const char *v = flat_label(e->labels, label_key);
                if (!v || !label_value || strcmp(v, label_value) != 0) continue;
            }
            cJSON *c = entry_object(e);
            if (!c || !cJSON_AddItemToArray(arr, c)) {
                cJSON_Delete(c);
                pthread_rwlock_unlock(&inf->lock);
                cJSON_Delete(arr);
                return NULL;
            }
        }
    }
    pthread_rwlock_unlock(&inf->lock);
    return arr;
}

void informer_foreach(Informer *inf, void (*fn)(void *ctx, const cJSON *obj), void *ctx)
{
    pthread_rwlock_rdlock(&inf->lock);
    for (size_t b = 0; b < NBUCKETS; b++)
        for (Entry *e = inf->buckets[b]; e; e = e->next) {
            cJSON *o = entry_object(e);
            if (o) fn(ctx, o);
            cJSON_Delete(o);
        }
    pthread_rwlock_unlock(&inf->lock);
}

void informer_foreach_wanted(Informer *inf, int (*want)(void *ctx, const char *key, long long rv),
                             void (*fn)(void *ctx, const cJSON *obj), void *ctx)
{
    pthread_rwlock_rdlock(&inf->lock);
    for (size_t b = 0; b < NBUCKETS; b++)
        for (Entry *e = inf->buckets[b]; e; e = e->next) {
            if (!want(ctx, e->key, e->loud_rv)) continue;
            cJSON *o = entry_object(e);
            if (o) fn(ctx, o);
            cJSON_Delete(o);
        }
    pthread_rwlock_unlock(&inf->lock);
}

size_t informer_size(Informer *inf)
{
    pthread_rwlock_rdlock(&inf->lock);
    size_t n = inf->size;
    pthread_rwlock_unlock(&inf->lock);
    return n;
}

/* ------------------------------------------------------------------------------------
 * List and watch */

static void url_escape(const char *in, char *out, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t k = 0;
    for (; *in && k + 4 < n; in++) {
        unsigned char ch = (unsigned char)*in;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '_' || ch == '.' || ch == '~' || ch == '/') {
            out[k++] = (char)ch;
        } else {
            out[k++] = '%';
            out[k++] = hex[ch >> 4];
            out[k++] = hex[ch & 15];
        }
    }
    out[k] = 0;
}

static void base_path(Informer *inf, char *out, size_t n)
{
    kpath(out, n, inf->group_version, inf->ns, inf->plural, NULL, NULL);
}

/* One change a relist found: the key of an object listed (ADDED or MODIFIED), or the
 * entry of one that vanished (DELETED), handed to the handler once the cache is
 * swapped. */
typedef struct Pending {
    char type[12];
    Entry *gone; /* DELETED: the old entry, freed after the handler saw it */
    char *key;   /* ADDED, MODIFIED */
} Pending;

/* The new table a relist fills, item by item as the pages arrive. */
typedef struct Fill {
    Informer *inf;
    Entry **table;
    size_t n;
} Fill;

/* An object that does not parse, `text` being the item of a list (prefix "") or the line
 * of a watch event (prefix "object."): named from its text, logged, counted and handed to
 * the skipped handler. A watch event's object leaves the cache (the version cached was
 * replaced by one nobody can read) and its resourceVersion is where the watch resumes. */
static void skip_object(Informer *inf, const char *text, size_t n, const char *prefix,
                        const char *why)
{
    char ns[256] = "", name[256] = "", uid[64] = "", gen[24] = "", rv[64] = "", type[16] = "";
    char path[64];
    struct {
        const char *field;
        char *out;
        size_t len;
    } want[] = {{"metadata.namespace", ns, sizeof ns},
                {"metadata.name", name, sizeof name},
                {"metadata.uid", uid, sizeof uid},
                {"metadata.generation", gen, sizeof gen},
                {"metadata.resourceVersion", rv, sizeof rv}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        snprintf(path, sizeof path, "%s%s", prefix, want[i].field);
        if (jsonx_text_str(text, n, path, want[i].out, want[i].len)) want[i].out[0] = 0;
    }
    int watch = *prefix != 0;
    if (watch && jsonx_text_str(text, n, "type", type, sizeof type)) type[0] = 0;
    char key[520];
    snprintf(key, sizeof key, "%s/%s", ns, name);
    olog(OLOG_WARN, *name ? key : NULL,
         "%s %s: skipping %s (%zu bytes) that does not parse: %s; it is neither cached nor "
         "reconciled until it is replaced or deleted",
         watch ? "watch" : "list", inf->plural, *name ? "an object" : "an unnamed object", n, why);
    metrics_count_skipped(inf->plural);
    if (watch) {
        pthread_rwlock_wrlock(&inf->lock);
        if (*name) drop_locked(inf, key);
        if (*rv) snprintf(inf->rv, sizeof inf->rv, "%s", rv);
        pthread_rwlock_unlock(&inf->lock);
    }
    InformerSkip sk = {.event = watch ? type : "LIST",
                       .ns = ns,
                       .name = name,
                       .uid = uid,
                       .generation = gen,
                       .resource_version = rv,
                       .why = why};
    if (inf->skipped) inf->skipped(inf->ctx, &sk);
}

/* kclient_list's skip callback. */
static int list_skip(void *ctx, const char *text, size_t n, const char *why)
{
    Fill *f = ctx;
    skip_object(f->inf, text, n, "", why);
    return 0;
}

/* kclient_watch's skip callback. */
static void watch_skip(void *ctx, const char *line, size_t n, const char *why)
{
    skip_object(ctx, line, n, "object.", why);
}

/* A listed item (kclient_list's callback): slimmed and stored as text in the new
 * table. */
static int fill_item(void *ctx, cJSON *it)
{
    Fill *f = ctx;
    char key[512];
    if (cJSON_IsObject(it) && !informer_key(it, key, sizeof key)) {
        slim(f->inf, it);
        put_in(f->inf, f->table, &f->n, key, it);
    } else {
        olog(OLOG_WARN, NULL, "list %s: skipping an item without metadata.name", f->inf->plural);
    }
    cJSON_Delete(it);
    return 0;
}

/* Lists every page and replaces the cache; emits DELETED for objects that vanished
 * and ADDED/MODIFIED for the rest. Returns 0 or -errno with err set.
 * Memory: each item is parsed alone as its bytes arrive (kclient_list), slimmed and
 * stored as text in a new table, so that a relist never holds a page as text or as a
 * tree, nor every object twice (the list as parsed and a copy for the handler): a
 * restarted operator listing 8,000 pods peaked at 229 MiB that way, and stayed there
 * (the heap is not given back); parsing a page of 500 pods at once still cost it about
 * 10 MiB. The handler gets a tree parsed from the new table (for DELETED, from the old
 * entry), one change at a time. The old table serves readers until the swap. */
static int relist(Informer *inf, char *err, size_t errlen)
{
    char base[512], sel[512], path[4096], cont[1024] = "";
    base_path(inf, base, sizeof base);
    url_escape(inf->selector, sel, sizeof sel);
    Fill fill = {.inf = inf, .table = calloc(NBUCKETS, sizeof *fill.table)};
    char rv[64] = "";
    int rc = 0;
    if (!fill.table) return -ENOMEM;
    do {
        char econt[1100];
        url_escape(cont, econt, sizeof econt);
        snprintf(path, sizeof path, "%s?limit=500%s%s%s%s", base, *sel ? "&labelSelector=" : "",
                 sel, *cont ? "&continue=" : "", econt);
        cJSON *meta = NULL;
        rc = kclient_list(inf->client, path, fill_item, list_skip, &fill, &meta, err, errlen);
        const char *v = jsonx_str(meta, "resourceVersion");
        const char *c = jsonx_str(meta, "continue");
        snprintf(rv, sizeof rv, "%s", v ? v : "");
        snprintf(cont, sizeof cont, "%s", c ? c : "");
        cJSON_Delete(meta);
    } while (!rc && *cont && !STOPPED(inf));
    Entry **fresh = fill.table;
    size_t nfresh = fill.n;
    if (rc || STOPPED(inf)) {
        free_table(fresh); /* the cache itself is untouched */
        if (!rc) snprintf(err, errlen, "list %s: stopped", inf->plural);
        return rc ? rc : -ECANCELED;
    }

    pthread_rwlock_wrlock(&inf->lock);
    Pending *ev = calloc(nfresh + inf->size + 1, sizeof *ev);
    size_t nev = 0;
    if (!ev) {
        pthread_rwlock_unlock(&inf->lock);
        free_table(fresh);
        snprintf(err, errlen, "list %s: out of memory", inf->plural);
        return -ENOMEM;
    }
    /* What the list has: ADDED when new, MODIFIED otherwise; the old entries left over
     * were deleted meanwhile. */
    for (size_t b = 0; b < NBUCKETS; b++)
        for (Entry *e = fresh[b]; e; e = e->next) {
            int existed = 0;
            size_t ob = hash(e->key) % NBUCKETS;
            for (Entry **pp = &inf->buckets[ob]; *pp; pp = &(*pp)->next)
                if (strcmp((*pp)->key, e->key) == 0) {
                    Entry *o = *pp;
                    *pp = o->next;
                    entry_free(o);
                    existed = 1;
                    break;
                }
            snprintf(ev[nev].type, sizeof ev[nev].type, existed ? "MODIFIED" : "ADDED");
            ev[nev].key = e->key;
            nev++;
        }
    for (size_t b = 0; b < NBUCKETS; b++) {
        Entry *e = inf->buckets[b];
        while (e) {
            Entry *next = e->next;
            snprintf(ev[nev].type, sizeof ev[nev].type, "DELETED");
            ev[nev].gone = e;
            nev++;
            e = next;
        }
    }
    memcpy(inf->buckets, fresh, sizeof *fresh * NBUCKETS);
    inf->size = nfresh;
    free(fresh);
    snprintf(inf->rv, sizeof inf->rv, "%s", rv);
    /* The handler parses each object from the cache under the read lock; the keys in
     * ev point into entries that only this thread replaces or removes (informer_store
     * and informer_remove copy or drop them), so they are copied first. */
    for (size_t i = 0; i < nev; i++)
        if (ev[i].key && !(ev[i].key = strdup(ev[i].key)))
            olog(OLOG_ERROR, NULL, "list %s: out of memory; an event is lost", inf->plural);
    pthread_rwlock_unlock(&inf->lock);
    __atomic_store_n(&inf->synced, 1, __ATOMIC_RELEASE);
    for (size_t i = 0; i < nev; i++) {
        cJSON *obj = NULL;
        if (ev[i].gone) {
            obj = entry_object(ev[i].gone);
            entry_free(ev[i].gone);
        } else if (ev[i].key) {
            pthread_rwlock_rdlock(&inf->lock);
            size_t b = hash(ev[i].key) % NBUCKETS;
            for (Entry *e = inf->buckets[b]; e; e = e->next)
                if (strcmp(e->key, ev[i].key) == 0) {
                    obj = entry_object(e);
                    break;
                }
            pthread_rwlock_unlock(&inf->lock);
            free(ev[i].key);
        }
        if (obj && inf->handler) inf->handler(inf->ctx, ev[i].type, obj);
        cJSON_Delete(obj);
    }
    free(ev);
    olog(OLOG_DEBUG, NULL, "listed %s: %zu objects at resourceVersion %s", inf->plural,
         informer_size(inf), rv);
    return 0;
}

static void outage_over(Informer *inf);

static int on_watch_event(void *ctx, const char *type, cJSON *obj)
{
    Informer *inf = ctx;
    if (strcmp(type, "ERROR") == 0) {
        long long code = jsonx_int(obj, "code", 0);
        const char *msg = jsonx_str(obj, "message");
        olog(code == 410 ? OLOG_INFO : OLOG_WARN, NULL, "watch %s: error event %lld: %s",
             inf->plural, code, msg ? msg : "");
        return code == 410 ? -ESTALE : -EIO;
    }
    outage_over(inf);
    const char *rvs = jsonx_str(obj, "metadata.resourceVersion");
    char rv[sizeof inf->rv];
    snprintf(rv, sizeof rv, "%s", rvs ? rvs : "");
    if (strcmp(type, "BOOKMARK") == 0) {
        if (*rv) {
            pthread_rwlock_wrlock(&inf->lock);
            snprintf(inf->rv, sizeof inf->rv, "%s", rv);
            pthread_rwlock_unlock(&inf->lock);
        }
        return 0;
    }
    char key[512];
    if (informer_key(obj, key, sizeof key)) {
        olog(OLOG_WARN, NULL, "watch %s: skipping a %s event without metadata.name", inf->plural,
             type);
        return 0;
    }
    int deleted = strcmp(type, "DELETED") == 0;
    if (!deleted && strcmp(type, "ADDED") != 0 && strcmp(type, "MODIFIED") != 0) {
        olog(OLOG_WARN, key, "watch %s: skipping an event of unknown type %s", inf->plural, type);
        return 0;
    }
    /* Slimmed where it lies: copying every event (managedFields and all) was about a
     * tenth of the operator's instructions under progress writes (callgrind). */
    if (!deleted) slim(inf, obj);
    int news = 1;
    pthread_rwlock_wrlock(&inf->lock);
    if (deleted) {
        drop_locked(inf, key);
        long long drv = rv_number(obj);
        if (drv > inf->deleted_rv_max) inf->deleted_rv_max = drv;
    } else {
        /* ADDED always reaches the handler; MODIFIED unless it moved only quiet paths. */
        news = put_locked(inf, key, obj) || strcmp(type, "MODIFIED") != 0;
    }
    if (*rv) snprintf(inf->rv, sizeof inf->rv, "%s", rv);
    pthread_rwlock_unlock(&inf->lock);
    if (inf->handler && news) inf->handler(inf->ctx, type, obj);
    return 0;
}

/* The wait before a list or watch is tried again after it failed with rc, `prev` being
 * the wait after the failure before it in this run of failures (0: none).
 *
 * A server that could not be reached or was not ready (no answer, 429, 5xx, an ERROR
 * event: a restarting or overloaded apiserver) is tried again every
 * INFORMER_UNREACHABLE_RETRY_S, however long it has been away, so that the informer
 * catches up within that long of the server answering again. (Waits doubling up to 2 s
 * left it up to 2 s behind; with a failed pod's restart delay after it, the group restart
 * went past its 5 s.) A client that cannot connect costs the server nothing, and one
 * request per informer every half second is nothing to a server that answers 503.
 *
 * A server that refused the request (401, 403, 404, 422) gets a doubling wait from
 * INFORMER_BACKOFF_BASE_S up to INFORMER_BACKOFF_MAX_S: retrying fast changes nothing.
 * The class of this failure alone decides, so a run of refusals does not delay the retry
 * of a server that then goes away and comes back. */
double informer_next_backoff(double prev, int rc)
{
    if (rc == -EIO || rc == -ETIMEDOUT || rc == -EAGAIN) return INFORMER_UNREACHABLE_RETRY_S;
    double next = prev > 0 ? prev * 2 : INFORMER_BACKOFF_BASE_S;
    return next > INFORMER_BACKOFF_MAX_S ? INFORMER_BACKOFF_MAX_S : next;
}

/* A failed list or watch. The first of a run is logged, then one line every
 * INFORMER_LOG_EVERY_S, so that a long outage retried every half second does not flood
 * the log. */
static void outage_failed(Informer *inf, const char *err, int rc, double wait)
{
    double now = clock_mono();
    if (inf->failures++ == 0) {
        inf->failing_since = now;
    } else if (now - inf->failure_logged < INFORMER_LOG_EVERY_S) {
        return;
    }
    inf->failure_logged = now;
    olog(OLOG_WARN, NULL, "%s: %s; retrying in %.1f s (failure %u, %.0f s after the first)",
         inf->plural, *err ? err : strerror(-rc), wait, inf->failures, now - inf->failing_since);
}

/* The list or watch works again: says so once after failures. */
static void outage_over(Informer *inf)
{
    if (!inf->failures) return;
    olog(OLOG_INFO, NULL, "%s: the API server answers again, %.1f s after the first of %u failures",
         inf->plural, clock_mono() - inf->failing_since, inf->failures);
    inf->failures = 0;
}

static void *informer_main(void *arg)
{
    Informer *inf = arg;
    double backoff = 0;
    char tname[16]; /* "kt-w-pods", "kt-w-trainingjo": top -H, perf and gdb show it */
    snprintf(tname, sizeof tname, "kt-w-%s", inf->plural);
    pthread_setname_np(pthread_self(), tname);
    char base[512], sel[512], path[4096], err[512];
    base_path(inf, base, sizeof base);
    url_escape(inf->selector, sel, sizeof sel);
    while (!STOPPED(inf)) {
        err[0] = 0;
        int lrc = relist(inf, err, sizeof err);
        if (STOPPED(inf)) break;
        if (lrc != 0) {
            backoff = informer_next_backoff(backoff, lrc);
            outage_failed(inf, err, lrc, backoff);
            clock_sleep(backoff, &inf->stop);
            continue;
        }
        outage_over(inf);
        backoff = 0;
        while (!STOPPED(inf)) {
            char rv[64];
            pthread_rwlock_rdlock(&inf->lock);
            snprintf(rv, sizeof rv, "%s", inf->rv);
            pthread_rwlock_unlock(&inf->lock);
            snprintf(path, sizeof path,
                     "%s?watch=1&allowWatchBookmarks=true&resourceVersion=%s&timeoutSeconds=%d%s%s",
                     base, rv, inf->watch_timeout_s, *sel ? "&labelSelector=" : "", sel);
            err[0] = 0;
            int rc = kclient_watch(inf->client, path, on_watch_event, watch_skip, inf, &inf->stop,
                                   inf->watch_timeout_s + 60.0, err, sizeof err);
            if (STOPPED(inf)) break;
            if (rc == 0) {
                outage_over(inf);
                backoff = 0;
                continue; /* the server ended the watch: resume from the last version */
            }
            if (rc == -ESTALE) {
                outage_over(inf);
                olog(OLOG_INFO, NULL, "watch %s: resourceVersion %s is gone; relisting",
                     inf->plural, rv);
                break;
            }
            backoff = informer_next_backoff(backoff, rc);
            outage_failed(inf, err, rc, backoff);
            clock_sleep(backoff, &inf->stop);
        }
    }
    return NULL;
}

int informer_start(Informer *inf)
{
    __atomic_store_n(&inf->stop, 0, __ATOMIC_RELEASE);
    int rc = pthread_create(&inf->thread, NULL, informer_main, inf);
    if (rc) return -rc;
    inf->started = 1;
    return 0;
}

void informer_request_stop(Informer *inf)
{
    if (inf) __atomic_store_n(&inf->stop, 1, __ATOMIC_RELEASE);
}

void informer_stop(Informer *inf)
{
    if (!inf || !inf->started) return;
    __atomic_store_n(&inf->stop, 1, __ATOMIC_RELEASE);
    pthread_join(inf->thread, NULL);
    inf->started = 0;
}
