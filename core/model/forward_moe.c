/*
 * forward_moe.c: the expert FFN of a routed layer (see docs/architecture.md,
 * "The expert FFN"): the router's logits to the host, the routing there
 * (moe_route.c), this rank's (token, choice) pairs through matmul_experts,
 * SwiGLU (or gpt-oss's clamped swiglu_oai) and moe_combine, the shared
 * expert beside them, the experts' biases (gpt-oss: each pair's row of its
 * expert's bias table gathered with get_rows and added), and the core's
 * fallbacks for a backend without the ABI 1.5 / 1.8 slots.
 * Not for: the dense layers or the buffers (forward.c).
 */
#include "forward_moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe_route.h"

/* A view of the first n rows of an activation tensor. */
static pagoda_tensor rows(pagoda_tensor t, int64_t n)
{
    t.rows = n;
    return t;
}

/* A packed [n x c] view at the start of an activation tensor. */
static pagoda_tensor view(pagoda_tensor t, int64_t n, int64_t c)
{
    t.rows = n;
    t.cols = c;
    t.row_stride = (size_t)c * 4;
    return t;
}

/* Rows r0 .. r0 + n - 1 of a packed tensor. */
static pagoda_tensor sub(pagoda_tensor t, int64_t r0, int64_t n)
{
    t.offset += (size_t)r0 * t.row_stride;
    t.rows = n;
    return t;
}

/* The clamped SwiGLU on the host (a backend without swiglu_oai): gate and
 * up downloaded, computed as backend.h defines it, gate uploaded. */
static int glu_oai_host(pagoda_forward *fw, const pagoda_tensor *g, const pagoda_tensor *u)
{
    const pagoda_backend_ops *o = &fw->be->ops;
    void *c = fw->be->ctx;
    const float alpha = fw->hp.swiglu_alpha, limit = fw->hp.swiglu_limit;
    size_t C = (size_t)g->cols, n = (size_t)g->rows * C;
    if (n == 0) return PAGODA_OK;
    float *hg = malloc(2 * n * sizeof(float));
    if (!hg) return PAGODA_ERR_NOMEM;
    float *hu = hg + n;
    int st = PAGODA_OK;
    for (int64_t r = 0; r < g->rows && !st; r++) {
        st = o->download(c, g->buf, g->offset + (size_t)r * g->row_stride, hg + (size_t)r * C, C * 4);
        if (!st) st = o->download(c, u->buf, u->offset + (size_t)r * u->row_stride, hu + (size_t)r * C, C * 4);
    }
    for (size_t i = 0; i < n && !st; i++) {
        float x = hg[i] < limit ? hg[i] : limit;
        float y = hu[i] < -limit ? -limit : hu[i] > limit ? limit : hu[i];
        hg[i] = (y + 1.0f) * (x / (1.0f + expf(-alpha * x)));
    }
    for (int64_t r = 0; r < g->rows && !st; r++)
        st = o->upload(c, g->buf, g->offset + (size_t)r * g->row_stride, hg + (size_t)r * C, C * 4);
    free(hg);
    return st;
}

int pagoda_forward_glu(pagoda_forward *fw, const pagoda_tensor *gate, const pagoda_tensor *up)
{
    const pagoda_backend_ops *o = &fw->be->ops;
    if (fw->hp.ffn_act != PAGODA_FFN_SWIGLU_OAI) return o->swiglu(fw->be->ctx, gate, up, gate);
    if (o->swiglu_oai)
        return o->swiglu_oai(fw->be->ctx, gate, up, fw->hp.swiglu_alpha, fw->hp.swiglu_limit, gate);
    return glu_oai_host(fw, gate, up);
}

/* y[r] += b[ids[r]] for the n pair rows of y: expert biases (gpt-oss), the
 * table b [E x y.cols] F32; its rows gathered into fw->eb with get_rows,
 * then added. ids are this rank's expert numbers (the pairs' pair_e), the
 * rows of its share of b (tensor parallelism: its experts' rows). */
