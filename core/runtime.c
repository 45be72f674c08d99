/*
 * runtime.c: builds a configured server from a config, in the order a user
 * can follow in the log: model header and memory plan first (nothing
 * allocated yet), then the plugins (each checked by the loader), then the
 * weights and the KV pool through the backend, then the engine. Every
 * failure names what failed and frees what was made.
 * Not for: signals or running the frontend (server.c), the serving loop
 * (engine.c).
 */
#include "runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat_template.h"
#include "config_check.h"
#include "drafter.h"
#include "host.h"
#include "host_engine.h"
#include "log.h"
#include "progress.h"
#include "tokenizer.h"

#define ERR(...) snprintf(err, err_len, __VA_ARGS__)

/* Load kind/name, make its host table and create an instance. */
static int make_plugin(pagoda_runtime *rt, int kind, const char *name, pagoda_plugin **p,
                       pagoda_host **h, void **ctx, char *err, size_t err_len)
{
    int st = pagoda_plugin_load(rt->cfg, kind, name, p, err, err_len);
    if (st) return st;
    *h = pagoda_host_new(rt->cfg, kind, name);
    if (!*h) { ERR("out of memory"); return PAGODA_ERR_NOMEM; }
    pagoda_host_attach_engine(*h, rt, kind == PAGODA_KIND_FRONTEND);
    st = pagoda_plugin_create(*p, *h, ctx, err, err_len);
    if (st) return st;
    pagoda_log(PAGODA_LOG_INFO, "%s.%s %s loaded from %s", pagoda_kind_name(kind), name,
               (*p)->desc.version ? (*p)->desc.version : "", (*p)->path);
    return PAGODA_OK;
}

/* The constraint engine gets every token's output bytes; a token that
 * writes nothing (control, end of generation) has length 0 and is never in
 * a mask: the engine decides where the output ends (engine_constraint.c).
 * Tokens that write markup but are not plain text are flagged control, so
 * a grammar's <token> reference takes the token and not its spelling. */
static int give_vocab(pagoda_runtime *rt, char *err, size_t err_len)
{
    const pagoda_tokenizer *t = rt->model->tok;
    int32_t V = rt->model->hp.n_vocab;
    const char **bytes = calloc((size_t)V, sizeof *bytes);
    uint32_t *len = calloc((size_t)V, sizeof *len);
    uint8_t *ctl = calloc((size_t)V, 1);
    int st = PAGODA_ERR_NOMEM;
    char msg[512] = "";
    if (!bytes || !len || !ctl) {
        ERR("out of memory");
        goto out;
    }
    for (int32_t i = 0; i < V; i++) {
        size_t l = 0;
        bytes[i] = pagoda_token_bytes(t, i, false, &l);
        len[i] = pagoda_tokenizer_is_eog(t, i) ? 0 : (uint32_t)l;
        ctl[i] = len[i] && !pagoda_tokenizer_is_plain(t, i); /* markup: <|channel|>, <tool_call>, ... */
    }
    pagoda_constraint_vocab v = {.struct_size = sizeof v, .n_vocab = V,
                                 .bytes = (const char *const *)bytes, .len = len, .control = ctl};
    st = rt->con.ops.set_vocab(rt->con.ctx, &v, msg, sizeof msg);
    if (st) ERR("constraint.%s: set_vocab failed: %s", rt->con.name, msg[0] ? msg : pagoda_status_str(st));
out:
    free(bytes);
    free(len);
    free(ctl);
    return st;
}

pagoda_constraint *pagoda_runtime_constraint(pagoda_runtime *rt)
{
    return rt && rt->con.ctx ? &rt->con : NULL;
}

