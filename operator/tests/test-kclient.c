/* The REST client against a scripted HTTP server on loopback: Status errors mapped to
 * errno, bearer tokens re-read when the token file rotates (and after a 401), request
 * bodies, and a watch stream delivered in chunks cut mid-event. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "jsonx.h"
#include "kclient.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct Server {
    int fd, port;
    pthread_t thread;
    pthread_mutex_t mu;
    char log[16384]; /* "VERB path auth=<token> body=<body>\n" per request */
    size_t loglen;
    int reject_token_once; /* answer 401 to the first request with this flag set */
} Server;

static Server srv;
static char tmpdir[256], token_path[512];

static void send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

static void respond(int fd, int code, const char *reason, const char *body)
{
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     code, reason, strlen(body));
    send_all(fd, head, (size_t)n);
    send_all(fd, body, strlen(body));
}

static void send_chunk(int fd, const char *p, size_t n)
{
    char h[32];
    int k = snprintf(h, sizeof h, "%zx\r\n", n);
    send_all(fd, h, (size_t)k);
    send_all(fd, p, n);
    send_all(fd, "\r\n", 2);
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
}

static const char WATCH_BODY[] =
    "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"j1\",\"resourceVersion\":\"5\"}}}\n"
    "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"6\"}}}\n"
    "{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":\"j1\",\"resourceVersion\":\"7\"}}}"
    "\n";

static void handle(int fd)
{
    char req[16384];
    size_t len = 0;
    char *end = NULL;
    while (len < sizeof req - 1) {
        ssize_t r = read(fd, req + len, sizeof req - 1 - len);
        if (r <= 0) return;
        len += (size_t)r;
        req[len] = 0;
        if ((end = strstr(req, "\r\n\r\n"))) {
            const char *cl = strcasestr(req, "Content-Length:");
            size_t want = cl ? (size_t)atoi(cl + 15) : 0;
            if (len - (size_t)(end + 4 - req) >= want) break;
        }
    }
    if (!end) return;
    char verb[16], path[1024];
    if (sscanf(req, "%15s %1023s", verb, path) != 2) return;
    char auth[128] = "-";
    const char *a = strcasestr(req, "Authorization: Bearer ");
    if (a) sscanf(a + 22, "%127[^\r\n]", auth);
    pthread_mutex_lock(&srv.mu);
    srv.loglen += (size_t)snprintf(srv.log + srv.loglen, sizeof srv.log - srv.loglen,
                                   "%s %s auth=%s body=%s\n", verb, path, auth, end + 4);
    int reject = srv.reject_token_once;
    srv.reject_token_once = 0;
    pthread_mutex_unlock(&srv.mu);

    if (reject) {
        respond(fd, 401, "Unauthorized",
                "{\"kind\":\"Status\",\"code\":401,\"reason\":\"Unauthorized\",\"message\":\"bad "
                "token\"}");
    } else if (strstr(path, "watch=1") && strstr(path, "gone")) {
        respond(fd, 410, "Gone",
                "{\"kind\":\"Status\",\"code\":410,\"reason\":\"Expired\",\"message\":\"too old "
                "resource version: 1 (5)\"}");
    } else if (strstr(path, "watch=1") && strstr(path, "cut")) {
        /* One whole event, then the connection drops in the middle of the next. */
        const char *head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                           "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
        send_all(fd, head, strlen(head));
        send_chunk(fd, WATCH_BODY, 100);
    } else if (strstr(path, "watch=1")) {
        const char *head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                           "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
        send_all(fd, head, strlen(head));
        /* Chunks cut mid-event, mid-string and mid-escape. */
        size_t n = sizeof WATCH_BODY - 1, cuts[] = {1, 17, 40, 41, 90, 91, 150, n};
        size_t off = 0;
        for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
            size_t to = cuts[i] < n ? cuts[i] : n;
            if (to > off) send_chunk(fd, WATCH_BODY + off, to - off);
            off = to;
        }
        send_all(fd, "0\r\n\r\n", 5);
    } else if (strcmp(verb, "POST") == 0) {
        respond(fd, 409, "Conflict",
                "{\"kind\":\"Status\",\"code\":409,\"reason\":\"AlreadyExists\",\"message\":"
                "\"pods \\\"x\\\" already exists\"}");
    } else if (strcmp(verb, "PUT") == 0) {
        respond(
            fd, 409, "Conflict",
            "{\"kind\":\"Status\",\"code\":409,\"reason\":\"Conflict\",\"message\":\"the object "
            "has been modified\"}");
    } else if (strstr(path, "missing")) {
        respond(
            fd, 404, "Not Found",
            "{\"kind\":\"Status\",\"code\":404,\"reason\":\"NotFound\",\"message\":\"not found\"}");
    } else {
        respond(fd, 200, "OK", "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\"}}");
    }
}