static int add_expert_bias(pagoda_forward *fw, const pagoda_tensor *b, const int32_t *ids, int32_t n,
                           const pagoda_tensor *y)
{
    const pagoda_backend_ops *o = &fw->be->ops;
    void *c = fw->be->ctx;
    if (n == 0) return PAGODA_OK;
    pagoda_tensor t = view(fw->eb, n, y->cols);
    int st = o->get_rows(c, b, ids, n, &t);
    return st ? st : o->add(c, y, &t, y);
}

/* The core's fallback for a backend without matmul_experts: the n pairs
 * (sorted by expert, so each expert's pairs are one run of rows) through
 * gate/up, SwiGLU and down with plain matmuls, one call per active expert
 * and matrix: x's rows of the pairs' tokens gathered into ey (get_rows on
 * the F32 activations), then per run eg/eu = xg * W_e^T, and ey = eg *
 * down_e^T. */
static int experts_fallback(pagoda_forward *fw, const pagoda_forward_layer *L, const pagoda_tensor *xb,
                            int32_t n, const pagoda_tensor *eg, const pagoda_tensor *eu,
                            const pagoda_tensor *ey, const char **what)
{
    const pagoda_backend_ops *o = &fw->be->ops;
    void *c = fw->be->ctx;
    const int32_t *pe = fw->moe.pair_e;
    int st;
    *what = "get_rows(expert inputs)";
    if ((st = o->get_rows(c, xb, fw->moe.pair_t, n, ey))) return st;
    for (int32_t r0 = 0, r1; r0 < n; r0 = r1) {
        for (r1 = r0 + 1; r1 < n && pe[r1] == pe[r0];) r1++;
        pagoda_tensor x = sub(*ey, r0, r1 - r0), w2[2] = {L->gate_exps, L->up_exps};
        w2[0].offset += (size_t)pe[r0] * L->gate_exps_stride;
        w2[1].offset += (size_t)pe[r0] * L->up_exps_stride;
        const pagoda_tensor o2[2] = {sub(*eg, r0, r1 - r0), sub(*eu, r0, r1 - r0)};
        static const char *const nm[] = {"matmul(ffn_gate_exps)", "matmul(ffn_up_exps)",
                                         "matmul_multi(ffn_gate_exps, ffn_up_exps)"};
        if ((st = pagoda_forward_matmuls(fw, &x, 2, w2, NULL, o2, nm, what))) return st;
    }
    if (L->has_exp_bias) {
        *what = "get_rows/add(ffn_gate_exps.bias, ffn_up_exps.bias)";
        if ((st = add_expert_bias(fw, &L->gate_exps_b, pe, n, eg)) ||
            (st = add_expert_bias(fw, &L->up_exps_b, pe, n, eu)))
            return st;
    }
    *what = "swiglu(experts)";
    if ((st = pagoda_forward_glu(fw, eg, eu))) return st;
    for (int32_t r0 = 0, r1; r0 < n; r0 = r1) {
        for (r1 = r0 + 1; r1 < n && pe[r1] == pe[r0];) r1++;
        pagoda_tensor x = sub(*eg, r0, r1 - r0), w = L->down_exps, y = sub(*ey, r0, r1 - r0);
        w.offset += (size_t)pe[r0] * L->down_exps_stride;
        *what = "matmul(ffn_down_exps)";
        if ((st = o->matmul(c, &x, &w, NULL, &y))) return st;
    }
    *what = "get_rows/add(ffn_down_exps.bias)";
    if (L->has_exp_bias && (st = add_expert_bias(fw, &L->down_exps_b, pe, n, ey))) return st;
    return PAGODA_OK;
}

/* Sort the n pairs by local expert (stable: token order within an
 * expert), with ids/weights of fw->moe as scratch. */
static void sort_pairs(pagoda_forward *fw, int32_t n)
{
    int32_t *e = fw->moe.pair_e, *t = fw->moe.pair_t, *te = fw->moe.ids;
    float *w = fw->moe.pair_w, *tw = fw->moe.weights;
    int32_t *tt = fw->moe.pair_tmp;
    int32_t pos = 0;
    for (int32_t x = 0; x < fw->n_exp_local; x++)
        for (int32_t r = 0; r < n; r++)
            if (e[r] == x) {
                te[pos] = x;
                tt[pos] = t[r];
                tw[pos] = w[r];
                pos++;
            }
    memcpy(e, te, sizeof *e * (size_t)n);
    memcpy(t, tt, sizeof *t * (size_t)n);
    memcpy(w, tw, sizeof *w * (size_t)n);
}