int pagoda_runtime_plan_gauges(const pagoda_runtime *rt, pagoda_metric_gauge *g, int cap)
{
    const pagoda_memplan *p = &rt->plan;
    pagoda_engine *e = pagoda_runtime_engine(rt);
    pagoda_metric_gauge all[] = {
        {"pagoda_memory_weights_bytes", "Bytes of model weights", (double)p->weight_bytes},
        {"pagoda_memory_kv_pool_bytes", "Bytes of the KV cache pool", (double)p->kv_pool_bytes},
        {"pagoda_memory_kv_window_bytes",
         "Bytes of the sliding-window layers' own KV pool and the prefix-hit sink",
         (double)(p->swa_pool_bytes + p->kv_sink_bytes)},
        {"pagoda_memory_activations_bytes", "Bytes of activation buffers", (double)p->act_bytes},
        {"pagoda_memory_workspace_bytes", "Bytes of kernel workspace", (double)p->workspace_bytes},
        {"pagoda_memory_overhead_bytes", "Bytes of runtime overhead", (double)p->overhead_bytes},
        {"pagoda_memory_draft_model_bytes",
         "Bytes of speculative decoding's draft model: weights, its KV pool, activations, its repacked copies",
         (double)(p->draft_weight_bytes + p->draft_kv_bytes + p->draft_act_bytes + p->draft_repacked_bytes)},
        {"pagoda_memory_repacked_bytes",
         "Bytes the backend holds beside the weights (the CPU backend's repacked copies), as planned",
         (double)p->repacked_bytes},
        {"pagoda_memory_repacked_held_bytes",
         "Bytes the backend holds beside the weights now (the CPU backend's repacked copies made so far; "
         "at most pagoda_memory_repacked_bytes plus, with speculative = draft, the draft model's)",
         e ? (double)pagoda_engine_extra_held_bytes(e) : 0.0},
        {"pagoda_kv_bytes_per_token", "KV cache pool bytes per token", (double)p->kv_bytes_per_token},
        {"pagoda_kv_pool_tokens", "Tokens the KV pool holds", (double)p->kv_tokens},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0] && n < cap; i++) g[n++] = all[i];
    if (rt->comm && rt->tp) {
        /* what the links cost (rank 0's view; each rank moves the same) */
        const pagoda_comm_stats *c = &rt->comm->st;
        double steps = (double)rt->tp->steps;
        pagoda_metric_gauge cg[] = {
            {"pagoda_comm_ranks", "Ranks the model is split over (tensor parallelism)",
             (double)rt->tp->size},
            {"pagoda_comm_steps_total", "Steps broadcast to the other ranks", steps},
            {"pagoda_comm_bytes_total", "Bytes this rank handed to collectives", (double)c->bytes},
            {"pagoda_comm_seconds_total", "Seconds this rank spent in collectives", c->seconds},
            {"pagoda_comm_all_reduce_calls_total", "All-reduces (two per layer per step)",
             (double)c->all_reduce_calls},
            {"pagoda_comm_all_reduce_bytes_total", "Bytes all-reduced", (double)c->all_reduce_bytes},
            {"pagoda_comm_all_reduce_seconds_total", "Seconds in all-reduces", c->all_reduce_seconds},
            {"pagoda_comm_broadcast_bytes_total", "Bytes of steps broadcast", (double)c->broadcast_bytes},
            {"pagoda_comm_broadcast_seconds_total", "Seconds in broadcasts", c->broadcast_seconds},
            {"pagoda_comm_bytes_per_step", "Mean bytes in collectives per step",
             steps > 0 ? (double)c->bytes / steps : 0},
            {"pagoda_comm_seconds_per_step", "Mean seconds in collectives per step",
             steps > 0 ? c->seconds / steps : 0},
        };
        for (size_t i = 0; i < sizeof cg / sizeof cg[0] && n < cap; i++) g[n++] = cg[i];
    }
    return n;
}

bool pagoda_runtime_shutting_down(const pagoda_runtime *rt)
{
    return __atomic_load_n(&rt->shutting_down, __ATOMIC_ACQUIRE) != 0;
}

/* Join the group: the comm plugin, its size against tensor_parallel, this
 * rank's log prefix. */
