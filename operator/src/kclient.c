/* kclient — Kubernetes REST over libcurl. */
#include "kclient.h"

#include "clock.h"
#include "jsonx.h"
#include "olog.h"
#include "ratelimit.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Requests in flight at once (watches apart), and the connections kept for them: what
 * the client's limiter needs with answers of ANSWER_S (QPS x ANSWER_S), POOL_MIN to
 * POOL_MAX (POOL_MAX without a limiter). Each is a TLS connection of its own (HTTP/1.1), whose
 * buffers and handshakes are most of what a burst of requests costs in memory, so a burst waits for
 * a free one rather than opening more (issue 28: 64 at once at 1,000 jobs x 8 cost 9 MiB). */
#define POOL_MIN 8
#define POOL_MAX 64
#define ANSWER_S 0.25

struct KubeClient {
    KubeConfig cfg; /* deep copy of the fields used */
    RateLimit rl;
    KubeRequestObserver observer;
    pthread_mutex_t mu; /* guards the pool and the credentials below */
    sem_t slots;        /* requests in flight: at most nslots */
    int nslots;
    CURL *pool[POOL_MAX];
    int npool;
    char *token; /* current bearer token (static, file or exec) */
    struct timespec token_mtime;
    double token_checked; /* monotonic time of the last stat of token_file */
    double exec_expiry;   /* wall-clock expiry of the exec credential; 0 none */
    unsigned char *exec_cert, *exec_key;
    size_t exec_cert_len, exec_key_len;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

void kpath(char *out, size_t n, const char *group_version, const char *ns, const char *plural,
           const char *name, const char *sub)
{
    int len = snprintf(out, n, "%s%s", strcmp(group_version, "v1") == 0 ? "/api/" : "/apis/",
                       group_version);
    if (ns && *ns && len >= 0 && (size_t)len < n)
        len += snprintf(out + len, n - (size_t)len, "/namespaces/%s", ns);
    if (plural && len >= 0 && (size_t)len < n)
        len += snprintf(out + len, n - (size_t)len, "/%s", plural);
    if (name && len >= 0 && (size_t)len < n)
        len += snprintf(out + len, n - (size_t)len, "/%s", name);
    if (sub && len >= 0 && (size_t)len < n) snprintf(out + len, n - (size_t)len, "/%s", sub);
}

/* Duplicates a buffer (n bytes), NULL stays NULL. */
static void *memdup(const void *p, size_t n)
{
    if (!p) return NULL;
    void *q = malloc(n ? n : 1);
    if (q) memcpy(q, p, n);
    return q;
}

static char *sdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

static char **vdup(char **v)
{
    if (!v) return NULL;
    size_t n = 0;
    while (v[n])
        n++;
    char **o = calloc(n + 1, sizeof *o);
    for (size_t i = 0; o && i < n; i++)
        o[i] = strdup(v[i]);
    return o;
}

/* http:// is allowed only to loopback: real clusters always get verified TLS. */
static int server_allowed(const char *server)
{
    if (strncmp(server, "https://", 8) == 0) return 1;
    if (strncmp(server, "http://", 7) != 0) return 0;
    const char *h = server + 7;
    return strncmp(h, "127.", 4) == 0 || strncmp(h, "localhost:", 10) == 0 ||
           strcmp(h, "localhost") == 0 || strncmp(h, "[::1]", 5) == 0;
}

KubeClient *kclient_new(const KubeConfig *cfg, double qps, int burst, char *err, size_t errlen)
{
    pthread_once(&curl_once, curl_init_once);
    if (!cfg->server || !server_allowed(cfg->server)) {
        snprintf(err, errlen, "%s: server \"%s\" must be https:// (http:// only on loopback)",
                 cfg->source, cfg->server ? cfg->server : "");
        return NULL;
    }
    KubeClient *c = calloc(1, sizeof *c);
    if (!c) goto nomem;
    KubeConfig *d = &c->cfg;
    snprintf(d->source, sizeof d->source, "%s", cfg->source);
    d->server = sdup(cfg->server);
    d->namespace = sdup(cfg->namespace);
    d->ca_file = sdup(cfg->ca_file);
    d->cert_file = sdup(cfg->cert_file);
    d->key_file = sdup(cfg->key_file);
    d->ca_data = memdup(cfg->ca_data, cfg->ca_len);
    d->ca_len = cfg->ca_len;
    d->cert_data = memdup(cfg->cert_data, cfg->cert_len);
    d->cert_len = cfg->cert_len;
    d->key_data = memdup(cfg->key_data, cfg->key_len);
    d->key_len = cfg->key_len;
    d->token_file = sdup(cfg->token_file);
    d->exec_command = sdup(cfg->exec_command);
    d->exec_args = vdup(cfg->exec_args);
    d->exec_env = vdup(cfg->exec_env);
    d->exec_api_version = sdup(cfg->exec_api_version);
    d->insecure_requested = cfg->insecure_requested;
    d->insecure_skip_tls_verify = cfg->insecure_skip_tls_verify;
    c->token = sdup(cfg->token);
    if (!d->server || (cfg->token && !c->token)) goto nomem;
    pthread_mutex_init(&c->mu, NULL);
    double want = qps > 0 ? qps * ANSWER_S + 0.5 : POOL_MAX; /* 0: no limiter */
    c->nslots = want < POOL_MIN ? POOL_MIN : want > POOL_MAX ? POOL_MAX : (int)want;
    sem_init(&c->slots, 0, (unsigned)c->nslots);
    ratelimit_init(&c->rl, qps, burst, clock_mono());
    return c;
nomem:
    snprintf(err, errlen, "out of memory");
    if (c) {
        free(c->token);
        kcfg_clear(&c->cfg);
        free(c);
    }
    return NULL;
}

void kclient_free(KubeClient *c)
{
    if (!c) return;
    for (int i = 0; i < c->npool; i++)
        curl_easy_cleanup(c->pool[i]);
    kcfg_clear(&c->cfg);
    free(c->token);
    free(c->exec_cert);
    free(c->exec_key);
    ratelimit_destroy(&c->rl);
    pthread_mutex_destroy(&c->mu);
    sem_destroy(&c->slots);
    free(c);
}

void kclient_set_observer(KubeClient *c, KubeRequestObserver fn)
{
    c->observer = fn;
}

void kresp_free(KubeResponse *r)
{
    if (!r) return;
    cJSON_Delete(r->body);
    r->body = NULL;
}

/* ------------------------------------------------------------------------------------
 * Credentials */

/* Re-reads token_file when its mtime changed (checked at most once a second). Called
 * with c->mu held. */
static void refresh_token_file(KubeClient *c)
{
    double now = clock_mono();
    if (c->token && now - c->token_checked < 1.0) return;
    c->token_checked = now;
    struct stat st;
    if (stat(c->cfg.token_file, &st) != 0) {
        olog(OLOG_WARN, NULL, "token file %s: %s", c->cfg.token_file, strerror(errno));
        return;
    }
    if (c->token && st.st_mtim.tv_sec == c->token_mtime.tv_sec &&
        st.st_mtim.tv_nsec == c->token_mtime.tv_nsec)
        return;
    char *t;
    if (kcfg_read_file(c->cfg.token_file, &t, NULL) != 0) return;
    t[strcspn(t, "\r\n")] = 0;
    free(c->token);
    c->token = t;
    c->token_mtime = st.st_mtim;
}

/* Reads fd to its end into *buf (malloc'd, free it; NULL when there was no memory for
 * any of it) and its length into *len. Out of memory, the rest of the output is left
 * unread: the credential is then whatever JSON that was, or none. */
static void read_all(int fd, char **buf, size_t *len)
{
    size_t cap = 0;
    *buf = NULL;
    *len = 0;
    for (;;) {
        if (*len + 4096 > cap) {
            char *nb = realloc(*buf, cap + 65536);
            if (!nb) break;
            *buf = nb;
            cap += 65536;
        }
        ssize_t r = read(fd, *buf + *len, cap - *len - 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        *len += (size_t)r;
    }
}

/* Runs k's exec credential plugin (k->exec_command with k->exec_args; our environment
 * less any KUBERNETES_EXEC_INFO, then k->exec_env, then `info`), waits for it, and
 * returns 0 with its standard output in *out (as read_all leaves it; free it), *outlen
 * and its wait status in *status; or -errno when it could not be started. */
static int exec_plugin_output(const KubeConfig *k, char *info, char **out, size_t *outlen,
                              int *status)
{
    /* argv and envp are built before fork: the child of a threaded process may only
     * call async-signal-safe functions. */
    extern char **environ;
    size_t na = 0, ne = 0, nenv = 0;
    while (k->exec_args && k->exec_args[na])
        na++;
    while (k->exec_env && k->exec_env[ne])
        ne++;
    while (environ[nenv])
        nenv++;
    char **argv = calloc(na + 2, sizeof *argv);
    char **envp = calloc(nenv + ne + 2, sizeof *envp);
    int fds[2] = {-1, -1}, rc = -ENOMEM;
    pid_t pid;
    if (!argv || !envp) goto err;
    argv[0] = k->exec_command;
    for (size_t i = 0; i < na; i++)
        argv[i + 1] = k->exec_args[i];
    size_t n = 0;
    for (size_t i = 0; i < nenv; i++)
        if (strncmp(environ[i], "KUBERNETES_EXEC_INFO=", 21) != 0) envp[n++] = environ[i];
    for (size_t i = 0; i < ne; i++)
        envp[n++] = k->exec_env[i];
    envp[n++] = info;
    if (pipe(fds) != 0 || (pid = fork()) < 0) {
        rc = -errno;
        goto err;
    }
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execvpe(argv[0], argv, envp);
        _exit(127);
    }
    free(argv);
    free(envp);
    close(fds[1]);
    read_all(fds[0], out, outlen);
    close(fds[0]);
    *status = 0;
    while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
    }
    return 0;
err:
    if (fds[0] >= 0) {
        close(fds[0]);
        close(fds[1]);
    }
    free(argv);
    free(envp);
    return rc;
}

