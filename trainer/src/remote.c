#include "remote.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

#define ERROR_BODY_MAX 2048
#define BACKOFF_FIRST_S 0.5
#define BACKOFF_MAX_S 30.0
/* SHA-256 of an empty body: S3 wants the payload's hash signed, and a GET has none. */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* ---------------------------------------------------------------- configuration */

typedef struct {
    char endpoint[1024];
    char region[128];
    char key_id[256], secret[256], token[4096];
    long retries, timeout_s;
} Conf;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static const char *env_first(const char *a, const char *b, const char *c)
{
    const char *names[] = {a, b, c};
    for (size_t i = 0; i < 3; i++) {
        const char *v = names[i] ? getenv(names[i]) : NULL;
        if (v && *v) return v;
    }
    return NULL;
}

/* Copies v into out; -EINVAL naming what when it does not fit (the value is not
 * printed: it may be a secret). */
static int copy_setting(char *out, size_t outlen, const char *v, const char *what, char *err,
                        size_t errlen)
{
    if (strlen(v) < outlen) {
        memcpy(out, v, strlen(v) + 1);
        return 0;
    }
    snprintf(err, errlen, "remote: %s is longer than %zu bytes", what, outlen - 1);
    return -EINVAL;
}

static long env_long(const char *name, long def, long lo, long hi, char *err, size_t errlen,
                     int *rc)
{
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || *end || n < lo || n > hi) {
        snprintf(err, errlen, "remote: %s='%.64s': expected an integer in [%ld, %ld]", name, v, lo,
                 hi);
        *rc = -EINVAL;
    }
    return n;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    return s;
}

/* The profile's keys of the shared credentials file (an INI file). A missing default
 * file means anonymous requests; a file named by AWS_SHARED_CREDENTIALS_FILE must exist
 * and hold the profile's two keys. */
static int read_credentials(Conf *c, char *err, size_t errlen)
{
    const char *path = getenv("AWS_SHARED_CREDENTIALS_FILE"), *home = getenv("HOME");
    const int named = path && *path;
    char def[4096];
    if (!named) {
        if (!home) return 0;
        snprintf(def, sizeof def, "%s/.aws/credentials", home);
        path = def;
    }
    const char *profile = env_first("AWS_PROFILE", NULL, NULL);
    if (!profile) profile = "default";
    FILE *fp = fopen(path, "r");
    if (!fp) {
        if (!named && errno == ENOENT) return 0;
        snprintf(err, errlen, "%s: cannot open the credentials file: %s", path, strerror(errno));
        return -EINVAL;
    }
    char line[8192];
    int in = 0, rc = 0;
    while (!rc && fgets(line, sizeof line, fp)) {
        char *s = trim(line), *eq;
        if (*s == '[') {
            char *close = strchr(s, ']');
            if (close) *close = '\0';
            in = !strcmp(trim(s + 1), profile);
        } else if (in && (eq = strchr(s, '='))) {
            *eq = '\0';
            const char *k = trim(s), *v = trim(eq + 1);
            if (!strcmp(k, "aws_access_key_id"))
                rc = copy_setting(c->key_id, sizeof c->key_id, v, "aws_access_key_id", err, errlen);
            else if (!strcmp(k, "aws_secret_access_key"))
                rc = copy_setting(c->secret, sizeof c->secret, v, "aws_secret_access_key", err,
                                  errlen);
            else if (!strcmp(k, "aws_session_token"))
                rc = copy_setting(c->token, sizeof c->token, v, "aws_session_token", err, errlen);
        }
    }
    fclose(fp);
    if (!rc && (!*c->key_id || !*c->secret) && (named || *c->key_id || *c->secret)) {
        snprintf(err, errlen,
                 "%s: profile [%.200s] has no aws_access_key_id and aws_secret_access_key", path,
                 profile);
        rc = -EINVAL;
    }
    return rc;
}