static int open_tp(pagoda_runtime *rt, char *err, size_t err_len)
{
    int st = pagoda_comm_open(rt->cfg, rt->ec.comm, &rt->comm, err, err_len);
    if (st) return st;
    const pagoda_comm_info *ci = &rt->comm->info;
    if (ci->size != rt->ec.tensor_parallel) {
        ERR("engine.tensor_parallel = %d but the launcher started %d rank%s: start it with "
            "mpirun -n %d (or set tensor_parallel = %d)", rt->ec.tensor_parallel, ci->size,
            ci->size == 1 ? "" : "s", rt->ec.tensor_parallel, ci->size);
        return PAGODA_ERR_INVALID;
    }
    /* a device-memory comm (NCCL) needs the backend's buffer_address (ABI
     * 1.12): pagoda_forward_init_tp refuses it otherwise, on every rank */
    if ((st = pagoda_tp_new(rt->comm, &rt->tp))) {
        ERR("out of memory");
        return st;
    }
    char prefix[32];
    snprintf(prefix, sizeof prefix, "rank %d: ", ci->rank);
    pagoda_log_set_prefix(prefix);
    pagoda_log(PAGODA_LOG_INFO, "tensor parallel: rank %d of %d, pid %d (comm.%s: %s, %s)",
               ci->rank, ci->size, (int)getpid(), rt->comm->name, ci->name, ci->transport);
    return PAGODA_OK;
}

bool pagoda_runtime_is_worker(const pagoda_runtime *rt) { return rt->tp && rt->tp->rank != 0; }

void pagoda_runtime_interrupt_comm(pagoda_runtime *rt)
{
    if (rt && rt->comm) pagoda_comm_interrupt(rt->comm);
}