/* Keeps the credential in an exec plugin's output (out, len bytes; NULL: none) on c, as
 * the plugin's wait status allows: its token or client certificate and key, and its
 * expiry. Called with c->mu held. Returns 0, or -EACCES with err naming the plugin, its
 * exit status and what its output lacked. */
static int exec_credential_keep(KubeClient *c, const char *out, size_t len, int status, char *err,
                                size_t errlen)
{
    int rc = 0;
    cJSON *cred = out ? cJSON_ParseWithLength(out, len) : NULL;
    const char *token = jsonx_str(cred, "status.token");
    const char *cert = jsonx_str(cred, "status.clientCertificateData");
    const char *key = jsonx_str(cred, "status.clientKeyData");
    if (token && !*token) token = NULL;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || (!token && !(cert && key))) {
        snprintf(err, errlen, "exec credential plugin %s: exit status %d, %s", c->cfg.exec_command,
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                 cred ? "no status.token or client certificate" : "output is not JSON");
        rc = -EACCES;
    } else {
        free(c->token);
        c->token = sdup(token);
        free(c->exec_cert);
        free(c->exec_key);
        c->exec_cert = (unsigned char *)sdup(cert);
        c->exec_cert_len = cert ? strlen(cert) : 0;
        c->exec_key = (unsigned char *)sdup(key);
        c->exec_key_len = key ? strlen(key) : 0;
        double exp;
        c->exec_expiry =
            clock_parse_rfc3339(jsonx_str(cred, "status.expirationTimestamp"), &exp) == 0 ? exp : 0;
    }
    cJSON_Delete(cred);
    return rc;
}

