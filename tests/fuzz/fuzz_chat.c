/* fuzz_chat.c: libFuzzer harness for the chat-template code: family
 * detection and the default-system-prompt reader on a template string,
 * and the renderer on a conversation. Input: byte 0 picks the family,
 * byte 1 the generation prompt; the rest is messages separated by 0x1E,
 * each "role 0x1F content" (a message without 0x1F has a NULL content).
 * The whole input, NUL-terminated, is also read as a Jinja template.
 * Not for: tokenizing the rendered text (fuzz_tokenizer). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = 0;
    char sys[512];
    (void)pagoda_chat_detect(s + 2);
    (void)pagoda_chat_default_system(s + 2, sys, sizeof sys);
    pagoda_chat_family fam;
    char msg[256];
    (void)pagoda_chat_select(NULL, s + 2, &fam, msg, sizeof msg);

    pagoda_chat_message m[64];
    int n = 0;
    char *p = s + 2, *end = s + size;
    while (p <= end && n < 64) {
        char *rs = memchr(p, 0x1E, (size_t)(end - p));
        char *stop = rs ? rs : end;
        *stop = 0;
        char *us = memchr(p, 0x1F, (size_t)(stop - p));
        if (us) *us = 0;
        m[n].role = p;
        m[n].content = us ? us + 1 : NULL;
        n++;
        if (!rs) break;
        p = rs + 1;
    }
    pagoda_chat_family f = (pagoda_chat_family)(data[0] % (PAGODA_CHAT_UNKNOWN + 1));
    char *out = NULL, err[256];
    if (pagoda_chat_render(f, m, n, data[1] & 1, "<s>", "</s>", &out, err, sizeof err) == 0) {
        if (!out) abort();
        free(out);
    }
    (void)pagoda_chat_stop_strings(f);
    free(s);
    return 0;
}
