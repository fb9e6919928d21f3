/* libFuzzer target: kubeconfig YAML (kcfg_parse). Relative file names resolve against
 * a directory that does not exist; nothing is read or executed while parsing. */
#include "kcfg.h"
#include "olog.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    olog_set_level(OLOG_ERROR);
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    KubeConfig *c = NULL;
    char err[512] = "";
    if (kcfg_parse(text, size, "/nonexistent/fuzz", "fuzz", &c, err, sizeof err) == 0) {
        if (!c || !c->server) abort();
        if (c->exec_command && (!c->exec_args || !c->exec_env)) abort();
        kcfg_free(c);
    } else if (c || !err[0]) {
        abort();
    }
    free(text);
    return 0;
}