/* Runs the exec credential plugin and keeps its token or certificate until it
 * expires. Called with c->mu held. Returns 0 or -errno with err. */
static int run_exec_plugin(KubeClient *c, char *err, size_t errlen)
{
    /* A credential is kept until it expires, or, without expiry, until a 401. */
    if ((c->token || c->exec_cert) && (c->exec_expiry == 0 || clock_wall() < c->exec_expiry - 10))
        return 0;
    char info[256];
    snprintf(info, sizeof info,
             "KUBERNETES_EXEC_INFO={\"apiVersion\":\"%s\",\"kind\":\"ExecCredential\","
             "\"spec\":{\"interactive\":false}}",
             c->cfg.exec_api_version);
    char *out = NULL;
    size_t len = 0;
    int status = 0;
    int rc = exec_plugin_output(&c->cfg, info, &out, &len, &status);
    if (rc) return rc;
    rc = exec_credential_keep(c, out, len, status, err, errlen);
    free(out);
    return rc;
}

/* What every request and watch of c shares: the HTTP version and the kubeconfig's TLS
 * settings and credentials. */
static void set_tls(KubeClient *c, CURL *h)
{
    const KubeConfig *k = &c->cfg;
    /* HTTP/1.1, not libcurl's default of HTTP/2 over TLS: every handle has a connection
     * of its own (pooled, or a watch's), so HTTP/2 multiplexed nothing and only added
     * CPU to every request (nghttp2, and libcurl's framing for it). */
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, k->insecure_skip_tls_verify ? 0L : 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, k->insecure_skip_tls_verify ? 0L : 2L);
    if (k->ca_file) curl_easy_setopt(h, CURLOPT_CAINFO, k->ca_file);
    if (k->ca_data) {
        struct curl_blob b = {.data = k->ca_data, .len = k->ca_len, .flags = CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &b);
    }
    if (k->cert_file) curl_easy_setopt(h, CURLOPT_SSLCERT, k->cert_file);
    if (k->key_file) curl_easy_setopt(h, CURLOPT_SSLKEY, k->key_file);
    if (k->cert_data) {
        struct curl_blob b = {.data = k->cert_data, .len = k->cert_len, .flags = CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &b);
        curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    }
    if (k->key_data) {
        struct curl_blob b = {.data = k->key_data, .len = k->key_len, .flags = CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &b);
        curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    }
}

