/* fuzz_http_frame.c: libFuzzer harness for the HTTP framing check the
 * gate runs before libmicrohttpd sees a request (frame.c): request line,
 * headers, Content-Length, Transfer-Encoding and chunked bodies, as bytes
 * arrive. Beyond "no crash", what it says must hold: a ready request's
 * head fits in the bytes given, a complete body too, and an error carries
 * a status and a message.
 * Not for: the JSON body (fuzz_http_body). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *copy = malloc(size ? size : 1); /* exact size: a read past the end is caught */
    if (!copy) return 0;
    memcpy(copy, data, size);
    /* as it arrives: every prefix a peek could see, then the whole */
    size_t steps[] = {size / 3, size / 2, size};
    for (int i = 0; i < 3; i++) {
        http_frame f;
        int st = http_frame_check(copy, steps[i], 16384, 1 << 20, &f);
        if (st == FRAME_READY) {
            if (f.head_len == 0 || f.head_len > steps[i]) abort();
            if (f.body_complete && f.content_length >= 0 &&
                (uint64_t)f.head_len + (uint64_t)f.content_length > steps[i])
                abort();
            if (f.chunked && f.content_length >= 0) abort();
        } else if (st == FRAME_ERROR) {
            if (f.status < 400 || f.status > 599 || !f.msg[0]) abort();
        } else if (st != FRAME_MORE) {
            abort();
        }
    }
    free(copy);
    return 0;
}
