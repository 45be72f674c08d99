/*
 * upcycle.c: see upcycle.h. The source is mapped and each tensor's bytes
 * are written straight from the mapping (n_experts times for an FFN
 * matrix), so memory stays small whatever the model size.
 * Not for: architectures other than llama (their MoE forms have other
 * keys and tensors), or a source that already has experts.
 */
#define _GNU_SOURCE
#include "upcycle.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "genmodel.h"
#include "gguf.h"
#include "gguf_writer.h"
#include "pagoda/types.h"

#define UPCYCLE_MAX_EXPERTS 256

/* 0 gate, 1 up, 2 down when name is blk.N.ffn_{gate,up,down}.weight (N in
 * *layer); -1 otherwise. */
static int ffn_kind(const gguf_str *name, int *layer)
{
    static const char *const suf[3] = {".ffn_gate.weight", ".ffn_up.weight", ".ffn_down.weight"};
    char buf[128];
    if (name->len >= sizeof buf) return -1;
    memcpy(buf, name->ptr, name->len);
    buf[name->len] = 0;
    int l = -1, off = 0;
    if (sscanf(buf, "blk.%d%n", &l, &off) != 1 || l < 0) return -1;
    for (int k = 0; k < 3; k++)
        if (!strcmp(buf + off, suf[k])) {
            *layer = l;
            return k;
        }
    return -1;
}

/* One tensor of the output: a source tensor copied `copies` times, or
 * (src < 0) the router of layer `layer`. */
typedef struct up_tensor {
    int64_t src;
    int copies;
    int layer;
} up_tensor;