static int conf_load(Conf *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    int rc = 0;
    const char *region = env_first("AWS_REGION", "AWS_DEFAULT_REGION", NULL);
    const char *endpoint =
        env_first("KUBETRAIN_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL");
    if ((rc = copy_setting(c->region, sizeof c->region, region ? region : "us-east-1", "AWS_REGION",
                           err, errlen)))
        return rc;
    if (endpoint)
        rc =
            copy_setting(c->endpoint, sizeof c->endpoint, endpoint, "the S3 endpoint", err, errlen);
    else snprintf(c->endpoint, sizeof c->endpoint, "https://s3.%s.amazonaws.com", c->region);
    if (rc) return rc;
    for (size_t n = strlen(c->endpoint); n && c->endpoint[n - 1] == '/';) c->endpoint[--n] = '\0';
    const char *id = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
    const char *token = getenv("AWS_SESSION_TOKEN");
    if ((id && *id) != (secret && *secret)) {
        snprintf(err, errlen, "remote: %s is set but %s is not",
                 id && *id ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
                 id && *id ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
        return -EINVAL;
    }
    if (id && *id) {
        if ((rc =
                 copy_setting(c->key_id, sizeof c->key_id, id, "AWS_ACCESS_KEY_ID", err, errlen)) ||
            (rc = copy_setting(c->secret, sizeof c->secret, secret, "AWS_SECRET_ACCESS_KEY", err,
                               errlen)) ||
            (token && (rc = copy_setting(c->token, sizeof c->token, token, "AWS_SESSION_TOKEN", err,
                                         errlen))))
            return rc;
    } else if ((rc = read_credentials(c, err, errlen))) {
        return rc;
    }
    c->retries = env_long("KUBETRAIN_REMOTE_RETRIES", 5, 0, 100, err, errlen, &rc);
    if (!rc) c->timeout_s = env_long("KUBETRAIN_REMOTE_TIMEOUT", 30, 1, 3600, err, errlen, &rc);
    return rc;
}

/* ---------------------------------------------------------------- accounting */

static pthread_mutex_t stats_mu = PTHREAD_MUTEX_INITIALIZER;
static RemoteStats stats;

/* Adds a request's body bytes (what h received) to the account, and the request. */
static void count_request(CURL *h)
{
    curl_off_t got = 0;
    curl_easy_getinfo(h, CURLINFO_SIZE_DOWNLOAD_T, &got);
    pthread_mutex_lock(&stats_mu);
    stats.requests++;
    stats.bytes += got > 0 ? (uint64_t)got : 0;
    pthread_mutex_unlock(&stats_mu);
}

/* Adds the seconds since t0 (util_now) that a caller waited. */
static void count_wait(double t0)
{
    const double s = util_now() - t0;
    pthread_mutex_lock(&stats_mu);
    stats.seconds += s;
    pthread_mutex_unlock(&stats_mu);
}

void remote_stats(RemoteStats *out)
{
    pthread_mutex_lock(&stats_mu);
    *out = stats;
    pthread_mutex_unlock(&stats_mu);
}

/* ---------------------------------------------------------------- URLs */

/* An object's address: its URL for messages (remote_redact's), the URL requested, and
 * whether S3's signing and error codes apply. */
typedef struct {
    char name[4096];
    char url[8192];
    int s3;
} Target;

static int has_prefix(const char *s, const char *p)
{
    return !strncmp(s, p, strlen(p));
}

int remote_is_url(const char *path)
{
    return has_prefix(path, "s3://") || has_prefix(path, "http://") || has_prefix(path, "https://");
}

/* Appends n bytes of s to out (a string of *used bytes, outlen in all) as far as they
 * fit. */
static void put(char *out, size_t outlen, size_t *used, const char *s, size_t n)
{
    if (*used + n >= outlen) n = outlen - 1 - *used;
    memcpy(out + *used, s, n);
    *used += n;
    out[*used] = '\0';
}

void remote_redact(const char *text, char *out, size_t outlen)
{
    static const char hidden[] = "[redacted]";
    size_t used = 0;
    if (!outlen) return;
    out[0] = '\0';
    while (*text) {
        const char *scheme = strstr(text, "://");
        /* the URL's scheme: a few letters before "://" that remote_is_url takes */
        const char *start = scheme;
        while (start && start > text && isalnum((unsigned char)start[-1])) start--;
        if (!scheme || !remote_is_url(start)) {
            const size_t n = scheme ? (size_t)(scheme - text) + 3 : strlen(text);
            put(out, outlen, &used, text, n);
            text += n;
            continue;
        }
        put(out, outlen, &used, text, (size_t)(scheme + 3 - text));
        const int http = !has_prefix(start, "s3://");
        const char *end = scheme + 3 + strcspn(scheme + 3, ",");
        const char *host = scheme + 3, *path = host + strcspn(host, http ? "/?#," : "/,");
        const char *at = NULL;
        for (const char *q = host; q < path; q++)
            if (*q == '@') at = q; /* the last '@': a password may hold one */
        if (at) {
            put(out, outlen, &used, hidden, strlen(hidden));
            host = at;
        }
        const char *query = http ? path + strcspn(path, "?#,") : end;
        put(out, outlen, &used, host, (size_t)(query - host));
        if (query < end) {
            put(out, outlen, &used, "?", 1);
            put(out, outlen, &used, hidden, strlen(hidden));
        }
        text = end;
    }
}

/* Appends s percent-encoded as SigV4 wants it (all but A-Za-z0-9-_.~, and '/' when
 * keep_slash) to out (outlen bytes, holding a string); -ENAMETOOLONG when it does not
 * fit. */
static int append_encoded(char *out, size_t outlen, const char *s, int keep_slash)
{
    size_t n = strlen(out);
    for (; *s; s++) {
        const unsigned char ch = (unsigned char)*s;
        const int keep = isalnum(ch) || strchr("-_.~", ch) || (keep_slash && ch == '/');
        if (n + 4 > outlen) return -ENAMETOOLONG;
        n += keep ? (size_t)snprintf(out + n, 2, "%c", ch)
                  : (size_t)snprintf(out + n, 4, "%%%02X", ch);
    }
    return 0;
}

/* s3://BUCKET/KEY into bucket and key (either may come back empty). */
static int split_s3(const char *url, char *bucket, size_t blen, const char **key)
{
    const char *b = url + 5, *slash = strchr(b, '/');
    size_t n = slash ? (size_t)(slash - b) : strlen(b);
    if (n == 0 || n >= blen) return -EINVAL;
    memcpy(bucket, b, n);
    bucket[n] = '\0';
    *key = slash ? slash + 1 : "";
    return 0;
}

static int target_of(const Conf *c, const char *url, Target *t, char *err, size_t errlen)
{
    remote_redact(url, t->name, sizeof t->name);
    t->s3 = has_prefix(url, "s3://");
    char bucket[256] = "";
    const char *key = "";
    if (t->s3 && (split_s3(url, bucket, sizeof bucket, &key) || !*key)) {
        snprintf(err, errlen, "%s: expected s3://BUCKET/KEY", t->name);
        return -EINVAL;
    }
    const int n = t->s3 ? snprintf(t->url, sizeof t->url, "%s/%s/", c->endpoint, bucket)
                        : snprintf(t->url, sizeof t->url, "%s", url);
    if (n >= (int)sizeof t->url || (t->s3 && append_encoded(t->url, sizeof t->url, key, 1))) {
        snprintf(err, errlen, "%s: the URL is too long", t->name);
        return -EINVAL;
    }
    return 0;
}

/* ---------------------------------------------------------------- requests */

/* One object's transfer: the body kept so far across the attempts of its requests. */
typedef struct {
    CURL *curl;
    int fresh;                   /* no byte of this attempt's body seen yet */
    int ok;                      /* this attempt's status is 200 or 206 */
    uint8_t *buf;                /* the body: the object (ranged) or one answer */
    size_t len, cap;             /* bytes of it */
    char error_body[ERROR_BODY_MAX]; /* a failed answer's body, for S3's error code */
    size_t error_len;
    long long total; /* the object's size from Content-Range, -1 until known */
} Transfer;

/* Keeps the first bytes of a failed answer's body in body[ERROR_BODY_MAX] (*len of them so
 * far, NUL-terminated), for S3's error code; the rest is read and dropped. */
static void keep_error_body(char *body, size_t *len, const char *p, size_t bytes)
{
    const size_t k = bytes < ERROR_BODY_MAX - 1 - *len ? bytes : ERROR_BODY_MAX - 1 - *len;
    memcpy(body + *len, p, k);
    *len += k;
    body[*len] = '\0';
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    Transfer *t = arg;
    const size_t bytes = size * n;
    if (t->fresh) {
        long status = 0;
        curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
        t->fresh = 0;
        t->ok = status == 200 || status == 206;
        /* A whole answer (the server ignored the range, or none was asked) starts over. */
        if (status == 200) t->len = 0;
    }
    if (!t->ok) {
        keep_error_body(t->error_body, &t->error_len, p, bytes);
        return bytes;
    }
    if (t->len + bytes + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : REMOTE_RANGE_BYTES;
        while (cap < t->len + bytes + 1) cap *= 2;
        uint8_t *b = realloc(t->buf, cap);
        if (!b) return 0; /* curl fails the transfer: CURLE_WRITE_ERROR */
        t->buf = b, t->cap = cap;
    }
    memcpy(t->buf + t->len, p, bytes);
    t->len += bytes;
    t->buf[t->len] = '\0'; /* a listing is read as a string */
    return bytes;
}

/* Content-Range: bytes A-B/TOTAL gives the object's size. */
static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    Transfer *t = arg;
    const size_t bytes = size * n;
    char line[256];
    if (bytes < sizeof line && !strncasecmp(p, "content-range:", 14)) {
        memcpy(line, p, bytes);
        line[bytes] = '\0';
        const char *slash = strchr(line, '/');
        if (slash && isdigit((unsigned char)slash[1])) t->total = strtoll(slash + 1, NULL, 10);
    }
    return bytes;
}