/* out[dst[r]] += w[r] * y[r] after zeroing out unless accumulate: the
 * backend's moe_combine (ABI 1.5), else on the host (download, sum,
 * upload). y and out are packed. */
static int combine(pagoda_forward *fw, const pagoda_tensor *y, const int32_t *dst, const float *w,
                   bool accumulate, const pagoda_tensor *out)
{
    const pagoda_backend_ops *o = &fw->be->ops;
    void *c = fw->be->ctx;
    if (y->rows == 0 && accumulate) return PAGODA_OK;
    if (o->moe_combine && y->rows > 0) return o->moe_combine(c, y, dst, w, accumulate, out);
    size_t C = (size_t)out->cols, no = (size_t)out->rows * C, ny = (size_t)y->rows * C;
    float *ho = malloc((no + ny) * sizeof(float));
    if (!ho) return PAGODA_ERR_NOMEM;
    float *hy = ho + no;
    int st = PAGODA_OK;
    if (accumulate) st = o->download(c, out->buf, out->offset, ho, no * sizeof(float));
    else memset(ho, 0, no * sizeof(float));
    if (!st && ny) st = o->download(c, y->buf, y->offset, hy, ny * sizeof(float));
    if (!st) {
        for (int64_t r = 0; r < y->rows; r++) {
            float *dr = ho + (size_t)dst[r] * C;
            const float *yr = hy + (size_t)r * C;
            for (size_t i = 0; i < C; i++) dr[i] += w[r] * yr[i];
        }
        st = o->upload(c, out->buf, out->offset, ho, no * sizeof(float));
    }
    free(ho);
    return st;
}

/* The expert FFN of a routed layer: xb [T x dim] (the normed input) ->
 * out [T x dim], this rank's partial sum under tensor parallelism (its
 * experts' pairs and its share of the shared expert; the caller
 * all-reduces it once). Router logits to the host, the routing there
 * (moe_route.c), then the (token, choice) pairs of this rank's experts
 * token-major through gate, up, SwiGLU and down, and their weighted sum. */
