/* informer — keeps a local cache of one resource (optionally one namespace and a label
 * selector) in step with the API server: list, then watch from the list's
 * resourceVersion with bookmarks; a watch that ends is resumed from the last version
 * seen, a 410 Gone (or an ERROR event with code 410) triggers a fresh list. While the
 * server cannot be reached or is not ready the list or watch is retried every 0.5 s, so
 * that the cache catches up within that long of the server answering again; a refused
 * request backs off exponentially from 0.5 s to 30 s. A run of failures is logged once
 * every 10 s, and its end once. The cache is keyed "namespace/name" and every change is
 * passed to a handler. One thread per informer. */
#ifndef KT_INFORMER_H
#define KT_INFORMER_H

#include "kclient.h"

#include <cjson/cJSON.h>

/* type: "ADDED" | "MODIFIED" | "DELETED". obj is borrowed for the call. Called from
 * the informer's thread without its lock held (it may call informer_get). obj is the
 * object as cached (after the transform, without managedFields), so a handler reads
 * only what the transform keeps; DELETED of a watch passes it as received. */
typedef void (*InformerHandler)(void *ctx, const char *type, const cJSON *obj);

/* An object listed or watched that does not parse (nested deeper than cJSON reads: the
 * API server stores objects nested about 10,000 deep in fields that keep unknown ones),
 * named as far as its text could be read without parsing; "" for what was not found. */
typedef struct InformerSkip {
    const char *event; /* "LIST", or the watch event's type ("" when unknown) */
    const char *ns, *name, *uid, *generation, *resource_version;
    const char *why; /* "nested deeper than 1000 levels" */
} InformerSkip;

typedef struct InformerOptions {
    const char *group_version;  /* "v1", "kubetrain.dev/v1alpha1" */
    const char *plural;         /* "pods" */
    const char *ns;             /* NULL or "": all namespaces */
    const char *label_selector; /* NULL: none */
    InformerHandler handler;
    void *ctx;
    int watch_timeout_s; /* server-side timeout of one watch; default 300 */
    /* Prunes a copy before it is cached (fields the controller never reads), or NULL.
     * metadata.managedFields is always dropped. */
    void (*transform)(cJSON *obj);
    /* Dotted paths ("status.progress"), NULL-terminated, or NULL: a MODIFIED watch event
     * that changes only these (and metadata.resourceVersion) is cached but not passed to
     * the handler, so that writes nobody reacts to cost no reconcile. An event equal to
     * the cached object in full (its own write, stored by informer_store) still is. */
    const char *const *quiet_paths;
    /* Called (from the informer's thread, without its lock) for each object skipped
     * because it does not parse, or NULL. Such an object is logged with its namespace and
     * name, counted (kubetrain_informer_skipped_total) and left out of the cache (a watch
     * event removes the version cached before), so that one object nobody can read never
     * stops the list or watch of everyone's. */
    void (*skipped)(void *ctx, const InformerSkip *s);
} InformerOptions;

typedef struct Informer Informer;

/* Strings in opt are copied. NULL on allocation failure. */
Informer *informer_new(KubeClient *client, const InformerOptions *opt);

#define INFORMER_BACKOFF_BASE_S 0.5      /* first wait after a refused list or watch */
#define INFORMER_BACKOFF_MAX_S 30.0      /* the server refused it (401, 403, 404, 422) */
#define INFORMER_UNREACHABLE_RETRY_S 0.5 /* every wait while no answer, 429 or 5xx */
#define INFORMER_LOG_EVERY_S 10.0        /* one warning per this long of failures */

/* The wait after a list or watch failed with rc (-errno from kclient), `prev` being the
 * wait after the previous failure of this run (0 for the first): the unreachable
 * interval, or for a refusal `prev` doubled (from the base) up to the max. */
double informer_next_backoff(double prev, int rc);

/* Starts the thread. Returns 0 or -errno. */
int informer_start(Informer *inf);

/* Asks the thread to stop without waiting (so that several informers stop together). */
void informer_request_stop(Informer *inf);

/* Stops the thread (an open watch is abandoned within about a second) and joins it. */
void informer_stop(Informer *inf);

/* Frees the informer and its cache; NULL is a no-op. Stop it first. */
void informer_free(Informer *inf);

/* 1 once the first list has been stored. */
int informer_synced(Informer *inf);

/* A deep copy of the cached object, or NULL. The caller frees it (cJSON_Delete). */
cJSON *informer_get(Informer *inf, const char *ns, const char *name);

/* The cached object's quiet paths (InformerOptions.quiet_paths) in *out, a new object
 * of the object's shape ({"status": {"progress": {...}}}, a path absent left out), and
 * in *loud_rv what informer_foreach_wanted offers for the object: a caller that
 * remembers what it read of that version needs nothing else of it, and is spared
 * parsing all of it (while only quiet paths moved, only they are parsed). Returns 0,
 * -ENOENT when not cached, or -ENOMEM. */
int informer_get_quiet(Informer *inf, const char *ns, const char *name, cJSON **out,
                       long long *loud_rv);

/* A new array of copies of the cached objects in namespace ns (NULL: all) whose label
 * `label_key` equals `label_value` (NULL key: all). Caller frees. NULL only on
 * allocation failure. */
cJSON *informer_list(Informer *inf, const char *ns, const char *label_key, const char *label_value);

/* Stores a copy of obj (an object just written to the server) so that the next read
 * sees it before its watch event arrives — unless the watch already delivered this
 * version or a newer one: the copy replaces a cached object only when both
 * resourceVersions are integers and obj's is larger, and is added when the key is
 * absent and was not deleted by a later watch event. */
void informer_store(Informer *inf, const cJSON *obj);

/* Removes an object from the cache. */
void informer_remove(Informer *inf, const char *ns, const char *name);

/* Calls fn on every cached object under the read lock; fn must not call back into
 * the informer. */
void informer_foreach(Informer *inf, void (*fn)(void *ctx, const cJSON *obj), void *ctx);

/* Like informer_foreach, but asks want(ctx, key, rv) first and parses and passes to fn
 * only the objects it wants, so that a caller that remembers what it read of a version
 * skips the parse. rv is the metadata.resourceVersion of the latest version that changed
 * more than the quiet paths (InformerOptions.quiet_paths; with none, of the version
 * cached), -1 when not an integer: a caller that reads nothing of the quiet paths is
 * not offered versions that moved only those. Both run under the read lock and must not
 * call back into the informer. */
void informer_foreach_wanted(Informer *inf, int (*want)(void *ctx, const char *key, long long rv),
                             void (*fn)(void *ctx, const cJSON *obj), void *ctx);

/* Objects in the cache. */
size_t informer_size(Informer *inf);

/* "namespace/name" of obj into out; returns 0, or -EINVAL when metadata.name is not a
 * string. */
int informer_key(const cJSON *obj, char *out, size_t n);

#endif