/* S3's error code in an error answer's XML body (<Code>NoSuchKey</Code>), or "". */
static void s3_code(const char *body, char *out, size_t outlen)
{
    const char *a = strstr(body, "<Code>"), *b = a ? strstr(a, "</Code>") : NULL;
    if (a && b && b - a - 6 < 100) snprintf(out, outlen, " (%.*s)", (int)(b - a - 6), a + 6);
    else *out = '\0';
}

/* Transport errors a later attempt will meet again. */
static int curl_permanent(CURLcode cc)
{
    return cc == CURLE_UNSUPPORTED_PROTOCOL || cc == CURLE_URL_MALFORMAT ||
           cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE ||
           cc == CURLE_OUT_OF_MEMORY || cc == CURLE_WRITE_ERROR;
}

/* The error of a failed answer (status, its body) about object name: -EACCES (403),
 * -ENOENT (404) or -EINVAL, with one line in err. */
static int answer_error(const char *name, int s3, const char *body, long status, char *err,
                        size_t errlen)
{
    char code[128];
    s3_code(body, code, sizeof code);
    if (status == 403) {
        snprintf(err, errlen,
                 "%s: HTTP 403 Forbidden%s: check the credentials (AWS_ACCESS_KEY_ID and "
                 "AWS_SECRET_ACCESS_KEY, or AWS_SHARED_CREDENTIALS_FILE), AWS_REGION and the "
                 "bucket's policy",
                 name, code);
        return -EACCES;
    }
    if (status == 404) {
        snprintf(err, errlen, "%s: HTTP 404 Not Found%s: check the bucket and the key%s", name,
                 code, s3 ? " (and the endpoint)" : "");
        return -ENOENT;
    }
    snprintf(err, errlen, "%s: HTTP %ld%s", name, status, code);
    return -EINVAL;
}