int pagoda_forward_moe(pagoda_forward *fw, const pagoda_forward_layer *L, int32_t T,
                       const pagoda_tensor *xb, const pagoda_tensor *out, const char **what)
{
    const pagoda_hparams *hp = &fw->hp;
    const pagoda_backend_ops *o = &fw->be->ops;
    void *c = fw->be->ctx;
    const int32_t E = hp->n_experts, k = hp->n_experts_used;
    int st;
#define MCALL(name, expr) do { *what = name; if ((st = (expr))) return st; } while (0)
    pagoda_tensor rl = rows(fw->rl, T);
    MCALL("matmul(ffn_gate_inp)",
          o->matmul(c, xb, &L->router, L->has_router_b ? &L->router_b : NULL, &rl));
    MCALL("download(router logits)",
          o->download(c, rl.buf, rl.offset, fw->moe.logits, (size_t)T * (size_t)E * sizeof(float)));
    pagoda_moe_route_params rp = {.n_experts = E, .k = k, .gating = hp->moe_gating,
                                  .norm_topk = hp->moe_norm_topk, .scale = hp->moe_scale,
                                  .bias = L->exp_probs_b, .n_groups = hp->n_expert_groups,
                                  .n_group_used = hp->n_group_used};
    pagoda_moe_route_rows(&rp, fw->moe.logits, T, fw->moe.ids, fw->moe.weights, fw->moe.scratch);
    /* this rank's pairs, token-major, experts in local numbering */
    int32_t n = 0;
    for (int32_t p = 0; p < T * k; p++) {
        int32_t e = fw->moe.ids[p] - fw->exp_lo;
        if (e < 0 || e >= fw->n_exp_local) continue;
        fw->moe.pair_e[n] = e;
        fw->moe.pair_t[n] = p / k;
        fw->moe.pair_w[n] = fw->moe.weights[p];
        n++;
    }
    bool acc = false;
    if (L->has_shexp) {
        /* the shared expert, a dense FFN every token runs (this rank's rows) */
        int64_t W = L->gate_shexp.rows;
        pagoda_tensor g = view(fw->hb, T, W), u = view(fw->hb2, T, W);
        static const char *const nm[] = {"matmul(ffn_gate_shexp)", "matmul(ffn_up_shexp)",
                                         "matmul_multi(ffn_gate_shexp, ffn_up_shexp)"};
        const pagoda_tensor w2[2] = {L->gate_shexp, L->up_shexp}, o2[2] = {g, u};
        if ((st = pagoda_forward_matmuls(fw, xb, 2, w2, NULL, o2, nm, what))) return st;
        MCALL("swiglu(shexp)", pagoda_forward_glu(fw, &g, &u));
        if (L->has_shexp_gate) {
            /* qwen2moe: times sigmoid(x . gate_inp_shexp), one weight a token */
            pagoda_tensor ys = rows(fw->ys, T), gl = view(fw->rl, T, 1);
            MCALL("matmul(ffn_down_shexp)", o->matmul(c, &g, &L->down_shexp, NULL, &ys));
            MCALL("matmul(ffn_gate_inp_shexp)", o->matmul(c, xb, &L->gate_inp_shexp, NULL, &gl));
            MCALL("download(shared expert gate)",
                  o->download(c, gl.buf, gl.offset, fw->moe.gate, (size_t)T * sizeof(float)));
            for (int32_t t = 0; t < T; t++) fw->moe.gate[t] = pagoda_moe_sigmoid(fw->moe.gate[t]);
            MCALL("moe_combine(shared expert gate)",
                  combine(fw, &ys, fw->moe.tok, fw->moe.gate, false, out));
        } else {
            MCALL("matmul(ffn_down_shexp)", o->matmul(c, &g, &L->down_shexp, NULL, out));
        }
        acc = true;
    }
    pagoda_tensor eg = view(fw->eg, n, hp->ffn_exp), eu = view(fw->eu, n, hp->ffn_exp);
    pagoda_tensor ey = view(fw->ey, n, hp->dim);
    if (n > 0 && o->matmul_experts) {
        const int32_t E_l = fw->n_exp_local, *pe = fw->moe.pair_e, *pt = fw->moe.pair_t;
        MCALL("matmul_experts(ffn_gate_exps)",
              o->matmul_experts(c, xb, pt, &L->gate_exps, E_l, L->gate_exps_stride, pe, &eg));
        MCALL("matmul_experts(ffn_up_exps)",
              o->matmul_experts(c, xb, pt, &L->up_exps, E_l, L->up_exps_stride, pe, &eu));
        if (L->has_exp_bias) {
            MCALL("get_rows/add(ffn_gate_exps.bias)", add_expert_bias(fw, &L->gate_exps_b, pe, n, &eg));
            MCALL("get_rows/add(ffn_up_exps.bias)", add_expert_bias(fw, &L->up_exps_b, pe, n, &eu));
        }
        MCALL("swiglu(experts)", pagoda_forward_glu(fw, &eg, &eu));
        MCALL("matmul_experts(ffn_down_exps)",
              o->matmul_experts(c, &eg, NULL, &L->down_exps, E_l, L->down_exps_stride, pe, &ey));
        if (L->has_exp_bias)
            MCALL("get_rows/add(ffn_down_exps.bias)", add_expert_bias(fw, &L->down_exps_b, pe, n, &ey));
    } else if (n > 0) {
        sort_pairs(fw, n);
        if ((st = experts_fallback(fw, L, xb, n, &eg, &eu, &ey, what))) return st;
    }
    MCALL("moe_combine(experts)", combine(fw, &ey, fw->moe.pair_t, fw->moe.pair_w, acc, out));
#undef MCALL
    return PAGODA_OK;
}
