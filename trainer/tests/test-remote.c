/* remote_redact: what a message shows of an object's URL (docs/design.md, "Object
 * storage"): no userinfo, no http(s) query or fragment; scheme, host, bucket and key
 * kept; an s3:// key's '?' (a glob) kept; text around the URLs unchanged. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "remote.h"

static void check(const char *in, const char *want)
{
    char out[512];
    remote_redact(in, out, sizeof out);
    assert_string_equal(out, want);
}

static void test_redact(void **state)
{
    (void)state;
    check("https://b.s3.amazonaws.com/train-00000?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=ab",
          "https://b.s3.amazonaws.com/train-00000?[redacted]");
    check("http://user:pa@ss@127.0.0.1:9000/files/a#frag",
          "http://[redacted]@127.0.0.1:9000/files/a?[redacted]");
    check("https://host?sig=1", "https://host?[redacted]");
    check("s3://bucket/train-0000?-of-*", "s3://bucket/train-0000?-of-*");
    check("s3://key:secret@bucket/k", "s3://[redacted]@bucket/k");
    check("/data/train-*?", "/data/train-*?");
    check("tfrecord:/data/a,https://h/x?s=1,https://u:p@h/y,s3://b/k?",
          "tfrecord:/data/a,https://h/x?[redacted],https://[redacted]@h/y,s3://b/k?");
    check("ftp://u:p@h/x?y", "ftp://u:p@h/x?y");
    check("no url: here", "no url: here");
    /* cut to fit, still a string */
    char small[12];
    remote_redact("https://host/key?sig=secret", small, sizeof small);
    assert_string_equal(small, "https://hos");
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_redact)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