/* The credentials that can change while c lives (a token file's or an exec plugin's) and
 * the headers every request carries, into *headers. */
static int prepare(KubeClient *c, CURL *h, struct curl_slist **headers, const char *accept,
                   char *err, size_t errlen)
{
    const KubeConfig *k = &c->cfg;
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    if (k->token_file) refresh_token_file(c);
    if (k->exec_command) rc = run_exec_plugin(c, err, errlen);
    if (rc == 0 && c->exec_cert && c->exec_key) {
        struct curl_blob b = {
            .data = c->exec_cert, .len = c->exec_cert_len, .flags = CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &b);
        struct curl_blob kb = {
            .data = c->exec_key, .len = c->exec_key_len, .flags = CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &kb);
    }
    if (rc == 0 && c->token) {
        size_t n = strlen(c->token) + 32;
        char *hdr = malloc(n);
        if (hdr) {
            snprintf(hdr, n, "Authorization: Bearer %s", c->token);
            *headers = curl_slist_append(*headers, hdr);
            free(hdr);
        }
    }
    pthread_mutex_unlock(&c->mu);
    *headers = curl_slist_append(*headers, accept ? accept : "Accept: application/json");
    *headers = curl_slist_append(*headers, "User-Agent: kubetrain-operator/0.1");
    return rc;
}

/* After a 401, forget exec and file tokens so that the next call fetches fresh ones. */
static void invalidate_credentials(KubeClient *c)
{
    pthread_mutex_lock(&c->mu);
    if (c->cfg.exec_command) {
        c->exec_expiry = 0;
        free(c->token);
        c->token = NULL;
        free(c->exec_cert);
        c->exec_cert = NULL;
        free(c->exec_key);
        c->exec_key = NULL;
    }
    if (c->cfg.token_file) c->token_checked = 0, c->token_mtime.tv_sec = 0;
    pthread_mutex_unlock(&c->mu);
}