/* Seconds before retry attempt + 1: 0.5 s, 1 s, 2 s, ... at most 30 s. */
static double backoff_s(long attempt)
{
    const double wait = BACKOFF_FIRST_S * (double)(1L << (attempt < 16 ? attempt : 16));
    return wait < BACKOFF_MAX_S ? wait : BACKOFF_MAX_S;
}

/* Retryable: 5xx, 408 (timeout), 429 (slow down); any other answer is final. */
static int status_retryable(long status)
{
    return status >= 500 || status == 408 || status == 429;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

/* An easy handle for a GET of url (s3: signed as S3 wants, when there are credentials),
 * its body and header lines given to body and header with arg; NULL when libcurl cannot
 * make one. *hdrs gets the request's extra headers (the caller frees them after the
 * transfer). */
static CURL *handle_new(const Conf *c, const char *url, int s3, curl_write_callback body,
                        curl_write_callback header, void *arg, struct curl_slist **hdrs,
                        char *curl_err)
{
    pthread_once(&curl_once, curl_init);
    CURL *h = curl_easy_init();
    if (!h) return NULL;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, arg);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, arg);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, c->timeout_s);
    /* A stalled body fails after timeout_s without a byte, however long the object. */
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, c->timeout_s);
    if (!s3) {
        curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
    } else if (*c->key_id) {
        char sigv4[192];
        snprintf(sigv4, sizeof sigv4, "aws:amz:%s:s3", c->region);
        curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4);
        curl_easy_setopt(h, CURLOPT_USERNAME, c->key_id);
        curl_easy_setopt(h, CURLOPT_PASSWORD, c->secret);
        *hdrs = curl_slist_append(*hdrs, "x-amz-content-sha256: " EMPTY_SHA256);
        if (*c->token) {
            char line[sizeof c->token + 32];
            snprintf(line, sizeof line, "x-amz-security-token: %s", c->token);
            *hdrs = curl_slist_append(*hdrs, line);
        }
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hdrs);
    }
    return h;
}

/* GETs tg into t->buf: in ranges from t->len on (ranged), or as one answer. Each
 * request is retried c->retries times on a 5xx, 408, 429 or a transport error, after
 * 0.5 s, 1 s, 2 s, ... (at most 30 s); the count starts again when an attempt gets the
 * object further. */
static int transfer(const Conf *c, const Target *tg, Transfer *t, int ranged, char *err,
                    size_t errlen)
{
    char curl_err[CURL_ERROR_SIZE];
    struct curl_slist *hdrs = NULL;
    int rc = 0;
    t->total = -1;
    t->curl = handle_new(c, tg->url, tg->s3, on_body, on_header, t, &hdrs, curl_err);
    if (!t->curl) {
        snprintf(err, errlen, "%s: cannot start libcurl", tg->name);
        return -ENOMEM;
    }
    size_t best = 0;
    const double t0 = util_now();
    for (long attempt = 0;;) {
        char range[64], why[CURL_ERROR_SIZE + 64];
        if (ranged) {
            snprintf(range, sizeof range, "%zu-%zu", t->len, t->len + REMOTE_RANGE_BYTES - 1);
            curl_easy_setopt(t->curl, CURLOPT_RANGE, range);
        } else {
            t->len = 0;
        }
        t->fresh = 1, t->ok = 0, t->error_len = 0, t->error_body[0] = '\0';
        curl_err[0] = '\0';
        CURLcode cc = curl_easy_perform(t->curl);
        count_request(t->curl);
        long status = 0;
        curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
        if (cc == CURLE_OK && (status == 200 || status == 206)) {
            if (status == 200 || !ranged || (t->total >= 0 && t->len >= (size_t)t->total)) break;
            if (t->total < 0) {
                snprintf(err, errlen, "%s: a ranged answer without Content-Range", tg->name);
                rc = -EINVAL;
                break;
            }
            attempt = 0, best = t->len;
            continue;
        }
        if (cc == CURLE_OK && status == 416 && ranged && t->len == 0) break; /* empty */
        if (cc == CURLE_OK && !status_retryable(status)) {
            rc = answer_error(tg->name, tg->s3, t->error_body, status, err, errlen);
            break;
        }
        if (cc != CURLE_OK)
            snprintf(why, sizeof why, "%s", *curl_err ? curl_err : curl_easy_strerror(cc));
        else snprintf(why, sizeof why, "HTTP %ld", status);
        if (cc != CURLE_OK && curl_permanent(cc)) {
            snprintf(err, errlen, "%s: %s", tg->name, why);
            rc = -EINVAL;
            break;
        }
        if (t->len > best) attempt = 0, best = t->len;
        if (attempt >= c->retries) {
            snprintf(err, errlen,
                     "%s: %s, after %ld retries (KUBETRAIN_REMOTE_RETRIES); retryable, exiting 75",
                     tg->name, why, c->retries);
            rc = -EAGAIN;
            break;
        }
        const double wait = backoff_s(attempt);
        attempt++;
        util_log("%s: %s at byte %zu; retry %ld of %ld in %.1fs", tg->name, why, t->len, attempt,
                 c->retries, wait);
        sleep_s(wait);
    }
    count_wait(t0);
    curl_easy_cleanup(t->curl);
    curl_slist_free_all(hdrs);
    t->curl = NULL;
    return rc;
}