int pagoda_upcycle(const pagoda_upcycle_opts *o, char *err, size_t err_len)
{
    int st = PAGODA_ERR_INVALID;
    gguf_file *f = NULL;
    gguf_writer *w = NULL;
    FILE *fp = NULL;
    up_tensor *plan = NULL;
    float *router = NULL;
    char *tmp = NULL, *arch = NULL, *name = NULL;
    char key[160], tname[160];
    if (err && err_len) err[0] = 0;
    if (!o || !o->src || !o->out || !*o->out) {
        snprintf(err, err_len, "upcycle: a source model and an output file (--out) are needed");
        goto out;
    }
    if (o->n_experts < 1 || o->n_experts > UPCYCLE_MAX_EXPERTS || o->n_used < 1 ||
        o->n_used > o->n_experts) {
        snprintf(err, err_len, "upcycle: --experts %d and --used %d: need 1 <= used <= experts <= %d",
                 o->n_experts, o->n_used, UPCYCLE_MAX_EXPERTS);
        goto out;
    }
    f = pagoda_gguf_open(o->src, err, err_len);
    if (!f) goto out;
    arch = pagoda_gguf_get_str(f, "general.architecture");
    if (!arch || strcmp(arch, "llama")) {
        snprintf(err, err_len, "%s: general.architecture is %s; --upcycle makes Mixtral-style experts "
                 "of a llama model only", o->src, arch ? arch : "missing");
        goto out;
    }
    int64_t dim = 0, v = 0;
    if (!pagoda_gguf_get_int(f, "llama.embedding_length", &dim) || dim <= 0 || dim > (1 << 20)) {
        snprintf(err, err_len, "%s: llama.embedding_length is missing or out of range", o->src);
        goto out;
    }
    if (pagoda_gguf_get_int(f, "llama.expert_count", &v) && v > 0) {
        snprintf(err, err_len, "%s: already a mixture of experts (llama.expert_count = %lld)", o->src,
                 (long long)v);
        goto out;
    }

    /* the output's tensors: each FFN matrix as n_experts copies, a router
     * before each layer's gate */
    plan = calloc(f->n_tensors * 2 + 1, sizeof *plan);
    if (!plan) { st = PAGODA_ERR_NOMEM; snprintf(err, err_len, "out of memory"); goto out; }
    size_t n_plan = 0;
    int n_ffn[3] = {0, 0, 0};
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        int layer = -1, kind = ffn_kind(&t->name, &layer);
        if (memmem(t->name.ptr, t->name.len, "_exps", 5)) {
            snprintf(err, err_len, "%s: tensor %.*s: already has experts", o->src, (int)t->name.len,
                     t->name.ptr);
            goto out;
        }
        if (kind >= 0 && t->n_dims != 2) {
            snprintf(err, err_len, "%s: tensor %.*s has %u dimensions, expected 2", o->src,
                     (int)t->name.len, t->name.ptr, t->n_dims);
            goto out;
        }
        if (kind == 0) plan[n_plan++] = (up_tensor){.src = -1, .layer = layer};
        if (kind >= 0) n_ffn[kind]++;
        plan[n_plan++] = (up_tensor){.src = (int64_t)i, .copies = kind >= 0 ? o->n_experts : 1,
                                     .layer = layer};
    }
    if (!n_ffn[0] || n_ffn[0] != n_ffn[1] || n_ffn[0] != n_ffn[2]) {
        snprintf(err, err_len, "%s: %d ffn_gate, %d ffn_up and %d ffn_down tensors: expected one of "
                 "each in every layer", o->src, n_ffn[0], n_ffn[1], n_ffn[2]);
        goto out;
    }

    w = pagoda_gguf_writer_new();
    if (!w) { st = PAGODA_ERR_NOMEM; snprintf(err, err_len, "out of memory"); goto out; }
    st = PAGODA_OK;
    for (uint64_t i = 0; !st && i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        if (kv->key.len == 12 && !memcmp(kv->key.ptr, "general.name", 12)) continue;
        st = pagoda_gguf_w_copy(w, kv);
        if (st) snprintf(err, err_len, "%s: copying key '%.*s': %s", o->src, (int)kv->key.len,
                         kv->key.ptr, pagoda_status_str(st));
    }
    if (st) goto out;
    name = pagoda_gguf_get_str(f, "general.name");
    snprintf(key, sizeof key, "%s, upcycled to %d experts top-%d", name ? name : "model",
             o->n_experts, o->n_used);
    st = pagoda_gguf_w_str(w, "general.name", key);
    if (!st) st = pagoda_gguf_w_u32(w, "llama.expert_count", (uint32_t)o->n_experts);
    if (!st) st = pagoda_gguf_w_u32(w, "llama.expert_used_count", (uint32_t)o->n_used);
    if (st) { snprintf(err, err_len, "metadata: %s", pagoda_status_str(st)); goto out; }
    for (size_t p = 0; p < n_plan; p++) {
        if (plan[p].src < 0) {
            snprintf(tname, sizeof tname, "blk.%d.ffn_gate_inp.weight", plan[p].layer);
            int64_t ne[2] = {dim, o->n_experts};
            st = pagoda_gguf_w_tensor(w, tname, PAGODA_DTYPE_F32, 2, ne);
        } else {
            const gguf_tensor *t = &f->tensors[plan[p].src];
            if (plan[p].copies > 1) {
                /* blk.N.ffn_X.weight -> blk.N.ffn_X_exps.weight */
                snprintf(tname, sizeof tname, "%.*s_exps.weight", (int)(t->name.len - 7), t->name.ptr);
                int64_t ne[3] = {t->ne[0], t->ne[1], o->n_experts};
                st = pagoda_gguf_w_tensor(w, tname, t->type, 3, ne);
            } else {
                snprintf(tname, sizeof tname, "%.*s", (int)t->name.len, t->name.ptr);
                st = pagoda_gguf_w_tensor(w, tname, t->type, t->n_dims, t->ne);
            }
        }
        if (st) { snprintf(err, err_len, "tensor %s: %s", tname, pagoda_status_str(st)); goto out; }
    }

    if (asprintf(&tmp, "%s.%d.tmp", o->out, (int)getpid()) < 0) { tmp = NULL; st = PAGODA_ERR_NOMEM; goto out; }
    fp = fopen(tmp, "wb");
    if (!fp) {
        st = PAGODA_ERR_IO;
        snprintf(err, err_len, "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    setvbuf(fp, NULL, _IOFBF, 1 << 22);
    size_t rn = (size_t)dim * (size_t)o->n_experts;
    router = malloc(rn * sizeof *router);
    if (!router) { st = PAGODA_ERR_NOMEM; snprintf(err, err_len, "out of memory"); goto out; }
    float rstd = o->router_std > 0 ? o->router_std : 1.0f / sqrtf((float)dim);
    st = pagoda_gguf_w_begin(w, fp);
    for (size_t p = 0; !st && p < n_plan; p++) {
        if (plan[p].src < 0) {
            pagoda_genmodel_fill_normal(o->seed ^ ((uint64_t)plan[p].layer * 0x9E3779B97F4A7C15ull),
                                        router, rn, rstd);
            st = pagoda_gguf_w_data_chunk(w, fp, router, rn * sizeof *router);
            continue;
        }
        const gguf_tensor *t = &f->tensors[plan[p].src];
        for (int c = 0; !st && c < plan[p].copies; c++)
            st = pagoda_gguf_w_data_chunk(w, fp, t->data, (size_t)t->nbytes);
    }
    if (!st) st = pagoda_gguf_w_finish(w, fp);
    if (st) { snprintf(err, err_len, "%s: write failed: %s", tmp, pagoda_status_str(st)); goto out; }
    if (fclose(fp) != 0) {
        fp = NULL;
        st = PAGODA_ERR_IO;
        snprintf(err, err_len, "%s: write failed: %s", tmp, strerror(errno));
        goto out;
    }
    fp = NULL;
    if (rename(tmp, o->out) != 0) {
        st = PAGODA_ERR_IO;
        snprintf(err, err_len, "rename %s -> %s: %s", tmp, o->out, strerror(errno));
        goto out;
    }
    st = PAGODA_OK;
out:
    if (fp) fclose(fp);
    if (st && tmp) unlink(tmp);
    free(tmp);
    free(router);
    free(plan);
    free(arch);
    free(name);
    pagoda_gguf_writer_free(w);
    pagoda_gguf_close(f);
    return st;
}
