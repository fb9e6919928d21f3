/* fakeapi — an in-memory stand-in for kube-apiserver on loopback HTTP, for unit tests
 * of the informers and the controller: list (with resourceVersion; in pages with limit
 * and continue), watch (chunked event streams from a resourceVersion, ERROR 410 once
 * history is expired), get,
 * create (uid, resourceVersion, generation, creationTimestamp), update with optimistic
 * concurrency (409 Conflict on a stale resourceVersion), JSON merge patch (uid and
 * resourceVersion in it as preconditions), the status subresource, and delete with uid
 * preconditions. Label selectors of the form key=value. There is no
 * kubelet and no garbage collector: tests play those parts through the direct calls.
 * A test may also make it answer late, as a loaded server does, and refuse creations it
 * names. */
#ifndef KT_FAKEAPI_H
#define KT_FAKEAPI_H

#include <cjson/cJSON.h>
#include <stddef.h>

typedef struct FakeApi FakeApi;

/* Starts listening on 127.0.0.1 (a free port). NULL on failure. */
FakeApi *fakeapi_start(void);
int fakeapi_port(FakeApi *f);
/* Closes every stream, joins the threads and frees f. */
void fakeapi_stop(FakeApi *f);

/* Direct store access, as another client would act. Paths are API paths
 * ("/api/v1/namespaces/default/pods"). Returned objects are copies the caller frees. */
cJSON *fakeapi_create(FakeApi *f, const char *collection, const char *json);
cJSON *fakeapi_get(FakeApi *f, const char *object_path);
/* Replaces the whole object (status included), bumping its resourceVersion. 0 or -ENOENT. */
int fakeapi_put(FakeApi *f, const char *object_path, const cJSON *obj);
/* Deletes the object now. 0 or -ENOENT. */
int fakeapi_delete(FakeApi *f, const char *object_path);
/* Copies of the objects in a collection (all namespaces for a cluster-wide path). */
cJSON *fakeapi_list(FakeApi *f, const char *collection);
/* Forgets the event history: open watches get ERROR 410 and must relist. */
void fakeapi_expire(FakeApi *f);
/* GET /apis/<group_version> (discovery) lists `plural` from now on; any other path that
 * names no resource is 404, as a server without that API answers. Such requests are
 * counted as "DISCOVERY". Requests for podgroups under any other group version are 404
 * too (counted by method), as on a server that does not serve them there. */
void fakeapi_serve_discovery(FakeApi *f, const char *group_version, const char *plural);
/* While on, every request gets 503 Service Unavailable and open watches end. */
void fakeapi_set_unavailable(FakeApi *f, int on);
/* Requests served with this method ("POST", "WATCH", "LIST", ...). */
unsigned long fakeapi_requests(FakeApi *f, const char *method);
/* From now on every request but a list, a watch or discovery waits `seconds` before it is
 * served, as a loaded API server answers late; 0: at once. */
void fakeapi_set_delay(FakeApi *f, double seconds);
/* The most requests with this method ("POST", "DELETE", ...) waiting at the same time to
 * be served (the delay above; requests sent one after another never overlap) since the
 * last call for it, which starts the count again. Lists and watches are not counted. */
int fakeapi_most_at_once(FakeApi *f, const char *method);
/* From now on a create (POST) of an object named `name` is refused with `code` (403,
 * 422, 500, ...) and a Status whose message names the object, `seconds` after it came
 * instead of the delay; code 0 serves it again. At most 8 names at a time. */
void fakeapi_refuse_create(FakeApi *f, const char *name, int code, double seconds);
/* While `gate` is set, a pod created with the label kueue.x-k8s.io/queue-name gets
 * spec.schedulingGates [{name: gate}], as Kueue's pod webhook gives it one (a stand-in
 * for Kueue, which the unit tests do not run; the e2e suite runs the real one). NULL: no
 * more gates. */
void fakeapi_gate_queued_pods(FakeApi *f, const char *gate);

#endif
