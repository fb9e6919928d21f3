/* libFuzzer target: the rendezvous handshake frame a stranger sends before it is
 * authenticated (net_hello_decode), as a HELLO and as a CHALLENGE. What decodes must
 * encode back to the same bytes. */
#include "net.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly `size` bytes, so that ASan sees any read past the frame. */
    unsigned char *frame = malloc(size ? size : 1);
    memcpy(frame, data, size);
    for (int type = NET_MSG_HELLO; type <= NET_MSG_CHALLENGE; type++) {
        NetHello h;
        size_t used = 0;
        const char *why = NULL;
        if (net_hello_decode(frame, size, type, &h, &used, &why) == 0) {
            if (used > size || used < 5) abort();
            unsigned char again[64 + 2 * NET_HELLO_STR_MAX];
            size_t n = net_hello_encode(again, type, &h);
            if (n != used || memcmp(again, frame, n) != 0) abort();
        } else if (!why) {
            abort();
        }
    }
    free(frame);
    return 0;
}