/* ------------------------------------------------------------------------------------
 * Requests */

typedef struct Buf {
    char *data;
    size_t len, cap;
} Buf;

static size_t write_buf(char *p, size_t size, size_t nmemb, void *ud)
{
    Buf *b = ud;
    size_t n = size * nmemb;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 16384;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) return 0; /* makes curl fail with CURLE_WRITE_ERROR */
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return n;
}

static int errno_for(long code, const char *reason)
{
    if (code == 404) return -ENOENT;
    if (code == 409) return reason && strcmp(reason, "AlreadyExists") == 0 ? -EEXIST : -ESTALE;
    if (code == 410) return -ESTALE;
    if (code == 401 || code == 403) return -EACCES;
    if (code == 400 || code == 422) return -EINVAL;
    if (code == 429 || code >= 500) return -EAGAIN;
    return -EIO;
}

/* Reads a Status body into resp->reason/message. */
static void read_status(KubeResponse *resp)
{
    const char *reason = jsonx_str(resp->body, "reason");
    const char *msg = jsonx_str(resp->body, "message");
    snprintf(resp->reason, sizeof resp->reason, "%s", reason ? reason : "");
    if (msg) snprintf(resp->message, sizeof resp->message, "%s", msg);
}

/* A request's answer: a 2xx body goes to the list parser when there is one, any other
 * body (and every body without one) into buf. */
typedef struct Sink {
    Buf buf;
    ListParser *list;
    CURL *h;
    long code;
    int list_rc; /* the parser's error, which made curl stop */
    /* The caller reads nothing of a success: a 2xx body is dropped as it arrives (the
     * status writes' answers, whole objects, were a 16 KiB buffer each). */
    int drop_ok;
} Sink;

static size_t write_sink(char *p, size_t size, size_t nmemb, void *ud)
{
    Sink *s = ud;
    if (!s->list && !s->drop_ok) return write_buf(p, size, nmemb, &s->buf);
    if (s->code == 0) curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &s->code);
    int ok = s->code >= 200 && s->code < 300;
    if (ok && s->drop_ok) return size * nmemb;
    if (!ok || !s->list) return write_buf(p, size, nmemb, &s->buf);
    int rc = listparse_feed(s->list, p, size * nmemb);
    if (rc) {
        s->list_rc = rc;
        return 0;
    }
    return size * nmemb;
}

/* A handle for one request, with set_tls's options and those every request sets alike.
 * A pooled one keeps them from its last request (request() sets the rest each time):
 * a curl_easy_reset and setting them again copied the CA, certificate and key for every
 * request, a twentieth of the progress thread, most of it in malloc. With an exec
 * plugin, whose certificate can change, the handle is reset and set up afresh. */
static CURL *pool_get(KubeClient *c)
{
    CURL *h = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->npool > 0) h = c->pool[--c->npool];
    pthread_mutex_unlock(&c->mu);
    if (h && !c->cfg.exec_command) return h;
    if (h)
        curl_easy_reset(h);
    else if (!(h = curl_easy_init()))
        return NULL;
    set_tls(c, h);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_sink);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");
    return h;
}