int remote_read(const char *url, uint8_t **buf, size_t *len, char *err, size_t errlen)
{
    Conf c;
    Target tg;
    Transfer t = {0};
    int rc;
    *buf = NULL, *len = 0;
    if ((rc = conf_load(&c, err, errlen)) || (rc = target_of(&c, url, &tg, err, errlen)) ||
        (rc = transfer(&c, &tg, &t, 1, err, errlen))) {
        free(t.buf);
        return rc;
    }
    *buf = t.buf, *len = t.len;
    return 0;
}

/* ---------------------------------------------------------------- ranged reads */

/* Transfers of ranges at once: enough to hide a store's latency behind a batch's records,
 * few enough that a store does not throttle the job for them. */
#define PARALLEL 8

struct RemoteObject {
    char *url;      /* the URL requested */
    char *name;     /* remote_redact's, for messages */
    int s3;
    int known;      /* size and etag are the first answer's */
    int ranged;     /* the last answer to a ranged request was a 206 */
    uint64_t size;
    char etag[256]; /* "" when the server sends none */
};

/* One range's transfer, over its attempts. */
typedef struct {
    RemoteRange *r;
    CURL *h;
    struct curl_slist *hdrs;
    char curl_err[CURL_ERROR_SIZE];
    int fresh;       /* no byte of this attempt's body seen yet */
    int ok;          /* this attempt's status is 200 or 206 */
    int past;        /* the answer went on past the range: cut short on purpose */
    int finished;
    long status;
    uint64_t pos;    /* the object's byte that the answer's next body byte is */
    long long total; /* the object's size from this answer's headers, -1 when none */
    char etag[256];
    char error_body[ERROR_BODY_MAX];
    size_t error_len;
    long attempt;
    size_t best;     /* r->got when the attempts were last counted from 0 */
    double not_before;
} Fetch;

/* The body of a range's answer: the bytes [off + got, off + len) of the object kept in the
 * range's buffer. A 200 (a server that ignores Range) starts at the object's byte 0; the
 * bytes before the range are skipped, and the answer is cut once the range is full. */
static size_t on_range_body(char *p, size_t size, size_t n, void *arg)
{
    Fetch *f = arg;
    RemoteRange *r = f->r;
    const size_t bytes = size * n;
    if (f->fresh) {
        curl_easy_getinfo(f->h, CURLINFO_RESPONSE_CODE, &f->status);
        f->fresh = 0;
        f->ok = f->status == 200 || f->status == 206;
        f->pos = f->status == 206 ? r->off + r->got : 0;
    }
    if (!f->ok) {
        keep_error_body(f->error_body, &f->error_len, p, bytes);
        return bytes;
    }
    const uint64_t want = r->off + r->got, end = r->off + r->len;
    if (f->pos + bytes > want && want < end) {
        const uint64_t upto = f->pos + bytes < end ? f->pos + bytes : end;
        memcpy(r->buf + r->got, p + (want - f->pos), (size_t)(upto - want));
        r->got += (size_t)(upto - want);
    }
    f->pos += bytes;
    if (f->pos > end) {
        f->past = 1;
        return 0; /* libcurl ends the transfer: CURLE_WRITE_ERROR, which past excuses */
    }
    return bytes;
}

/* The object's size (Content-Range's total, else a 200's Content-Length) and ETag of a
 * range's answer; a status line starts a new answer (a redirect's). */
