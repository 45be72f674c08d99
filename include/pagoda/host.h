/*
 * pagoda/host.h: the table the core hands each plugin instance at create().
 * It is the only way a plugin reaches the core: logging, its own config
 * section, error reporting, and (for frontends) the engine: submit, cancel,
 * tokenize, chat templates, stats, the memory plan, metrics.
 * Not for: ops a plugin implements (see the per-kind headers).
 *
 * Every pointer in the table stays valid until the plugin's destroy()
 * returns. Slots marked "minor N" were added in ABI minor N; a plugin built
 * for an older minor sees a shorter struct_size and must not call them.
 * Which slots are set: log, config_*, engine_config, error and free for
 * every kind; kv_copy_blocks and (1.11) kv_block_bytes, kv_read_block,
 * kv_write_block, kv_fingerprint for every kind (meant for KV policies); the
 * engine slots (submit .. shutting_down, check_constraint, inspect_json)
 * for frontends only, NULL for the other kinds. All of them are provided by
 * the core: a plugin never needs a fallback for a slot its kind is given.
 */
#ifndef PAGODA_HOST_H
#define PAGODA_HOST_H

#include <stdarg.h>
#include <stddef.h>
#include "pagoda/types.h"
#include "pagoda/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- requests */

/* Sampling and limits of one request. pagoda_request_defaults() fills the
 * documented defaults; a frontend then sets what the client gave. */
typedef struct pagoda_request {
    size_t struct_size;
    const char *prompt;          /* UTF-8 text; or NULL when prompt_tokens is set */
    size_t prompt_len;           /* bytes of prompt */
    const int32_t *prompt_tokens;/* token ids, used when prompt == NULL */
    int32_t n_prompt_tokens;
    bool add_special;            /* add BOS (and the model's other specials) when tokenizing */
    bool parse_special;          /* text like "<|im_end|>" becomes its special token */
    int32_t max_tokens;          /* <= 0 (not given): [engine] default_max_tokens, capped
                                    to what the context leaves; > 0: exactly this limit,
                                    refused if prompt + max_tokens exceeds the context */
    float temperature;           /* 0: greedy */
    int32_t top_k;               /* <= 0: off */
    float top_p;                 /* 1: off */
    float min_p;                 /* 0: off */
    float repetition_penalty;    /* 1: off */
    float presence_penalty;      /* 0: off */
    float frequency_penalty;     /* 0: off */
    uint64_t seed;
    bool has_seed;               /* false: the engine draws a seed */
    const char *const *stop;     /* stop strings, never part of the output */
    int32_t n_stop;
    bool ignore_eos;
    int32_t priority;            /* lower first, with the priority scheduler */
    const char *cache_salt;      /* NULL or a string isolating prefix-cache blocks */
    int32_t logprobs;            /* report the chosen token's logprob and this many top ones (0: none, -1: off) */
    const int32_t *stop_token_ids; /* extra token ids that end generation (e.g. <|im_end|>) */
    int32_t n_stop_token_ids;
    /* ---- minor 1: scoring the prompt */
    int32_t prompt_logprobs;     /* -1 (default): off. N >= 0: a PROMPT event per prompt
                                    token, with its log-probability given the tokens before
                                    it and the N (<= PAGODA_MAX_TOP_LOGPROBS) most likely
                                    tokens at its position. Such a request neither reads
                                    nor feeds the prefix cache (a cached prefix has no logits) */
    int32_t prompt_logprobs_from;/* the first prompt index to score (default 0: every token);
                                    the logits of the positions before it are never computed */
    bool score_only;             /* generate nothing: the FINAL (finish reason length,
                                    0 completion tokens) follows the prompt's PROMPT events;
                                    the prompt may then fill the whole context */
    /* ---- minor 1: structured output (pagoda/constraint.h) */
    int32_t constraint_type;     /* pagoda_constraint_type; 0 (default): unconstrained */
    const char *constraint;      /* the spec's text: a JSON Schema, a grammar, a regex, a
                                    JSON list of choices (NULL for json_object) */
    size_t constraint_len;       /* bytes of constraint */
    bool constraint_strict;      /* JSON Schema: a keyword the engine does not enforce is
                                    refused (PAGODA_ERR_INVALID naming it) */
    /* ---- minor 2: inspection */
    const char *request_id;      /* NULL, or the frontend's name for the request ("cmpl-..."):
                                    inspection shows it beside the sequence (copied; at most
                                    63 bytes are kept) */
    bool trace;                  /* every TOKEN event that carries a token also carries how it
                                    was made: its step, that step's batch, the sequence's KV
                                    after it and at least 5 top candidates (pagoda_event) */
    /* ---- ABI 1.10: speculative decoding (docs/speculation.md) */
    int32_t spec_max_draft;      /* 0 (default): the server's [engine] speculative and
                                    spec_max_draft; -1: decode without drafts; N > 0: at most
                                    N draft tokens a step (more than the server's limit is its
                                    limit; refused when the server has speculation off or N
                                    is not below the context). The output is the same either
                                    way; only the speed differs */
} pagoda_request;

