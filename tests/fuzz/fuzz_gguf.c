/* fuzz_gguf.c: libFuzzer harness for the GGUF reader and what reads a
 * model's header after it: the typed getters on every key, the
 * hyperparameters, the memory plan, the tokenizer built from the file's
 * vocabulary, and the chat-template checks on its template. Every input
 * is opened from an exact-size heap copy so ASan sees a read past the end.
 * Not for: weights (they are never read before the header checks). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "gguf.h"
#include "memplan.h"
#include "model.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    void *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    char err[1024];
    gguf_file *f = pagoda_gguf_open_mem(copy, size, "fuzz.gguf", err, sizeof err);
    if (f) {
        /* every key through the getter of its name, every array element */
        for (uint64_t i = 0; i < f->n_kv; i++) {
            const gguf_kv *kv = &f->kv[i];
            char key[256];
            size_t kl = kv->key.len < sizeof key - 1 ? kv->key.len : sizeof key - 1;
            memcpy(key, kv->key.ptr, kl);
            key[kl] = 0;
            int64_t iv;
            double dv;
            bool bv;
            (void)pagoda_gguf_get_int(f, key, &iv);
            (void)pagoda_gguf_get_float(f, key, &dv);
            (void)pagoda_gguf_get_bool(f, key, &bv);
            free(pagoda_gguf_get_str(f, key));
            if (kv->val.type == GGUF_T_ARRAY && kv->val.v.arr.elem_type != GGUF_T_STRING &&
                kv->val.v.arr.elem_type != GGUF_T_ARRAY)
                for (uint64_t j = 0; j < kv->val.v.arr.count && j < 64; j++)
                    (void)pagoda_gguf_arr_num(&kv->val, j);
        }
        pagoda_hparams hp;
        (void)pagoda_hparams_read(f, &hp, err, sizeof err);
        pagoda_memplan_opts o;
        pagoda_memplan_opts_default(&o);
        o.memory_budget = 1ull << 30; /* not MemAvailable: the same answer every run */
        pagoda_memplan p;
        (void)pagoda_memplan_compute(f, &o, &p, err, sizeof err);
        pagoda_tokenizer *t = pagoda_tokenizer_load(f, err, sizeof err);
        if (t) {
            static const char text[] = "Hello <s> world 123 \xE2\x96\x81x <|im_start|>";
            int32_t ids[64], n = 0;
            (void)pagoda_tokenize(t, text, sizeof text - 1, true, true, ids, 64, &n);
            for (int32_t i = 0; i < n && i < 64; i++) {
                size_t len;
                (void)pagoda_token_bytes(t, ids[i], true, &len);
            }
            pagoda_tokenizer_free(t);
        }
        char *tmpl = pagoda_gguf_get_str(f, "tokenizer.chat_template");
        if (tmpl) {
            char sys[256];
            (void)pagoda_chat_detect(tmpl);
            (void)pagoda_chat_default_system(tmpl, sys, sizeof sys);
            free(tmpl);
        }
        pagoda_gguf_close(f);
    }
    free(copy);
    return 0;
}
