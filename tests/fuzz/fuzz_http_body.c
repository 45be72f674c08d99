/* fuzz_http_body.c: libFuzzer harness for the HTTP frontend's request
 * body parser (plugins/frontend/http/parse.c, with the shared sampling
 * fields of plugins/shared/request_fields.c): JSON bytes as a completion
 * body and as a chat body, through every field check, as generate.c calls
 * them. A fake host gives the request defaults.
 * Not for: the framing of the request around the body (fuzz_http_frame). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"

static void defaults(const pagoda_host *h, pagoda_request *r)
{
    memset(r, 0, sizeof *r);
    r->struct_size = sizeof *r;
    r->max_tokens = 16;
    r->temperature = 1.0f;
    r->top_p = 1.0f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static pagoda_host host;
    host.struct_size = sizeof host;
    host.request_defaults = defaults;
    json_error_t je;
    json_t *root = json_loadb((const char *)data, size, 0, &je);
    if (!root) return 0;
    if (json_is_object(root)) {
        for (int kind = KIND_COMPLETION; kind <= KIND_CHAT; kind++) {
            params p;
            perr pe;
            memset(&p, 0, sizeof p);
            memset(&pe, 0, sizeof pe);
            if (parse_common(&host, root, kind, &p, &pe) < 0) continue;
            if (kind == KIND_COMPLETION) {
                prompt_in *ps = NULL;
                int n = 0;
                (void)parse_prompts(root, &ps, &n, &pe);
                free_prompts(ps, n);
            } else {
                pagoda_chat_message *msgs = NULL;
                char **owned = NULL;
                int n = 0;
                (void)parse_messages(root, &msgs, &owned, &n, &pe);
                for (int i = 0; owned && i < n; i++) free(owned[i]);
                free(owned);
                free(msgs);
            }
        }
    }
    json_decref(root);
    return 0;
}
