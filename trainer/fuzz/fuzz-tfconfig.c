/* libFuzzer target: TF_CONFIG (tfconfig_parse) and one address (tfconfig_parse_address).
 * The input is the variable's text; its first byte picks the --index override. On
 * success the result must describe a sane cluster; on failure err must say why. */
#include "tfconfig.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int index_override = (int)(data[0] % 4) - 1; /* -1 (none), 0, 1, 2 */
    char *text = malloc(size);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';

    TfConfig c;
    char err[256] = "";
    if (tfconfig_parse(text, index_override, &c, err, sizeof err) == 0) {
        if (c.world < 1 || c.rank < 0 || c.rank >= c.world || !c.peers) abort();
        for (int i = 0; i < c.world; i++) {
            if (c.peers[i].port < 0 || c.peers[i].port > 65535) abort();
            if (c.peers[i].port == 0 && c.world != 1) abort();
            if (!memchr(c.peers[i].host, 0, sizeof c.peers[i].host)) abort();
        }
        tfconfig_free(&c);
    } else if (!err[0]) {
        abort();
    }

    char host[TFCONFIG_HOST_MAX];
    int port;
    err[0] = '\0';
    if (tfconfig_parse_address(text, host, sizeof host, &port, err, sizeof err) == 0) {
        if (port < 1 || port > 65535 || !memchr(host, 0, sizeof host)) abort();
    } else if (!err[0]) {
        abort();
    }
    free(text);
    return 0;
}