#define PAGODA_MAX_TOP_LOGPROBS 20

typedef enum pagoda_finish_reason {
    PAGODA_FINISH_NONE = 0,      /* not finished (token events) */
    PAGODA_FINISH_STOP = 1,      /* EOS, a stop token or a stop string */
    PAGODA_FINISH_LENGTH = 2,    /* max_tokens or the context */
    PAGODA_FINISH_CANCELLED = 3, /* cancel() or shutdown */
    PAGODA_FINISH_ERROR = 4
} pagoda_finish_reason;

static inline const char *pagoda_finish_reason_str(int r)
{
    switch (r) {
    case PAGODA_FINISH_STOP: return "stop";
    case PAGODA_FINISH_LENGTH: return "length";
    case PAGODA_FINISH_CANCELLED: return "cancelled";
    case PAGODA_FINISH_ERROR: return "error";
    default: return "none";
    }
}

typedef struct pagoda_usage {
    int32_t prompt_tokens;
    int32_t completion_tokens;
    int32_t cached_tokens;       /* prompt tokens served from the prefix cache */
} pagoda_usage;

typedef struct pagoda_timings {
    double queue_ms;             /* arrival to first scheduled */
    double ttft_ms;              /* arrival to first token */
    double total_ms;             /* arrival to final event */
    double tpot_ms;              /* mean time per output token after the first */
    int32_t n_preemptions;
} pagoda_timings;

typedef enum pagoda_event_type {
    PAGODA_EVENT_TOKEN = 1,      /* new output text (may be empty while a UTF-8
                                    character or a possible stop string is held back) */
    PAGODA_EVENT_FINAL = 2,      /* exactly once per accepted request, last */
    PAGODA_EVENT_PROMPT = 3      /* minor 1: one prompt token's score, only for a request with
                                    prompt_logprobs >= 0 (see pagoda_event.position) */
} pagoda_event_type;

typedef struct pagoda_top_logprob {
    int32_t token;
    float logprob;
} pagoda_top_logprob;

/* What a request's callback receives. Everything it points to is valid
 * only during the callback.
 *
 * PROMPT events (minor 1) come before any TOKEN event: one per prompt index
 * from prompt_logprobs_from to the prompt's end, in order, each exactly once
 * (a sequence preempted and recomputed does not repeat them). token is the
 * prompt token (position 0 is the BOS the engine added, when it added one),
 * position its index, logprob = log p(token | the tokens before it) under
 * the raw model distribution (temperature 1, no penalties), and top the
 * n_top = prompt_logprobs most likely tokens there. Position 0 has nothing
 * before it: logprob is NaN and n_top 0 (OpenAI's null). text is empty. */
typedef struct pagoda_event {
    size_t struct_size;
    uint64_t id;
    int32_t type;                /* pagoda_event_type */
    const char *text;            /* new text since the last event (UTF-8, whole characters) */
    size_t text_len;
    int32_t token;               /* the token sampled (TOKEN events), else -1 */
    float logprob;               /* its log-probability, when logprobs >= 0 */
    int32_t n_top;               /* entries in top[] */
    const pagoda_top_logprob *top;
    int32_t finish_reason;       /* FINAL: pagoda_finish_reason */
    const char *error;           /* FINAL with PAGODA_FINISH_ERROR: why */
    pagoda_usage usage;          /* FINAL */
    pagoda_timings timings;      /* FINAL */
    /* ---- minor 1 */
    int32_t position;            /* PROMPT: the token's index in the prompt; else -1 */
    /* ---- minor 2: a traced request's TOKEN events with token >= 0 (else step is 0).
     * With trace, logprob is set and n_top >= 5 whatever logprobs asked for
     * (a frontend shows the client no more than it asked for). */
    uint64_t step;               /* the engine step whose logits gave this token (1, 2, ...) */
    int32_t step_seqs;           /* sequences in that step's batch */
    int32_t step_tokens;         /* tokens in that step's batch (prefill and decode) */
    int32_t kv_tokens;           /* this sequence's positions with K and V in the cache after
                                    that step: every token before this one (the next step
                                    writes this one's) */
    int32_t n_blocks;            /* the sequence's block table then: n_blocks ids */
    const int32_t *blocks;
    /* ---- ABI 1.11: FINAL: of usage.cached_tokens, the tokens the KV policy
     * read back from its slower tier (the prefix policy's disk tier) */
    int32_t tier_cached_tokens;
} pagoda_event;

