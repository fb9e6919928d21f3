/* kclient — a Kubernetes REST client on libcurl: verified TLS, bearer tokens (static,
 * from a file re-read when it rotates, or from an exec credential plugin), client
 * certificates, a QPS/burst limiter, API errors read as Status objects, and watch
 * streams. Thread-safe: each call borrows an easy handle from a pool, so connections
 * are reused across calls. */
#ifndef KT_KCLIENT_H
#define KT_KCLIENT_H

#include "kcfg.h"
#include "listparse.h"
#include "watchparse.h"

#include <cjson/cJSON.h>
#include <stddef.h>

typedef struct KubeClient KubeClient;

typedef struct KubeResponse {
    long code;         /* HTTP status; 0 when no response came */
    cJSON *body;       /* the parsed JSON body, or NULL; owned, freed by kresp_free */
    char reason[64];   /* Status.reason of an error ("NotFound", "AlreadyExists", ...) */
    char message[512]; /* Status.message, or the transport error */
} KubeResponse;

/* Called after every request with the verb, the HTTP code (0: no response) and the
 * seconds it took; must be thread-safe. */
typedef void (*KubeRequestObserver)(const char *verb, long code, double seconds);

/* Creates a client for `cfg` (copied). qps <= 0 disables the limiter. Returns NULL
 * with err set (for example an http:// server that is not loopback). */
KubeClient *kclient_new(const KubeConfig *cfg, double qps, int burst, char *err, size_t errlen);

/* Frees the client; NULL is a no-op. No call may be in flight. */
void kclient_free(KubeClient *c);

void kclient_set_observer(KubeClient *c, KubeRequestObserver fn);

/* One request: verb GET | POST | PUT | PATCH | DELETE, path from kpath (with any query),
 * body NULL or a JSON object sent with content_type (NULL: application/json).
 * Returns 0 on a 2xx answer; otherwise a negative errno from the status —
 * -ENOENT 404, -EEXIST 409 AlreadyExists, -ESTALE 409 Conflict (stale
 * resourceVersion), -EACCES 401/403, -EINVAL 400/422, -EAGAIN 429/5xx, -ETIMEDOUT /
 * -EIO transport — with "VERB path: code Reason: message" in err. *resp is filled in
 * either case when non-NULL (free it with kresp_free); with resp NULL the body of a 2xx
 * answer is not even parsed. */
int kclient_request(KubeClient *c, const char *verb, const char *path, const cJSON *body,
                    const char *content_type, KubeResponse *resp, char *err, size_t errlen);

/* kclient_request without a response, for a write of a resource's object whose answer
 * nobody reads: the API server is asked for the object's metadata only (Accept
 * ...;as=PartialObjectMetadata), not the whole object, which it would otherwise send,
 * encrypt and have received in full for every write. Not for a path that answers a
 * Status rather than the object (the server could not make metadata of it: 406). */
int kclient_write(KubeClient *c, const char *verb, const char *path, const cJSON *body,
                  const char *content_type, char *err, size_t errlen);

/* A GET of a list (path with its query) whose items are handed to fn one at a time as
 * the body arrives (listparse.h): the page is never held whole, as text or parsed. The
 * list's metadata (resourceVersion, continue) is moved to *meta (caller frees). Returns
 * 0, fn's non-zero value, -EBADMSG for a body that is not a whole list, or the errors
 * of kclient_request, with err set. Items already handed on stay with fn's owner when
 * a later one fails. An item that does not parse is skipped and handed to skip (with
 * ctx) when it is not NULL. */
int kclient_list(KubeClient *c, const char *path, ListItemFn fn, ListSkipFn skip, void *ctx,
                 cJSON **meta, char *err, size_t errlen);

/* Frees resp's body; the struct may be reused. */
void kresp_free(KubeResponse *resp);

/* Streams a watch (path must include ?watch=1 ...) into fn until the server ends it
 * (0), *stop becomes non-zero (-ECANCELED), the callback returns non-zero (that
 * value), or an error (negative errno, err set). A response that is not 200 is read as
 * a Status (410 Gone gives -ESTALE). `idle_timeout_s`: abort when no byte comes for
 * that long (bookmarks keep a healthy watch busy). A line that does not parse is
 * skipped and handed to skip (with ctx) when it is not NULL. */
int kclient_watch(KubeClient *c, const char *path, WatchEventFn fn, WatchSkipFn skip, void *ctx,
                  volatile int *stop, double idle_timeout_s, char *err, size_t errlen);

/* Builds an API path: /api/v1 for group_version "v1", else /apis/<group_version>;
 * then /namespaces/<ns> when ns is non-empty, /<plural>, /<name>, /<sub> as given. */
void kpath(char *out, size_t n, const char *group_version, const char *ns, const char *plural,
           const char *name, const char *sub);

#endif