static void *serve(void *arg)
{
    (void)arg;
    for (;;) {
        int c = accept(srv.fd, NULL, NULL);
        if (c < 0) return NULL;
        handle(c);
        close(c);
    }
}

static void write_token(const char *t)
{
    FILE *f = fopen(token_path, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", t);
    fclose(f);
    /* A distinct mtime even within one clock tick. */
    static long bump = 0;
    struct timespec times[2];
    clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec += ++bump;
    times[1] = times[0];
    utimensat(AT_FDCWD, token_path, times, 0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kt-kclient-XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    snprintf(token_path, sizeof token_path, "%s/token", tmpdir);
    pthread_mutex_init(&srv.mu, NULL);
    srv.fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (bind(srv.fd, (struct sockaddr *)&a, sizeof a) || listen(srv.fd, 16) ||
        getsockname(srv.fd, (struct sockaddr *)&a, &al))
        return -1;
    srv.port = ntohs(a.sin_port);
    return pthread_create(&srv.thread, NULL, serve, NULL);
}

static int teardown(void **state)
{
    (void)state;
    shutdown(srv.fd, SHUT_RDWR);
    close(srv.fd);
    pthread_join(srv.thread, NULL);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static KubeClient *client(void)
{
    char server[64], err[256];
    snprintf(server, sizeof server, "http://127.0.0.1:%d", srv.port);
    KubeConfig cfg = {.server = server, .token_file = token_path};
    snprintf(cfg.source, sizeof cfg.source, "test");
    KubeClient *c = kclient_new(&cfg, 0, 0, err, sizeof err);
    if (!c) fail_msg("kclient_new: %s", err);
    return c;
}

static void log_reset(void)
{
    pthread_mutex_lock(&srv.mu);
    srv.loglen = 0;
    srv.log[0] = 0;
    pthread_mutex_unlock(&srv.mu);
}

static void test_paths(void **state)
{
    (void)state;
    char p[256];
    kpath(p, sizeof p, "v1", "default", "pods", "a", NULL);
    assert_string_equal(p, "/api/v1/namespaces/default/pods/a");
    kpath(p, sizeof p, "kubetrain.dev/v1alpha1", "ns", "trainingjobs", "j", "status");
    assert_string_equal(p, "/apis/kubetrain.dev/v1alpha1/namespaces/ns/trainingjobs/j/status");
    kpath(p, sizeof p, "kubetrain.dev/v1alpha1", NULL, "trainingjobs", NULL, NULL);
    assert_string_equal(p, "/apis/kubetrain.dev/v1alpha1/trainingjobs");
}

static void test_plain_http_only_on_loopback(void **state)
{
    (void)state;
    char err[256];
    KubeConfig cfg = {.server = "http://10.0.0.1:8080"};
    assert_null(kclient_new(&cfg, 0, 0, err, sizeof err));
    assert_non_null(strstr(err, "must be https://"));
}

static void test_status_errors(void **state)
{
    (void)state;
    write_token("t1");
    KubeClient *c = client();
    KubeResponse r;
    char err[512];
    cJSON *body = cJSON_Parse("{\"kind\":\"Pod\",\"metadata\":{\"name\":\"x\"}}");
    log_reset();
    assert_int_equal(
        kclient_request(c, "GET", "/api/v1/namespaces/d/pods/p", NULL, NULL, &r, err, sizeof err),
        0);
    assert_int_equal(r.code, 200);
    assert_string_equal(jsonx_str(r.body, "metadata.name"), "p");
    kresp_free(&r);
    assert_int_equal(
        kclient_request(c, "POST", "/api/v1/namespaces/d/pods", body, NULL, &r, err, sizeof err),
        -EEXIST);
    assert_string_equal(r.reason, "AlreadyExists");
    assert_string_equal(
        err, "POST /api/v1/namespaces/d/pods: 409 AlreadyExists: pods \"x\" already exists");
    kresp_free(&r);
    assert_int_equal(
        kclient_request(c, "PUT", "/api/v1/namespaces/d/pods/x", body, NULL, NULL, err, sizeof err),
        -ESTALE);
    assert_int_equal(kclient_request(c, "DELETE", "/api/v1/namespaces/d/pods/missing", NULL, NULL,
                                     NULL, err, sizeof err),
                     -ENOENT);
    assert_non_null(strstr(err, "404 NotFound"));
    pthread_mutex_lock(&srv.mu);
    assert_string_equal(srv.log, "GET /api/v1/namespaces/d/pods/p auth=t1 body=\n"
                                 "POST /api/v1/namespaces/d/pods auth=t1 "
                                 "body={\"kind\":\"Pod\",\"metadata\":{\"name\":\"x\"}}\n"
                                 "PUT /api/v1/namespaces/d/pods/x auth=t1 "
                                 "body={\"kind\":\"Pod\",\"metadata\":{\"name\":\"x\"}}\n"
                                 "DELETE /api/v1/namespaces/d/pods/missing auth=t1 body=\n");
    pthread_mutex_unlock(&srv.mu);
    cJSON_Delete(body);
    kclient_free(c);
}

static void test_token_rotation(void **state)
{
    (void)state;
    write_token("t1");
    KubeClient *c = client();
    char err[512];
    log_reset();
    assert_int_equal(kclient_request(c, "GET", "/a", NULL, NULL, NULL, err, sizeof err), 0);
    write_token("t2");
    /* The file is checked at most once a second; a 401 forces a re-read and one retry. */
    pthread_mutex_lock(&srv.mu);
    srv.reject_token_once = 1;
    pthread_mutex_unlock(&srv.mu);
    assert_int_equal(kclient_request(c, "GET", "/b", NULL, NULL, NULL, err, sizeof err), 0);
    sleep(1);
    write_token("t3");
    sleep(1);
    assert_int_equal(kclient_request(c, "GET", "/c", NULL, NULL, NULL, err, sizeof err), 0);
    pthread_mutex_lock(&srv.mu);
    assert_string_equal(srv.log, "GET /a auth=t1 body=\n"
                                 "GET /b auth=t1 body=\n"
                                 "GET /b auth=t2 body=\n"
                                 "GET /c auth=t3 body=\n");
    pthread_mutex_unlock(&srv.mu);
    kclient_free(c);
}

static void test_exec_plugin(void **state)
{
    (void)state;
    /* A plugin that answers with the token in its state file, and counts its runs. */
    char plugin[600], statef[600], runs[600];
    snprintf(plugin, sizeof plugin, "%s/plugin.sh", tmpdir);
    snprintf(statef, sizeof statef, "%s/plugin.token", tmpdir);
    snprintf(runs, sizeof runs, "%s/plugin.runs", tmpdir);
    FILE *f = fopen(plugin, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\n"
               "echo run >> \"$RUNS\"\n"
               "case \"$KUBERNETES_EXEC_INFO\" in *ExecCredential*) ;; *) exit 3;; esac\n"
               "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":"
               "\"ExecCredential\",\"status\":{\"token\":\"%%s\"}}' \"$(cat \"$1\")\"\n");
    fclose(f);
    chmod(plugin, 0755);
    f = fopen(statef, "w");
    fputs("e1", f);
    fclose(f);

    char server[64], err[512], env_runs[700];
    snprintf(server, sizeof server, "http://127.0.0.1:%d", srv.port);
    snprintf(env_runs, sizeof env_runs, "RUNS=%s", runs);
    char *args[] = {statef, NULL};
    char *env[] = {env_runs, NULL};
    KubeConfig cfg = {.server = server,
                      .exec_command = plugin,
                      .exec_args = args,
                      .exec_env = env,
                      .exec_api_version = "client.authentication.k8s.io/v1"};
    KubeClient *c = kclient_new(&cfg, 0, 0, err, sizeof err);
    assert_non_null(c);
    log_reset();
    if (kclient_request(c, "GET", "/x", NULL, NULL, NULL, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(kclient_request(c, "GET", "/y", NULL, NULL, NULL, err, sizeof err), 0);
    /* The credential is rejected: the plugin runs again and the request is retried. */
    f = fopen(statef, "w");
    fputs("e2", f);
    fclose(f);
    pthread_mutex_lock(&srv.mu);
    srv.reject_token_once = 1;
    pthread_mutex_unlock(&srv.mu);
    assert_int_equal(kclient_request(c, "GET", "/z", NULL, NULL, NULL, err, sizeof err), 0);
    pthread_mutex_lock(&srv.mu);
    assert_string_equal(srv.log, "GET /x auth=e1 body=\n"
                                 "GET /y auth=e1 body=\n"
                                 "GET /z auth=e1 body=\n"
                                 "GET /z auth=e2 body=\n");
    pthread_mutex_unlock(&srv.mu);
    char *text;
    size_t len;
    assert_int_equal(kcfg_read_file(runs, &text, &len), 0);
    assert_string_equal(text, "run\nrun\n");
    free(text);
    kclient_free(c);

    /* A plugin that fails: the request fails with its exit status named. */
    char *bad_args[] = {"/nonexistent-token-file", NULL};
    cfg.exec_args = bad_args;
    c = kclient_new(&cfg, 0, 0, err, sizeof err);
    assert_int_equal(kclient_request(c, "GET", "/w", NULL, NULL, NULL, err, sizeof err), -EACCES);
    assert_non_null(strstr(err, "exec credential plugin"));
    kclient_free(c);
}

typedef struct Events {
    char log[1024];
    size_t len;
} Events;

static int on_event(void *ctx, const char *type, cJSON *obj)
{
    Events *e = ctx;
    const char *rv = jsonx_str(obj, "metadata.resourceVersion");
    e->len +=
        (size_t)snprintf(e->log + e->len, sizeof e->log - e->len, "%s %s\n", type, rv ? rv : "-");
    return 0;
}

static void test_watch_stream_and_gone(void **state)
{
    (void)state;
    write_token("t1");
    KubeClient *c = client();
    char err[512] = "";
    Events ev = {0};
    volatile int stop = 0;
    int rc = kclient_watch(c, "/apis/kubetrain.dev/v1alpha1/trainingjobs?watch=1&resourceVersion=4",
                           on_event, NULL, &ev, &stop, 10, err, sizeof err);
    if (rc) fail_msg("watch: %d %s", rc, err);
    assert_string_equal(ev.log, "ADDED 5\nBOOKMARK 6\nDELETED 7\n");
    rc = kclient_watch(c, "/apis/kubetrain.dev/v1alpha1/trainingjobs?watch=1&gone=1", on_event,
                       NULL, &ev, &stop, 10, err, sizeof err);
    assert_int_equal(rc, -ESTALE);
    assert_non_null(strstr(err, "410 Expired"));
    /* Cut mid-object: the whole event arrives, the fragment is dropped, the caller gets
     * an error and resumes from the last resourceVersion it saw. */
    Events cut = {0};
    rc = kclient_watch(c, "/apis/kubetrain.dev/v1alpha1/trainingjobs?watch=1&cut=1", on_event, NULL,
                       &cut, &stop, 10, err, sizeof err);
    assert_int_equal(rc, -EIO);
    assert_string_equal(cut.log, "ADDED 5\n");
    kclient_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths),         cmocka_unit_test(test_plain_http_only_on_loopback),
        cmocka_unit_test(test_status_errors), cmocka_unit_test(test_token_rotation),
        cmocka_unit_test(test_exec_plugin),   cmocka_unit_test(test_watch_stream_and_gone),
    };
    return cmocka_run_group_tests_name("kclient", tests, setup, teardown);
}