/* [engine thread] Called for each event of a request. Must not block or
 * call back into the engine except cancel(). */
typedef void (*pagoda_event_cb)(void *user, const pagoda_event *ev);

/* ----------------------------------------------------------- engine views */

typedef struct pagoda_model_info {
    size_t struct_size;
    char name[128];              /* general.name or the file name */
    char arch[32];               /* "llama", "qwen2", ... */
    int32_t n_ctx;               /* max_seq_len in use */
    int32_t n_vocab;
    int32_t bos, eos;            /* -1 when absent */
    int64_t n_params;
    bool has_chat_template;
    /* ---- ABI 1.17: the chat template family the engine renders with, by
     * its engine.chat_template name ("chatml", "qwen3-coder", "glm4", ...;
     * docs/config.md), so a frontend knows what its rendered probe cannot
     * show (Qwen3-Coder's one-turn rendering is ChatML's). A host older
     * than 1.17 leaves it out: struct_size then ends before it. */
    char chat_template[24];
} pagoda_model_info;

typedef struct pagoda_engine_stats {
    size_t struct_size;
    int32_t running, waiting;
    int64_t kv_total_blocks, kv_used_blocks, kv_free_blocks, kv_cached_blocks;
    int32_t kv_block_size;
    int64_t prefix_query_tokens, prefix_hit_tokens;
    int64_t prompt_tokens_total, generation_tokens_total;
    int64_t requests_finished_total, preemptions_total, steps_total;
    bool ready;                  /* weights loaded, serving */
    /* ---- ABI 1.10: speculative decoding */
    char spec_drafter[16];       /* "" when off, else the drafter's name ("ngram") */
    int64_t spec_drafted_total;  /* draft tokens verified */
    int64_t spec_accepted_total; /* of those, the ones that agreed with the model */
    int64_t spec_verify_steps_total; /* sequence-steps that verified drafts */
    /* ---- ABI 1.11: the KV policy's slower tier (pagoda_kv_stats' tier_*;
     * all 0 without one) */
    bool tier_on;
    int64_t tier_hit_tokens;     /* of prefix_hit_tokens, read back from the tier */
    int64_t tier_blocks, tier_bytes;
    int64_t tier_written_blocks, tier_dropped_blocks, tier_bad_blocks, tier_evicted_blocks;
    /* ---- ABI 1.14: read-ahead while requests wait (pagoda_kv_stats') */
    int64_t tier_prefetched_blocks, tier_prefetch_hit_blocks;
    int64_t tier_ram_blocks, tier_ram_bytes, tier_ram_hit_blocks; /* the host-RAM level */
    int64_t tier_restore_us;     /* time admit spent reading blocks back, ever */
} pagoda_engine_stats;

typedef struct pagoda_chat_message {
    const char *role;            /* "system", "user", "assistant", ... */
    const char *content;
} pagoda_chat_message;

/* (ABI 1.10) What a request passes to the chat template beside its
 * messages (Jinja's chat_template_kwargs). Zero-initialise, set
 * struct_size, then the fields wanted. */
typedef struct pagoda_chat_options {
    size_t struct_size;
    int32_t enable_thinking;      /* -1 the template's default, 0 off (Qwen3's empty think
                                   * block, DeepSeek-R1's closed one), 1 on */
    const char *reasoning_effort; /* "low", "medium", "high" (gpt-oss harmony); NULL or "":
                                   * the system prompt's "Reasoning:" line, else medium */
} pagoda_chat_options;

/* --------------------------------------------------------------- the host */