/* plan_only: stop once the plan is computed, fit or not (pagoda plan). */
static int prepare(pagoda_config *cfg, bool with_frontend, bool print_plan, bool plan_only,
                   pagoda_runtime **out, char *err, size_t err_len)
{
    *out = NULL;
    pagoda_runtime *rt = calloc(1, sizeof *rt);
    if (!rt) { ERR("out of memory"); return PAGODA_ERR_NOMEM; }
    rt->cfg = cfg;
    pthread_mutex_init(&rt->load_mu, NULL);
    pthread_cond_init(&rt->load_cv, NULL);
    int st = pagoda_config_engine(cfg, &rt->ec, err, err_len);
    if (st) goto fail;
    pagoda_log_set_level(rt->ec.log_level);
    if (!plan_only && rt->ec.tensor_parallel > 1) {
        /* first, so every rank refuses what follows together (tp_agree) */
        if ((st = open_tp(rt, err, err_len))) goto fail;
        if (rt->tp->rank != 0) with_frontend = false;
    }
    /* every section and key against the plugins named, before the model,
     * the plan or any plugin is loaded: a typo is not found only once the
     * plan "fits", nor is a misspelled section ignored */
    if ((st = pagoda_config_check_plugins(cfg, err, err_len))) goto fail;
    if (!rt->ec.model[0]) {
        ERR("no model: set [engine] model = PATH in the config or --set engine.model=PATH");
        st = PAGODA_ERR_INVALID;
        goto fail;
    }

    /* the model: header, tensors, tokenizer (weights stay mapped, unread) */
    rt->model = pagoda_model_open(rt->ec.model, err, err_len);
    if (!rt->model) { st = PAGODA_ERR_INVALID; goto fail; }
    const pagoda_hparams *hp = &rt->model->hp;
    pagoda_log(PAGODA_LOG_INFO, "model %s: %s, %d layers, dim %d, %d heads (%d KV), vocab %d, "
               "context %d, %.1fM parameters", rt->model->name, hp->arch, hp->n_layers, hp->dim,
               hp->n_heads, hp->n_kv_heads, hp->n_vocab, hp->n_ctx_train,
               (double)rt->model->n_params / 1e6);

    char msg[256] = "";
    pagoda_chat_family fam;
    const char *tmpl = rt->model->chat_template;
    bool auto_tmpl = !rt->ec.chat_template[0] || !strcmp(rt->ec.chat_template, "auto");
    if (auto_tmpl && (!tmpl || !*tmpl) && !strcmp(hp->arch, "gemma3")) {
        /* Gemma files often carry no template (the base models): their
         * turns are Gemma's, not the ChatML fallback (whose markers the
         * vocabulary does not have) */
        fam = PAGODA_CHAT_GEMMA;
        st = PAGODA_OK;
        pagoda_log(PAGODA_LOG_INFO, "chat template: the model has none; using Gemma's turns "
                   "(its architecture is gemma3)");
    } else {
        st = pagoda_chat_select(rt->ec.chat_template, tmpl, &fam, msg, sizeof msg);
    }
    if (st) { ERR("engine.chat_template: %s", msg); goto fail; }
    if (msg[0]) pagoda_log(PAGODA_LOG_WARN, "%s", msg);
    rt->chat_family = fam;

    /* the plugins; the scheduler's budgets size the plan */
    st = make_plugin(rt, PAGODA_KIND_BACKEND, rt->ec.backend, &rt->p_backend, &rt->h_backend,
                     &rt->backend.ctx, err, err_len);
    if (st) goto fail;
    rt->backend.ops = rt->p_backend->ops.backend;
    rt->backend.host = rt->h_backend;
    rt->backend.last_error = pagoda_host_last_error;
    rt->backend.info.struct_size = sizeof rt->backend.info;
    rt->backend.ops.info(rt->backend.ctx, &rt->backend.info);
    pagoda_log(PAGODA_LOG_INFO, "backend: %s", rt->backend.info.name);
    /* a model that needs an optional op the backend lacks is refused now,
     * before the weights are read */
    st = pagoda_forward_check_backend(hp, &rt->backend, err, err_len);
    if (!st) st = pagoda_forward_check_kv(hp, &rt->backend, rt->ec.kv_dtype, err, err_len);
    if (st) goto fail;

    st = make_plugin(rt, PAGODA_KIND_SCHEDULER, rt->ec.scheduler, &rt->p_sched, &rt->h_sched,
                     &rt->sched.ctx, err, err_len);
    if (st) goto fail;
    rt->sched.ops = rt->p_sched->ops.scheduler;
    rt->sched.name = rt->p_sched->desc.name;
    st = make_plugin(rt, PAGODA_KIND_KVCACHE, rt->ec.kvcache, &rt->p_kv, &rt->h_kv, &rt->kv.ctx,
                     err, err_len);
    if (st) goto fail;
    rt->kv.ops = rt->p_kv->ops.kvcache;
    rt->kv.name = rt->p_kv->desc.name;

    if (strcmp(rt->ec.constraint, "none") != 0) {
        st = make_plugin(rt, PAGODA_KIND_CONSTRAINT, rt->ec.constraint, &rt->p_con, &rt->h_con,
                         &rt->con.ctx, err, err_len);
        if (st) goto fail;
        rt->con.ops = rt->p_con->ops.constraint;
        rt->con.name = rt->p_con->desc.name;
        if ((st = give_vocab(rt, err, err_len)) != PAGODA_OK) goto fail;
    }

    int32_t max_seqs = 0, max_tokens = 0;
    rt->sched.ops.limits(rt->sched.ctx, &max_seqs, &max_tokens);

    /* the memory plan, before anything large is allocated */
    pagoda_memplan_opts po;
    pagoda_memplan_opts_default(&po);
    po.memory_budget = rt->ec.memory_budget;
    if (!po.memory_budget && !rt->backend.info.host_memory)
        po.memory_budget = (uint64_t)((double)rt->backend.info.mem_free * rt->ec.gpu_memory_utilization);
    po.kv_dtype = rt->ec.kv_dtype;
    po.max_seq_len = rt->ec.max_seq_len;
    po.max_batched_tokens = max_tokens;
    po.max_num_seqs = max_seqs;
    po.block_size = rt->ec.block_size;
    po.swa_kv = rt->ec.swa_kv_full ? PAGODA_SWA_KV_FULL : PAGODA_SWA_KV_WINDOW;
    po.tensor_parallel = rt->ec.tensor_parallel;
    po.kv_no_latent = !(rt->backend.info.kv_kinds & (1u << PAGODA_KV_LATENT));
    po.mla_decompress_min = rt->ec.mla_decompress_min;
    po.mla_decompress_ctx = rt->ec.mla_decompress_ctx;
    {
        /* speculative decoding's draft rows have logits too */
        pagoda_engine_opts so = {.spec_max_draft = rt->ec.spec_max_draft,
                                 .spec_max_seqs = rt->ec.spec_max_seqs};
        snprintf(so.speculative, sizeof so.speculative, "%s", rt->ec.speculative);
        po.spec_logit_rows = pagoda_engine_spec_rows(&so, max_seqs, max_tokens);
    }
    /* ABI 1.15: what the backend holds beside each dense matmul weight
     * (the CPU backend's repacked copies), asked in the plan's weights
     * walk with the shape one rank holds; NULL: nothing */
    po.weight_extra = rt->backend.ops.weight_extra_bytes;
    po.weight_extra_ctx = rt->backend.ctx;
    st = pagoda_memplan_compute(rt->model->gguf, &po, &rt->plan, err, err_len);
    if (st) {
        /* the backend's own word on a weight_extra_bytes refusal */
        const char *why = strstr(err, "weight_extra_bytes failed")
                              ? pagoda_host_last_error(rt->h_backend) : NULL;
        size_t used = strlen(err);
        if (why && *why)
            snprintf(err + used, err_len - used, " (backend %s: %s)", rt->backend.info.name, why);
        goto fail;
    }
    if (!strcmp(rt->ec.speculative, "draft") && rt->ec.spec_draft_model[0]) {
        /* the draft model's weights, pool and activations come out of the
         * same budget: plan them before the main pool takes the rest */
        pagoda_engine_opts so = {.spec_max_seqs = rt->ec.spec_max_seqs};
        pagoda_draft_model_bytes db;
        st = pagoda_draft_model_plan(rt->ec.spec_draft_model, pagoda_engine_spec_draft_seats(&so, max_seqs),
                                     (int32_t)rt->plan.max_seq_len, rt->ec.block_size, po.weight_extra,
                                     po.weight_extra_ctx, &db, err, err_len);
        if (st) goto fail;
        po.draft_weight_bytes = db.weights;
        po.draft_kv_bytes = db.kv;
        po.draft_act_bytes = db.act;
        po.draft_seats = db.seats;
        po.draft_seq_len = db.seq_len;
        po.draft_repacked_bytes = db.repacked;
        st = pagoda_memplan_compute(rt->model->gguf, &po, &rt->plan, err, err_len);
        if (st) goto fail;
    }
    int64_t want_tokens = rt->ec.kv_cache_tokens;
    if (want_tokens <= 0 && rt->plan.budget_auto &&
        rt->plan.kv_tokens > (uint64_t)(max_seqs * rt->plan.max_seq_len)) {
        /* an automatic budget on host memory would otherwise take most of
         * the machine's RAM for a small model: more than every seat at full
         * length is never needed at once */
        want_tokens = (int64_t)max_seqs * rt->plan.max_seq_len;
    }
    if (want_tokens > 0) {
        /* an explicit pool size overrides the budget (experiments, tests):
         * what is left to check is the budget */
        pagoda_memplan *p = &rt->plan;
        pagoda_memplan_set_pool(p, (uint64_t)((want_tokens + p->block_size - 1) / p->block_size));
    }
    if (print_plan) pagoda_memplan_print(&rt->plan, stderr);
    const pagoda_memplan *pl = &rt->plan;
    uint64_t window_cost = pl->swa_pool_bytes + pl->kv_sink_bytes;
    uint64_t local_in_pool = pl->kv_tokens * pl->kv_swa_bytes_per_token;
    if (pl->swa.window && window_cost > local_in_pool) {
        /* many seats for a small pool: the window pool reserves a window
         * per seat, which costs more than the local layers would take in
         * the pool itself */
        pagoda_log(PAGODA_LOG_WARN, "the sliding-window layers' own pool (%.1f MiB: %d seats) is "
                   "larger than their KV for the pool's %llu tokens would be (%.1f MiB): "
                   "swa_kv = full, or a lower max_num_seqs, takes less memory",
                   (double)window_cost / 1048576.0, pl->swa.seats,
                   (unsigned long long)pl->kv_tokens, (double)local_in_pool / 1048576.0);
    }
    if (plan_only) {
        *out = rt;
        return PAGODA_OK;
    }
    rt->plan_json = pagoda_memplan_json(&rt->plan);
    if (!rt->plan.fits || rt->plan.kv_blocks == 0) {
        ERR("the model does not fit: %s (see the memory plan; lower max_seq_len or "
            "max_batched_tokens, or raise memory_budget)", rt->plan.reason);
        st = PAGODA_ERR_NOSPACE;
        goto fail;
    }

    rt->metrics = pagoda_metrics_new();
    if (!rt->metrics) { ERR("out of memory"); st = PAGODA_ERR_NOMEM; goto fail; }

    if (with_frontend) {
        /* the frontend comes up before the weights: it answers 503 (health,
         * submit) until pagoda_runtime_load publishes the engine */
        st = make_plugin(rt, PAGODA_KIND_FRONTEND, rt->ec.frontend, &rt->p_front, &rt->h_front,
                         &rt->front_ctx, err, err_len);
        if (st) goto fail;
    }
    if (rt->tp) {
        rt->tp_agreed = true;
        st = pagoda_tp_agree(rt->tp, "start-up", PAGODA_OK,
                             pagoda_tp_fingerprint(cfg, rt->model->gguf), err, err_len);
        if (st) goto fail;
        pagoda_log(PAGODA_LOG_INFO, "tensor parallel: %d ranks agree on config and model (comm.%s: "
                   "%s)", rt->tp->size, rt->comm->name, rt->comm->info.name);
    }
    *out = rt;
    return PAGODA_OK;
fail:
    if (rt->tp && !rt->tp_agreed) {
        /* the other ranks wait for this rank's word */
        char e2[256];
        rt->tp_agreed = true;
        (void)pagoda_tp_agree(rt->tp, "start-up", st ? st : PAGODA_ERR_INTERNAL, 0, e2, sizeof e2);
    }
    pagoda_runtime_close(rt);
    return st ? st : PAGODA_ERR_INTERNAL;
}