static size_t on_range_header(char *p, size_t size, size_t n, void *arg)
{
    Fetch *f = arg;
    const size_t bytes = size * n;
    char line[512];
    if (bytes >= sizeof line) return bytes;
    memcpy(line, p, bytes);
    line[bytes] = '\0';
    char *v = strchr(line, ':');
    if (!strncmp(line, "HTTP/", 5)) {
        f->total = -1, f->etag[0] = '\0';
        f->status = strtol(line + strcspn(line, " "), NULL, 10);
    } else if (v) {
        *v++ = '\0';
        v = trim(v);
        const char *slash = strchr(v, '/');
        if (!strcasecmp(line, "content-range") && slash && isdigit((unsigned char)slash[1]))
            f->total = strtoll(slash + 1, NULL, 10);
        else if (!strcasecmp(line, "content-length") && f->status == 200 &&
                 isdigit((unsigned char)*v))
            f->total = strtoll(v, NULL, 10);
        else if (!strcasecmp(line, "etag")) snprintf(f->etag, sizeof f->etag, "%s", v);
    }
    return bytes;
}

/* Checks an answer's object size and ETag against the first answer's (learnt from it):
 * 0, or -ESTALE with one line in err when the object is another since. */
static int check_stamp(const Fetch *f, char *err, size_t errlen)
{
    RemoteObject *o = f->r->obj;
    if (f->total < 0) return 0;
    if (!o->known) {
        o->known = 1;
        o->size = (uint64_t)f->total;
        snprintf(o->etag, sizeof o->etag, "%s", f->etag);
        return 0;
    }
    char why[700];
    if (*o->etag && *f->etag && strcmp(o->etag, f->etag))
        snprintf(why, sizeof why, "its ETag is now %.250s, it was %.250s", f->etag, o->etag);
    else if ((uint64_t)f->total != o->size)
        snprintf(why, sizeof why, "it is now %lld bytes, it was %llu", f->total,
                 (unsigned long long)o->size);
    else return 0;
    snprintf(err, errlen,
             "%s: the object changed since the trainer opened it (%s): a job's data must not "
             "change while it runs",
             o->name, why);
    return -ESTALE;
}

/* Starts f's next attempt on multi: a GET of the range's bytes not read yet. */
static int fetch_start(const Conf *c, CURLM *multi, Fetch *f, char *err, size_t errlen)
{
    const RemoteRange *r = f->r;
    char range[64];
    f->h = handle_new(c, r->obj->url, r->obj->s3, on_range_body, on_range_header, f, &f->hdrs,
                      f->curl_err);
    if (!f->h) {
        snprintf(err, errlen, "%s: cannot start libcurl", r->obj->name);
        return -ENOMEM;
    }
    snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)(r->off + r->got),
             (unsigned long long)(r->off + r->len - 1));
    curl_easy_setopt(f->h, CURLOPT_RANGE, range);
    curl_easy_setopt(f->h, CURLOPT_PRIVATE, f);
    f->fresh = 1, f->ok = f->past = 0, f->status = 0, f->total = -1;
    f->etag[0] = f->error_body[0] = f->curl_err[0] = '\0';
    f->error_len = 0;
    if (curl_multi_add_handle(multi, f->h) != CURLM_OK) {
        snprintf(err, errlen, "%s: cannot start libcurl", r->obj->name);
        return -ENOMEM;
    }
    return 0;
}

/* Judges f's attempt that ended with cc: the range read (f->finished), a retry scheduled
 * (f->not_before), or a final error (returned, one line in err). */
static int fetch_end(const Conf *c, Fetch *f, CURLcode cc, char *err, size_t errlen)
{
    RemoteRange *r = f->r;
    RemoteObject *o = r->obj;
    char why[CURL_ERROR_SIZE + 64];
    int rc;
    if (cc == CURLE_WRITE_ERROR && f->past) cc = CURLE_OK;
    if (!f->status) curl_easy_getinfo(f->h, CURLINFO_RESPONSE_CODE, &f->status);
    const int ok = f->status == 200 || f->status == 206;
    const int answered = cc == CURLE_OK && (ok || f->status == 416);
    /* A whole answer without Content-Length ends at the object's end. */
    if (answered && f->status == 200 && f->total < 0 && !f->past) f->total = (long long)f->pos;
    if (answered && (rc = check_stamp(f, err, errlen))) return rc;
    if (answered && f->status != 416) o->ranged = f->status == 206;
    /* At the object's end (a 416: the range starts there) a range holds what is left. */
    if (answered && (r->got == r->len || (o->known && r->off + r->got >= o->size))) {
        f->finished = 1;
        return 0;
    }
    if (cc == CURLE_OK && !ok && !status_retryable(f->status))
        return answer_error(o->name, o->s3, f->error_body, f->status, err, errlen);
    if (cc != CURLE_OK)
        snprintf(why, sizeof why, "%s", *f->curl_err ? f->curl_err : curl_easy_strerror(cc));
    else if (ok) snprintf(why, sizeof why, "the answer ended early");
    else snprintf(why, sizeof why, "HTTP %ld", f->status);
    if (cc != CURLE_OK && curl_permanent(cc)) {
        snprintf(err, errlen, "%s: %s", o->name, why);
        return -EINVAL;
    }
    if (r->got > f->best) f->attempt = 0, f->best = r->got;
    if (f->attempt >= c->retries) {
        snprintf(err, errlen,
                 "%s: %s, after %ld retries (KUBETRAIN_REMOTE_RETRIES); retryable, exiting 75",
                 o->name, why, c->retries);
        return -EAGAIN;
    }
    const double wait = backoff_s(f->attempt);
    f->attempt++;
    util_log("%s: %s at byte %llu; retry %ld of %ld in %.1fs", o->name, why,
             (unsigned long long)(r->off + r->got), f->attempt, c->retries, wait);
    f->not_before = util_now() + wait;
    return 0;
}

