/* remote — objects in S3 (or an S3-compatible store) and on HTTP(S) servers, read through
 * libcurl for the TFRecord source (docs/design.md, "Object storage"): whole into memory,
 * or in ranges, several at once, from an object opened for that.
 *
 *     s3://BUCKET/KEY      GET ENDPOINT/BUCKET/KEY (path-style), signed with libcurl's
 *                          AWS SigV4 when there are credentials, anonymous otherwise
 *     http(s)://...        GET of the URL as given
 *
 * The environment configures it, read at each call:
 *     KUBETRAIN_S3_ENDPOINT, else AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL
 *                          the S3 endpoint (default https://s3.REGION.amazonaws.com)
 *     AWS_REGION, else AWS_DEFAULT_REGION   the signing region (default us-east-1)
 *     AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN   the credentials, else
 *     AWS_SHARED_CREDENTIALS_FILE (default ~/.aws/credentials), profile AWS_PROFILE
 *                          (default "default"): aws_access_key_id, aws_secret_access_key,
 *                          aws_session_token
 *     KUBETRAIN_REMOTE_RETRIES   retries of a request (default 5), after 0.5 s, 1 s, ...
 *     KUBETRAIN_REMOTE_TIMEOUT   seconds without a byte before a request fails (default 30)
 * Credentials never appear in a message, nor does what else a URL may carry: every message
 * names an object as remote_redact shows it. Objects are read in ranges; a 5xx, a 429, a
 * timeout or a broken connection is retried (the bytes already read are kept). */
#ifndef KT_REMOTE_H
#define KT_REMOTE_H

#include <stddef.h>
#include <stdint.h>

/* 1 when path is an s3://, http:// or https:// URL, else 0. */
int remote_is_url(const char *path);

/* Copies text into out (outlen bytes, truncated to fit) with each URL in it
 * (s3://, http://, https://, up to the next ',' or the text's end) shown without what
 * may be a secret: userinfo (user:pass@) becomes "[redacted]@", and an http(s) URL's
 * query and fragment (a presigned URL's X-Amz-Signature and X-Amz-Credential) become
 * "?[redacted]". The scheme, host, bucket and key stay, to say which object. An s3://
 * key keeps its '?': there it is a glob character, not a query. */
void remote_redact(const char *text, char *out, size_t outlen);

/* The objects of pattern, a URL: for s3://BUCKET/GLOB the keys that match GLOB (fnmatch,
 * '*' not crossing '/'), listed under GLOB's literal prefix with ListObjectsV2 and
 * sorted by key (bytes); a key without glob characters and an http(s) URL are
 * themselves, unlisted. *urls gets *n malloc'd URLs in a malloc'd array (free with
 * remote_free_urls). Returns 0, or as remote_read, and -ENOENT when nothing matches. */
int remote_list(const char *pattern, char ***urls, size_t *n, char *err, size_t errlen);

void remote_free_urls(char **urls, size_t n);

/* The whole object at url into *buf (malloc'd, the caller frees it; NULL when empty) and
 * *len. Returns 0, or with one line in err naming the object:
 *     -EACCES   403: the credentials, or the bucket's policy
 *     -ENOENT   404: no such bucket or key
 *     -EAGAIN   the retries ran out (5xx, timeouts, broken connections): retryable
 *     -EINVAL   a malformed URL or configuration, or another answer */
int remote_read(const char *url, uint8_t **buf, size_t *len, char *err, size_t errlen);

/* Bytes a ranged GET of a whole object asks for at a time: large enough that a request's
 * latency is small against its transfer, small enough that a retry after a reset
 * re-reads little. */
#define REMOTE_RANGE_BYTES ((size_t)8 << 20)

/* An object opened for ranged reads: its URL, and its size and ETag as its first answer
 * gave them, against which every later answer is checked. */
typedef struct RemoteObject RemoteObject;

/* Opens the object at url and reads its first REMOTE_RANGE_BYTES (or all of it when it is
 * shorter) into *head (malloc'd, the caller frees it) and *headlen. Returns 0, or as
 * remote_read_ranges. Close *out with remote_object_close. */
int remote_object_open(const char *url, RemoteObject **out, uint8_t **head, size_t *headlen,
                       char *err, size_t errlen);

/* The object's size, as its first answer gave it. */
uint64_t remote_object_size(const RemoteObject *o);

/* 1 when the server answered the last ranged request with a range (206), 0 when it sent
 * the whole object (200): it ignores Range, and a read of a range costs the object up to
 * the range's end. */
int remote_object_ranged(const RemoteObject *o);

/* NULL is a no-op. */
void remote_object_close(RemoteObject *o);

/* Bytes [off, off + len) of obj into buf (the caller's, len bytes); got: how many were
 * read, fewer than len only at the object's end. */
typedef struct {
    RemoteObject *obj;
    uint64_t off;
    size_t len;
    uint8_t *buf;
    size_t got;
} RemoteRange;

/* Reads the n ranges r (of any objects), up to 8 requests at once, each retried as
 * remote_read retries (from the byte reached). Returns 0, or with one line in err naming
 * the object, as remote_read, and
 *     -ESTALE   an answer's size or ETag is not the object's first answer's: the object
 *               changed since it was opened
 * Thread-safe: concurrent callers take turns. */
int remote_read_ranges(RemoteRange *r, size_t n, char *err, size_t errlen);

/* What this process has asked of object storage and HTTP(S) servers so far: requests
 * made (retries included), body bytes received (what a server that ignores Range sends
 * beyond a range included), and the seconds the callers of remote_list, remote_read,
 * remote_object_open and remote_read_ranges waited for them (the requests of one call,
 * made at once, count once). For the trainer's own account of where a job's time goes. */
typedef struct {
    uint64_t requests, bytes;
    double seconds;
} RemoteStats;

void remote_stats(RemoteStats *out);

#endif