int pagoda_runtime_prepare(pagoda_config *cfg, bool with_frontend, bool print_plan,
                           pagoda_runtime **out, char *err, size_t err_len)
{
    return prepare(cfg, with_frontend, print_plan, false, out, err, err_len);
}

int pagoda_runtime_plan(pagoda_config *cfg, pagoda_memplan *plan, char *err, size_t err_len)
{
    pagoda_runtime *rt = NULL;
    int st = prepare(cfg, false, false, true, &rt, err, err_len);
    if (st) return st;
    *plan = rt->plan;
    pagoda_runtime_close(rt);
    return PAGODA_OK;
}

int pagoda_runtime_open(pagoda_config *cfg, bool with_frontend, bool print_plan,
                        pagoda_runtime **out, char *err, size_t err_len)
{
    int st = pagoda_runtime_prepare(cfg, with_frontend, print_plan, out, err, err_len);
    if (st) return st;
    st = pagoda_runtime_load(*out, false, err, err_len);
    if (st) {
        pagoda_runtime_close(*out);
        *out = NULL;
    }
    return st;
}

int pagoda_runtime_load(pagoda_runtime *rt, bool start, char *err, size_t err_len)
{
    pagoda_engine_opts eo = {
        .max_seq_len = (int32_t)rt->plan.max_seq_len, .n_blocks = (int32_t)rt->plan.kv_blocks,
        .block_size = rt->ec.block_size, .kv_dtype = rt->ec.kv_dtype,
        .swa_kv = rt->ec.swa_kv_full ? PAGODA_SWA_KV_FULL : PAGODA_SWA_KV_WINDOW,
        .no_realign = rt->ec.realign_off,
        .mla_decompress_min = rt->ec.mla_decompress_min,
        .mla_decompress_ctx = rt->ec.mla_decompress_ctx,
        .max_queue = rt->ec.max_queue, .seed = rt->ec.seed,
        .default_max_tokens = rt->ec.default_max_tokens, .temperature = rt->ec.temperature,
        .top_p = rt->ec.top_p, .top_k = rt->ec.top_k, .min_p = rt->ec.min_p,
        .spec_max_draft = rt->ec.spec_max_draft, .spec_ngram = rt->ec.spec_ngram,
        .spec_max_seqs = rt->ec.spec_max_seqs, .spec_draft_model = rt->ec.spec_draft_model,
        .spec_draft_unbatched = rt->ec.spec_draft_batch_off,
    };
    snprintf(eo.speculative, sizeof eo.speculative, "%s", rt->ec.speculative);
    /* read the weights in now, under a progress bar, rather than as page
     * faults inside the first requests */
    const gguf_file *wg = rt->model->gguf;
    /* a rank of a tensor-parallel group reads only its share (forward.c
     * packs it), not the whole file */
    if (!rt->tp)
        (void)pagoda_prefault_weights(wg->map + wg->data_offset, wg->size - wg->data_offset,
                                      "loading weights");
    if (rt->tp) eo.tp = &rt->tp->fwd;
    pagoda_engine *e = NULL;
    int st = pagoda_engine_create(rt->model, &rt->backend, &rt->sched, &rt->kv, &eo, &e, err,
                                  err_len);
    if (rt->tp) {
        char e2[512];
        int ast = pagoda_tp_agree(rt->tp, "loading the weights", st, 0, e2, sizeof e2);
        if (!st && ast) {
            snprintf(err, err_len, "%s", e2);
            st = ast;
            pagoda_engine_free(e);
        }
    }
    if (st) return st;
    if (rt->tp && rt->tp->rank != 0) {
        /* a worker: its engine is never started (pagoda_runtime_work) */
        rt->engine = e;
        return PAGODA_OK;
    }
    if (rt->tp) {
        pagoda_engine_set_tp(e, rt->tp);
        rt->tp_workers_running = true;
    }
    pagoda_engine_set_metrics(e, rt->metrics);
    if (pagoda_engine_set_constraint(e, pagoda_runtime_constraint(rt)) != PAGODA_OK) {
        ERR("out of memory for the constraint buffers");
        pagoda_engine_free(e);
        return PAGODA_ERR_NOMEM;
    }
    st = start ? pagoda_engine_start(e) : PAGODA_OK;
    if (st) {
        ERR("could not start the engine thread");
        pagoda_engine_free(e);
        return st;
    }
    if (start && rt->h_front)
        pagoda_log(PAGODA_LOG_INFO, "serving %s with %s", rt->model->name,
                   pagoda_host_section(rt->h_front));
    /* published last: frontends on other threads read it to decide whether
     * the server is ready */
    pthread_mutex_lock(&rt->load_mu);
    __atomic_store_n(&rt->engine, e, __ATOMIC_RELEASE);
    rt->load_state = 1;
    pthread_cond_broadcast(&rt->load_cv);
    pthread_mutex_unlock(&rt->load_mu);
    return PAGODA_OK;
}