static void pool_put(KubeClient *c, CURL *h)
{
    pthread_mutex_lock(&c->mu);
    if (c->npool < c->nslots) {
        c->pool[c->npool++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    if (h) curl_easy_cleanup(h);
}

/* kclient_request, with the body of a 2xx answer fed to `list` instead when non-NULL
 * (resp->body is then NULL). */
static int request(KubeClient *c, const char *verb, const char *path, const cJSON *body,
                   const char *content_type, KubeResponse *out, ListParser *list,
                   const char *accept, char *err, size_t errlen)
{
    KubeResponse local, *resp = out ? out : &local;
    memset(resp, 0, sizeof *resp);
    char *payload = body ? cJSON_PrintUnformatted(body) : NULL;
    if (body && !payload) {
        snprintf(err, errlen, "%s %s: out of memory", verb, path);
        return -ENOMEM;
    }
    int rc = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        while (sem_wait(&c->slots) != 0)
            continue; /* EINTR */
        ratelimit_wait(&c->rl);
        CURL *h = pool_get(c);
        struct curl_slist *headers = NULL;
        Sink sk = {.list = list, .h = h, .drop_ok = !out && !list};
        char cerr[CURL_ERROR_SIZE] = "";
        char url[4096], ct[128];
        if (!h) {
            sem_post(&c->slots);
            rc = -ENOMEM;
            snprintf(err, errlen, "%s %s: out of memory", verb, path);
            break;
        }
        rc = prepare(c, h, &headers, accept, err, errlen);
        if (rc) {
            curl_slist_free_all(headers);
            pool_put(c, h);
            sem_post(&c->slots);
            break;
        }
        snprintf(url, sizeof url, "%s%s", c->cfg.server, path);
        snprintf(ct, sizeof ct, "Content-Type: %s",
                 content_type ? content_type : "application/json");
        if (payload) headers = curl_slist_append(headers, ct);
        /* Everything a request sets is set here each time (or cleared after it), so that
         * nothing of the handle's last request carries over. */
        curl_easy_setopt(h, CURLOPT_URL, url);
        if (payload) {
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload);
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(payload));
        } else {
            curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        }
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, verb);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &sk);
        double t0 = clock_mono();
        CURLcode cc = curl_easy_perform(h);
        resp->code = 0;
        if (cc == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->code);
        /* Pointers into this call's frame and memory, gone when it returns. */
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, NULL);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, NULL);
        curl_slist_free_all(headers);
        pool_put(c, h);
        sem_post(&c->slots);
        if (c->observer) c->observer(verb, resp->code, clock_mono() - t0);
        cJSON_Delete(resp->body);
        resp->body = NULL;
        /* A caller that passed no response reads nothing of a success: not parsed. */
        int ok = cc == CURLE_OK && resp->code >= 200 && resp->code < 300;
        Buf b = sk.buf;
        if (b.data && (out || !ok)) resp->body = cJSON_ParseWithLength(b.data, b.len);
        free(b.data);
        if (sk.list_rc) {
            rc = sk.list_rc;
            snprintf(err, errlen, "%s %s: %s", verb, path,
                     rc == -EBADMSG ? "the answer is not a list" : strerror(-rc));
            break;
        }
        if (list && ok && listparse_finish(list) != 0) {
            rc = -EBADMSG;
            snprintf(err, errlen, "%s %s: the answer is not a whole list", verb, path);
            break;
        }
        if (cc != CURLE_OK) {
            snprintf(resp->message, sizeof resp->message, "%s",
                     *cerr ? cerr : curl_easy_strerror(cc));
            snprintf(err, errlen, "%s %s: %s", verb, path, resp->message);
            rc = cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -EIO;
            break;
        }
        if (resp->code >= 200 && resp->code < 300) {
            rc = 0;
            break;
        }
        read_status(resp);
        rc = errno_for(resp->code, resp->reason);
        snprintf(err, errlen, "%s %s: %ld %s: %s", verb, path, resp->code,
                 *resp->reason ? resp->reason : "Error", resp->message);
        /* A rotated or expired token: fetch a fresh one and try once more. */
        if (resp->code == 401 && attempt == 0 && (c->cfg.exec_command || c->cfg.token_file)) {
            invalidate_credentials(c);
            continue;
        }
        break;
    }
    free(payload);
    if (!out) kresp_free(&local);
    return rc;
}

int kclient_request(KubeClient *c, const char *verb, const char *path, const cJSON *body,
                    const char *content_type, KubeResponse *resp, char *err, size_t errlen)
{
    return request(c, verb, path, body, content_type, resp, NULL, NULL, err, errlen);
}

int kclient_write(KubeClient *c, const char *verb, const char *path, const cJSON *body,
                  const char *content_type, char *err, size_t errlen)
{
    static const char accept[] =
        "Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    return request(c, verb, path, body, content_type, NULL, NULL, accept, err, errlen);
}