typedef struct pagoda_host {
    size_t struct_size;
    uint32_t abi_major, abi_minor;   /* the host's ABI */
    void *host_ctx;                  /* the core's; opaque to plugins */

    /* [any thread] Log a line with the plugin's name in front. */
    void (*log)(const struct pagoda_host *h, int level, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

    /* [any thread] Typed lookup of a key in this plugin's own section
     * ([kind.name]); returns the default given here when the key is absent
     * (config_str returns dflt itself then). Values were validated against
     * the plugin's config_keys at load. A returned string is owned by the
     * core and lives as long as the host table; do not free it. */
    const char *(*config_str)(const struct pagoda_host *h, const char *key, const char *dflt);
    int64_t (*config_int)(const struct pagoda_host *h, const char *key, int64_t dflt);
    double (*config_float)(const struct pagoda_host *h, const char *key, double dflt);
    bool (*config_bool)(const struct pagoda_host *h, const char *key, bool dflt);
    /* [any thread] Engine-wide keys of [engine] (e.g. "max_seq_len"), as
     * strings: the configured value or the key's default; NULL for a key
     * [engine] does not have. Owned by the core; do not free. */
    const char *(*engine_config)(const struct pagoda_host *h, const char *key);

    /* [any thread] Record an error message for the current call (the last
     * one recorded wins; the format is copied); the core prints or returns
     * it. Returns `status` so one can write
     *     return h->error(h, PAGODA_ERR_INVALID, "...", ...); */
    int (*error)(const struct pagoda_host *h, int status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

    /* ---- for KV-cache policies [engine thread] */
    /* Copy KV blocks src[i] -> dst[i] in every layer (through the backend's
     * copy_blocks, or its fallback). PAGODA_ERR_STATE before the engine
     * serves (so not from init()). The arrays need only live during the
     * call. */
    int (*kv_copy_blocks)(const struct pagoda_host *h, const int32_t *src, const int32_t *dst,
                          int32_t n);

    /* ---- for frontends: the engine. NULL for other kinds. */

    /* [any thread] Queue a request. Tokenizes on the caller's thread and
     * answers at once (except while the server still loads the weights:
     * then it first waits for them, and answers PAGODA_ERR_STATE if the
     * load failed): PAGODA_OK with *id, or an error with a reason in err
     * (prompt longer than the context, queue full = PAGODA_ERR_NOSPACE,
     * bad parameter = PAGODA_ERR_INVALID, shutting down = PAGODA_ERR_STATE).
     * On success `cb` gets events on the engine thread, and exactly one
     * FINAL. The request's pointers need only live during the call. */
    int (*submit)(const struct pagoda_host *h, const pagoda_request *req, pagoda_event_cb cb,
                  void *user, uint64_t *id, char *err, size_t err_len);
    /* [any thread] Cancel a request; its FINAL event (reason cancelled)
     * follows soon on the engine thread unless it already finished.
     * PAGODA_ERR_NOT_FOUND if the id is not live. */
    int (*cancel)(const struct pagoda_host *h, uint64_t id);
    /* [any thread] Fill a request with defaults (including the config's
     * [engine] sampling keys); also while the weights load. The caller then
     * sets struct_size and what the client gave. */
    void (*request_defaults)(const struct pagoda_host *h, pagoda_request *req);

    /* [any thread] Text to ids. Writes at most cap ids into the caller's
     * array, sets *n to the full count (call again with a bigger array if
     * *n > cap). */
    int (*tokenize)(const struct pagoda_host *h, const char *text, size_t len, bool add_special,
                    bool parse_special, int32_t *ids, int32_t cap, int32_t *n);
    /* [any thread] Ids to text. Returns a string the caller frees with
     * h->free, NULL on a bad id (error reported). */
    char *(*detokenize)(const struct pagoda_host *h, const int32_t *ids, int32_t n);
    /* [any thread] The text of one token, as the tokenizer outputs it
     * (may be a partial UTF-8 sequence). Caller frees with h->free. */
    char *(*token_text)(const struct pagoda_host *h, int32_t id);
    /* [any thread] Render chat messages with the model's template, adding the
     * assistant turn's opening when add_generation_prompt. The caller frees
     * *out with h->free. The stop token ids the template implies (e.g.
     * <|im_end|>) are written to stop_ids (cap entries, *n_stop set), may be NULL. */
    int (*chat_render)(const struct pagoda_host *h, const pagoda_chat_message *msgs, int32_t n,
                       bool add_generation_prompt, char **out, int32_t *stop_ids, int32_t cap,
                       int32_t *n_stop);
    /* [any thread] Frees what detokenize, token_text, chat_render,
     * memory_plan_json, metrics_text and inspect_json returned. NULL is a
     * no-op. */
    void (*free)(const struct pagoda_host *h, void *p);

    /* [any thread] Fill the caller's *out (struct_size set by the host).
     * ABI 1.0 writes the whole struct as this header defines it: pass a
     * struct of this header's size. stats() works while the weights load
     * and reports ready = false (all counts 0) until the engine serves. */
    int (*model_info)(const struct pagoda_host *h, pagoda_model_info *out);
    int (*stats)(const struct pagoda_host *h, pagoda_engine_stats *out);
    /* [any thread] The memory plan as JSON / the Prometheus exposition text.
     * Caller frees with h->free; NULL when not available. */
    char *(*memory_plan_json)(const struct pagoda_host *h);
    char *(*metrics_text)(const struct pagoda_host *h);
    /* [any thread] Has a shutdown been asked for (SIGINT/SIGTERM)? */
    bool (*shutting_down)(const struct pagoda_host *h);

    /* ---- minor 1 */
    /* [any thread] Compile a structured-output spec as submit() would and
     * say whether it is valid, without submitting anything: PAGODA_OK, or
     * PAGODA_ERR_INVALID with err naming the problem (a bad schema, a
     * grammar that accepts nothing, a limit), PAGODA_ERR_UNSUPPORTED when
     * structured output is off ([engine] constraint = none). For a
     * frontend that must refuse a bad spec it may not submit (tools with
     * tool_choice "auto"). The engine caches compiled specs, so a later
     * submit of the same spec does not compile it again. */
    int (*check_constraint)(const struct pagoda_host *h, int32_t type, const char *text, size_t len,
                            bool strict, char *err, size_t err_len);
    /* ---- minor 2: inspection (frontends) */
    /* [any thread but the engine's: never from an event callback, which
     * would wait for itself] The engine as it stands between two steps, as
     * one JSON object (docs/http-api.md, GET /v1/inspect): KV blocks with their
     * states, references and sequences, the live sequences, the last 256
     * steps, the memory plan and what is in use now. The engine thread takes
     * the snapshot at its next step boundary (concurrent callers share one)
     * and this thread formats it, so the caller waits at most one step.
     * Caller frees with h->free; NULL while the weights load or when out
     * of memory. */
    char *(*inspect_json)(const struct pagoda_host *h);
    /* ---- ABI 1.10: template options (frontends) */
    /* [any thread] chat_render with the request's template options (opts
     * may be NULL: chat_render's rendering). A bad option (an unknown
     * reasoning_effort) is PAGODA_ERR_INVALID, reported naming it. A host
     * older than 1.10 has no such slot: check struct_size covers it
     * (PAGODA_HOST_HAS) before reading it, and call chat_render then. */
    int (*chat_render_opts)(const struct pagoda_host *h, const pagoda_chat_message *msgs, int32_t n,
                            const pagoda_chat_options *opts, bool add_generation_prompt, char **out,
                            int32_t *stop_ids, int32_t cap, int32_t *n_stop);

    /* ---- ABI 1.11: moving KV blocks out of the pool and back (meant for
     * KV-cache policies with a slower tier; [engine thread]). */
    /* Bytes of one block's KV as kv_read_block writes them: every layer, K
     * then V. 0 (with the reason recorded as this call's error) when blocks
     * cannot leave the pool and come back whole: before the engine serves,
     * under tensor parallelism (each rank holds its heads), or with a
     * sliding-window model's pool (its local layers live in another pool). */
    size_t (*kv_block_bytes)(const struct pagoda_host *h);
    /* Copy block `block`'s KV out to dst / in from src (n = kv_block_bytes). */
    int (*kv_read_block)(const struct pagoda_host *h, int32_t block, void *dst, size_t n);
    int (*kv_write_block)(const struct pagoda_host *h, int32_t block, const void *src, size_t n);
    /* One line naming everything a block's bytes depend on (the model file,
     * the KV dtype and layout, the block size); blocks kept under another
     * fingerprint must never be read back. Owned by the core; NULL before
     * the engine serves. */
    const char *(*kv_fingerprint)(const struct pagoda_host *h);

    /* ---- ABI 1.14: where the KV pool lives, for a policy's tiers. */
    /* [engine thread, once the engine serves] true when the pool is device
     * memory (a GPU's), so host RAM can be a tier of its own in front of
     * the disk; false when it is host RAM already (the CPU backend). A
     * host older than 1.14 has no such slot (PAGODA_HOST_HAS): take false. */
    bool (*kv_on_device)(const struct pagoda_host *h);
} pagoda_host;

/* Whether host h (of any minor) has the slot `field` set: its struct_size
 * covers the slot and the slot is not NULL. */
#define PAGODA_HOST_HAS(h, field)                                                                  \
    ((h)->struct_size >= offsetof(pagoda_host, field) + sizeof((h)->field) && (h)->field != NULL)

#ifdef __cplusplus
}
#endif
#endif /* PAGODA_HOST_H */