void pagoda_runtime_load_failed(pagoda_runtime *rt)
{
    pthread_mutex_lock(&rt->load_mu);
    rt->load_state = -1;
    pthread_cond_broadcast(&rt->load_cv);
    pthread_mutex_unlock(&rt->load_mu);
}

pagoda_engine *pagoda_runtime_wait_loaded(pagoda_runtime *rt)
{
    pthread_mutex_lock(&rt->load_mu);
    while (rt->load_state == 0) pthread_cond_wait(&rt->load_cv, &rt->load_mu);
    pthread_mutex_unlock(&rt->load_mu);
    return pagoda_runtime_engine(rt);
}

int pagoda_runtime_work(pagoda_runtime *rt, char *err, size_t err_len)
{
    int st = pagoda_runtime_load(rt, false, err, err_len);
    if (st) return st;
    pagoda_log(PAGODA_LOG_INFO, "tensor parallel: rank %d holds its shard (%.1f MiB of weights, "
               "%d of %d KV heads); waiting for rank 0's steps", rt->tp->rank,
               (double)rt->plan.weight_bytes / 1048576.0, rt->model->hp.n_kv_heads / rt->tp->size,
               rt->model->hp.n_kv_heads);
    st = pagoda_engine_tp_worker(rt->engine, rt->tp, err, err_len);
    if (!st)
        pagoda_log(PAGODA_LOG_INFO, "tensor parallel: rank 0 said stop after %lld steps",
                   (long long)rt->tp->steps);
    return st;
}