static void fetch_stop(CURLM *multi, Fetch *f)
{
    if (!f->h) return;
    curl_multi_remove_handle(multi, f->h);
    curl_easy_cleanup(f->h);
    curl_slist_free_all(f->hdrs);
    f->h = NULL, f->hdrs = NULL;
}

/* One multi handle for every read, kept so that its connections are reused from one
 * batch's reads to the next (a TLS handshake each would cost more than the records);
 * multi_mu makes its users take turns. */
static pthread_mutex_t multi_mu = PTHREAD_MUTEX_INITIALIZER;
static CURLM *shared_multi;

int remote_read_ranges(RemoteRange *r, size_t n, char *err, size_t errlen)
{
    Conf c;
    int rc;
    if (n == 0) return 0;
    if ((rc = conf_load(&c, err, errlen))) return rc;
    Fetch *f = xcalloc(n, sizeof *f);
    for (size_t i = 0; i < n; i++) f[i].r = &r[i], r[i].got = 0;
    const double t0 = util_now();
    pthread_once(&curl_once, curl_init);
    pthread_mutex_lock(&multi_mu);
    CURLM *multi = shared_multi ? shared_multi : (shared_multi = curl_multi_init());
    if (!multi) {
        snprintf(err, errlen, "%s: cannot start libcurl", r[0].obj->name);
        rc = -ENOMEM;
    }
    size_t left = n, running = 0;
    while (!rc && left) {
        const double now = util_now();
        double next = now + 3600;
        for (size_t i = 0; i < n && !rc && running < PARALLEL; i++) {
            if (f[i].finished || f[i].h) continue;
            if (f[i].not_before > now) {
                next = f[i].not_before < next ? f[i].not_before : next;
                continue;
            }
            if (!(rc = fetch_start(&c, multi, &f[i], err, errlen))) running++;
        }
        if (rc) break;
        if (!running) {
            sleep_s(next - now);
            continue;
        }
        int still, queued;
        curl_multi_perform(multi, &still);
        CURLMsg *m;
        while (!rc && (m = curl_multi_info_read(multi, &queued))) {
            if (m->msg != CURLMSG_DONE) continue;
            char *priv;
            const CURLcode cc = m->data.result;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
            Fetch *done = (Fetch *)(void *)priv;
            count_request(done->h);
            rc = fetch_end(&c, done, cc, err, errlen);
            fetch_stop(multi, done);
            running--;
            left -= done->finished;
        }
        if (!rc && running) curl_multi_poll(multi, NULL, 0, 100, NULL);
    }
    for (size_t i = 0; i < n; i++) fetch_stop(multi, &f[i]);
    pthread_mutex_unlock(&multi_mu);
    count_wait(t0);
    free(f);
    return rc;
}

int remote_object_open(const char *url, RemoteObject **out, uint8_t **head, size_t *headlen,
                       char *err, size_t errlen)
{
    Conf c;
    Target tg;
    int rc;
    *out = NULL, *head = NULL, *headlen = 0;
    if ((rc = conf_load(&c, err, errlen)) || (rc = target_of(&c, url, &tg, err, errlen))) return rc;
    RemoteObject *o = xcalloc(1, sizeof *o);
    o->url = xstrdup(tg.url), o->name = xstrdup(tg.name), o->s3 = tg.s3;
    RemoteRange r = {
        .obj = o, .off = 0, .len = REMOTE_RANGE_BYTES, .buf = xmalloc(REMOTE_RANGE_BYTES)};
    if ((rc = remote_read_ranges(&r, 1, err, errlen))) {
        free(r.buf);
        remote_object_close(o);
        return rc;
    }
    *out = o, *head = r.buf, *headlen = r.got;
    return 0;
}

uint64_t remote_object_size(const RemoteObject *o)
{
    return o->size;
}

int remote_object_ranged(const RemoteObject *o)
{
    return o->ranged;
}

void remote_object_close(RemoteObject *o)
{
    if (!o) return;
    free(o->url);
    free(o->name);
    free(o);
}

/* ---------------------------------------------------------------- listing */

/* The text of the first <tag>...</tag> at or after *p, XML entities decoded, into out;
 * *p moves past it. Returns 1, or 0 when there is none. */