int kclient_list(KubeClient *c, const char *path, ListItemFn fn, ListSkipFn skip, void *ctx,
                 cJSON **meta, char *err, size_t errlen)
{
    ListParser lp;
    listparse_init(&lp, fn, ctx);
    lp.skip = skip;
    int rc = request(c, "GET", path, NULL, NULL, NULL, &lp, NULL, err, errlen);
    *meta = rc ? NULL : lp.meta;
    if (!rc) lp.meta = NULL;
    listparse_free(&lp);
    return rc;
}

/* ------------------------------------------------------------------------------------
 * Watch */

typedef struct WatchCtx {
    WatchParser parser;
    int cb_rc;
    volatile int *stop;
    long code;
    Buf errbody; /* the body of a non-200 answer */
    CURL *h;
    double last_byte, idle_timeout;
} WatchCtx;

static size_t write_watch(char *p, size_t size, size_t nmemb, void *ud)
{
    WatchCtx *w = ud;
    size_t n = size * nmemb;
    w->last_byte = clock_mono();
    if (w->code == 0) curl_easy_getinfo(w->h, CURLINFO_RESPONSE_CODE, &w->code);
    if (w->code != 200) return write_buf(p, size, nmemb, &w->errbody);
    int rc = watchparse_feed(&w->parser, p, n);
    if (rc) {
        w->cb_rc = rc;
        return 0;
    }
    return n;
}

static int progress_watch(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    WatchCtx *w = ud;
    if (w->stop && __atomic_load_n(w->stop, __ATOMIC_ACQUIRE)) return 1;
    if (w->idle_timeout > 0 && clock_mono() - w->last_byte > w->idle_timeout) return 1;
    return 0;
}

int kclient_watch(KubeClient *c, const char *path, WatchEventFn fn, WatchSkipFn skip, void *ctx,
                  volatile int *stop, double idle_timeout_s, char *err, size_t errlen)
{
    ratelimit_wait(&c->rl);
    CURL *h = curl_easy_init();
    if (!h) return -ENOMEM;
    set_tls(c, h);
    struct curl_slist *headers = NULL;
    int rc = prepare(c, h, &headers, NULL, err, errlen);
    if (rc) {
        curl_slist_free_all(headers);
        curl_easy_cleanup(h);
        return rc;
    }
    WatchCtx w = {.stop = stop, .h = h, .last_byte = clock_mono(), .idle_timeout = idle_timeout_s};
    watchparse_init(&w.parser, fn, ctx);
    w.parser.skip = skip;
    char url[4096], cerr[CURL_ERROR_SIZE] = "";
    snprintf(url, sizeof url, "%s%s", c->cfg.server, path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_watch);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &w);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, progress_watch);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &w);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    double t0 = clock_mono();
    CURLcode cc = curl_easy_perform(h);
    if (w.code == 0) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &w.code);
    if (c->observer) c->observer("WATCH", w.code, clock_mono() - t0);
    if (w.cb_rc) {
        rc = w.cb_rc;
    } else if (stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
        rc = -ECANCELED;
    } else if (cc != CURLE_OK) {
        snprintf(err, errlen, "WATCH %s: %s", path,
                 cc == CURLE_ABORTED_BY_CALLBACK ? "no data within the idle timeout"
                                                 : (*cerr ? cerr : curl_easy_strerror(cc)));
        rc = cc == CURLE_ABORTED_BY_CALLBACK || cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -EIO;
    } else if (w.code != 200) {
        KubeResponse r = {.code = w.code};
        r.body = w.errbody.data ? cJSON_ParseWithLength(w.errbody.data, w.errbody.len) : NULL;
        read_status(&r);
        rc = errno_for(w.code, r.reason);
        snprintf(err, errlen, "WATCH %s: %ld %s: %s", path, w.code, *r.reason ? r.reason : "Error",
                 r.message);
        if (w.code == 401) invalidate_credentials(c);
        kresp_free(&r);
    }
    free(w.errbody.data);
    watchparse_free(&w.parser);
    curl_slist_free_all(headers);
    curl_easy_cleanup(h);
    return rc;
}
