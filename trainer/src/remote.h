/* remote — objects in S3 (or an S3-compatible store) and on HTTP(S) servers, read whole
 * into memory through libcurl for the TFRecord source (docs/design.md, "Object storage").
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

#endif