static int xml_next(const char **p, const char *tag, char *out, size_t outlen)
{
    char open[64], close[64];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    const char *a = strstr(*p, open), *b = a ? strstr(a, close) : NULL;
    if (!b) return 0;
    static const char *const ents[][2] = {
        {"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&apos;", "'"}};
    size_t n = 0;
    for (const char *s = a + strlen(open); s < b && n + 1 < outlen;) {
        size_t i = 0;
        while (i < 5 && strncmp(s, ents[i][0], strlen(ents[i][0]))) i++;
        out[n++] = i < 5 ? ents[i][1][0] : *s;
        s += i < 5 ? strlen(ents[i][0]) : 1;
    }
    out[n] = '\0';
    *p = b + strlen(close);
    return 1;
}

static int by_string(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void remote_free_urls(char **urls, size_t n)
{
    for (size_t i = 0; urls && i < n; i++) free(urls[i]);
    free(urls);
}

static void push(char ***v, size_t *n, size_t *cap, const char *s)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        char **w = realloc(*v, *cap * sizeof *w);
        if (!w) {
            util_log("remote: out of memory listing objects");
            exit(KT_EXIT_DATA);
        }
        *v = w;
    }
    (*v)[(*n)++] = xstrdup(s);
}

/* The keys of bucket under prefix that match glob, as s3:// URLs, page after page. */
static int list_s3(const Conf *c, const char *pattern, const char *bucket, const char *glob,
                   char ***urls, size_t *n, char *err, size_t errlen)
{
    char prefix[4096], token[4096] = "", key[4096], full[8192], url[8192];
    snprintf(prefix, sizeof prefix, "%.*s", (int)strcspn(glob, "*?[\\"), glob);
    size_t cap = 0;
    int rc = 0, more = 1;
    while (!rc && more) {
        Transfer t = {0};
        Target tg = {.s3 = 1};
        remote_redact(pattern, tg.name, sizeof tg.name);
        /* Query parameters in name order: SigV4 signs them sorted. */
        snprintf(url, sizeof url, "%s/%s?", c->endpoint, bucket);
        if (*token) {
            strncat(url, "continuation-token=", sizeof url - strlen(url) - 1);
            rc = append_encoded(url, sizeof url, token, 0);
            strncat(url, "&", sizeof url - strlen(url) - 1);
        }
        strncat(url, "list-type=2&prefix=", sizeof url - strlen(url) - 1);
        if (rc || append_encoded(url, sizeof url, prefix, 0) ||
            snprintf(tg.url, sizeof tg.url, "%s", url) >= (int)sizeof tg.url) {
            snprintf(err, errlen, "%s: the listing's URL is too long", tg.name);
            return -EINVAL;
        }
        if ((rc = transfer(c, &tg, &t, 0, err, errlen))) {
            free(t.buf);
            break;
        }
        const char *p = t.buf ? (const char *)t.buf : "";
        char flag[16] = "";
        const char *q = p;
        more = xml_next(&q, "IsTruncated", flag, sizeof flag) && !strcmp(flag, "true");
        q = p;
        if (more && !xml_next(&q, "NextContinuationToken", token, sizeof token)) {
            snprintf(err, errlen, "%s: a truncated listing without NextContinuationToken", tg.name);
            rc = -EINVAL;
        }
        for (q = p; !rc && xml_next(&q, "Key", key, sizeof key);) {
            if (fnmatch(glob, key, FNM_PATHNAME)) continue;
            snprintf(full, sizeof full, "s3://%s/%s", bucket, key);
            push(urls, n, &cap, full);
        }
        free(t.buf);
    }
    return rc;
}

int remote_list(const char *pattern, char ***urls, size_t *n, char *err, size_t errlen)
{
    Conf c;
    char bucket[256], shown[4096];
    const char *glob;
    int rc;
    size_t cap = 0;
    *urls = NULL, *n = 0;
    if (!has_prefix(pattern, "s3://") || !pattern[5 + strcspn(pattern + 5, "*?[")]) {
        push(urls, n, &cap, pattern);
        return 0;
    }
    if (split_s3(pattern, bucket, sizeof bucket, &glob) ||
        strcspn(bucket, "*?[") < strlen(bucket)) {
        remote_redact(pattern, shown, sizeof shown);
        snprintf(err, errlen, "%s: expected s3://BUCKET/KEY-PATTERN (globs in the key only)",
                 shown);
        return -EINVAL;
    }
    if ((rc = conf_load(&c, err, errlen)) ||
        (rc = list_s3(&c, pattern, bucket, glob, urls, n, err, errlen))) {
        remote_free_urls(*urls, *n);
        *urls = NULL, *n = 0;
        return rc;
    }
    if (*n == 0) {
        remote_redact(pattern, shown, sizeof shown);
        snprintf(err, errlen,
                 "%s: matches no object (check the bucket, the prefix and the "
                 "endpoint)",
                 shown);
        return -ENOENT;
    }
    qsort(*urls, *n, sizeof **urls, by_string);
    return 0;
}