pagoda_engine *pagoda_runtime_engine(const pagoda_runtime *rt)
{
    return __atomic_load_n(&rt->engine, __ATOMIC_ACQUIRE);
}

void pagoda_runtime_close(pagoda_runtime *rt)
{
    if (!rt) return;
    if (rt->engine) pagoda_engine_stop(rt->engine);
    if (rt->tp_workers_running && rt->comm && !rt->comm->broken) {
        char e[256];
        /* after a signal every rank stops on its own (the launcher signals
         * them all); a stop that cannot be sent then is no failure */
        if (pagoda_tp_send_stop(rt->tp, e, sizeof e))
            pagoda_log(pagoda_runtime_shutting_down(rt) ? PAGODA_LOG_DEBUG : PAGODA_LOG_WARN,
                       "tensor parallel: could not stop the other ranks: %s", e);
    }
    if (rt->p_front) pagoda_plugin_destroy(rt->p_front, rt->front_ctx);
    pagoda_engine_free(rt->engine);
    /* after the engine: its requests' matchers belong to this plugin */
    if (rt->p_con) pagoda_plugin_destroy(rt->p_con, rt->con.ctx);
    if (rt->p_kv) pagoda_plugin_destroy(rt->p_kv, rt->kv.ctx);
    if (rt->p_sched) pagoda_plugin_destroy(rt->p_sched, rt->sched.ctx);
    if (rt->p_backend) pagoda_plugin_destroy(rt->p_backend, rt->backend.ctx);
    pagoda_host_free(rt->h_front);
    pagoda_host_free(rt->h_con);
    pagoda_host_free(rt->h_kv);
    pagoda_host_free(rt->h_sched);
    pagoda_host_free(rt->h_backend);
    pagoda_plugin_free(rt->p_front);
    pagoda_plugin_free(rt->p_con);
    pagoda_plugin_free(rt->p_kv);
    pagoda_plugin_free(rt->p_sched);
    pagoda_plugin_free(rt->p_backend);
    pagoda_metrics_free(rt->metrics);
    free(rt->plan_json);
    pagoda_model_free(rt->model);
    pagoda_tp_free(rt->tp);
    pagoda_comm_close(rt->comm);   /* last: MPI_Finalize */
    pthread_mutex_destroy(&rt->load_mu);
    pthread_cond_destroy(&rt->load_cv);
    free(rt);
}
