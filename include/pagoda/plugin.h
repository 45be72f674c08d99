/*
 * pagoda/plugin.h: what every plugin exports. A plugin is a shared object
 * with one exported symbol, pagoda_plugin_entry, returning a static const
 * descriptor. The core checks, in this order: dlopen, the entry symbol, the
 * ABI version, struct sizes, kind and name against the config, required
 * slots. Not for: the ops of each kind (backend.h, scheduler.h, kvcache.h,
 * frontend.h, constraint.h, comm.h) or the host table (host.h).
 *
 * Compatibility rule: same PAGODA_ABI_MAJOR, and the plugin's minor <= the
 * host's minor. Structs only grow at their end; every struct starts with
 * struct_size, and the host copies min(struct_size, sizeof) into a zeroed
 * struct of its own, so an older plugin's missing tail reads as NULL/0.
 */
#ifndef PAGODA_PLUGIN_H
#define PAGODA_PLUGIN_H

#include "pagoda/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PAGODA_ABI_MAJOR 1
/* Minor history: 1.0 the first ABI; 1.1 backend ops geglu, scale and
 * attention_ext (pagoda_attn_params: sliding windows), for Gemma 3, and the
 * request's prompt_logprobs / prompt_logprobs_from / score_only with the
 * PROMPT event (host.h), for prompt scoring and perplexity, and the
 * constraint kind (constraint.h) with the request's constraint fields and
 * the host's check_constraint, for structured output; 1.2 inspection:
 * the KV policies' optional inspect op, the request's request_id and trace,
 * the event's trace fields and the host's inspect_json; 1.3 the Q8_0 KV
 * layout (pagoda_kv_layout, pagoda_kv_head_bytes: an 8-bit KV cache a
 * backend opts into through info.kv_types) and the optional backend op
 * matmul_multi (several matmuls over one input: Q/K/V, gate/up); 1.4 the
 * comm kind (comm.h): collectives for tensor parallelism (comm-mpi,
 * comm-nccl); 1.5 mixture-of-experts: the optional backend ops
 * matmul_experts (expert matmuls over a 3-D weight, rows grouped by
 * expert) and moe_combine (the routed rows' weighted sum); 1.6 the
 * frontend's optional interrupt op (Ctrl-C taken by terminal chat); 1.7
 * the latent KV layout (pagoda_kv_layout.kind PAGODA_KV_LATENT: one row a
 * slot that is both key and value, for multi-head latent attention), which
 * a backend opts into through info.kv_kinds; 1.8 gpt-oss: attention sinks
 * (pagoda_attn_params.sinks, honoured where pagoda_backend_info.attn_sinks
 * says so) and the optional backend op swiglu_oai (the clamped SwiGLU of
 * gpt-oss's experts); 1.9 the MXFP4 weight type (PAGODA_DTYPE_MXFP4 = 39,
 * types.h: gpt-oss's experts), a bit of info.weight_types a backend opts
 * into; 1.10 the host's chat_render_opts: a request's template options
 * (pagoda_chat_options: enable_thinking, reasoning_effort) reach the chat
 * template, and speculative decoding: the request's spec_max_draft and the
 * engine stats' spec_* counters (host.h); 1.11 the host's kv_block_bytes, kv_read_block, kv_write_block and
 * kv_fingerprint (a KV policy's disk tier) and pagoda_kv_stats' tier
 * counters; 1.12 the optional backend op buffer_address (a buffer's address
 * in the backend's memory, so a comm plugin of that memory, NCCL on GPU
 * memory, reduces tensor-parallel partial sums in place); 1.13 the KV
 * policies' optional shrink op (blocks grown for rejected draft tokens go
 * back to the pool); 1.14 the KV policy's optional prefetch op (read a
 * waiting request's prefix back from a slower tier ahead of its admit) and
 * the read-ahead counters in pagoda_kv_stats and pagoda_engine_stats;
 * 1.15 (repackplan block) the optional backend ops weight_extra_bytes and
 * weight_extra_held (what a backend holds beside a weight, e.g. the CPU
 * backend's repacked copy, counted in the memory plan); 1.16 (harmony)
 * pagoda_constraint_vocab.control (which tokens are control tokens that
 * write markup, for grammars' <token> references); 1.17 (tcfam)
 * pagoda_model_info.chat_template (the chat template family's name). */
#define PAGODA_ABI_MINOR 17

#define PAGODA_PLUGIN_ENTRY_SYMBOL "pagoda_plugin_entry"

typedef enum pagoda_plugin_kind {
    PAGODA_KIND_BACKEND = 1,
    PAGODA_KIND_SCHEDULER = 2,
    PAGODA_KIND_KVCACHE = 3,
    PAGODA_KIND_FRONTEND = 4,
    PAGODA_KIND_CONSTRAINT = 5,  /* minor 1: structured output (constraint.h) */
    PAGODA_KIND_COMM = 6         /* minor 4: collectives, tensor parallelism (comm.h) */
} pagoda_plugin_kind;

static inline const char *pagoda_kind_name(int kind)
{
    switch (kind) {
    case PAGODA_KIND_BACKEND: return "backend";
    case PAGODA_KIND_SCHEDULER: return "scheduler";
    case PAGODA_KIND_KVCACHE: return "kvcache";
    case PAGODA_KIND_FRONTEND: return "frontend";
    case PAGODA_KIND_CONSTRAINT: return "constraint";
    case PAGODA_KIND_COMM: return "comm";
    default: return "unknown";
    }
}

struct pagoda_host;

/* Types of a plugin's config keys. */
typedef enum pagoda_key_type {
    PAGODA_KEY_STRING = 1,
    PAGODA_KEY_INT = 2,    /* int64, decimal */
    PAGODA_KEY_FLOAT = 3,
    PAGODA_KEY_BOOL = 4,   /* true/false/1/0/yes/no/on/off */
    PAGODA_KEY_SIZE = 5    /* bytes, with optional K/M/G/T (binary) suffix */
} pagoda_key_type;

/* One key a plugin accepts in its own section [kind.name]. The core
 * validates the section against this list before create(): an unknown key
 * is an error naming file:line and the closest valid key, a value that does
 * not parse as `type` or falls outside [min, max] names the key, the value
 * and what is allowed. A list ends with an entry whose name is NULL. */
typedef struct pagoda_config_key {
    const char *name;
    int32_t type;            /* pagoda_key_type */
    const char *default_str; /* shown by `pagoda plugins -v` and the docs */
    double min, max;         /* numeric bounds, used when min < max */
    const char *help;        /* one line */
} pagoda_config_key;

/*
 * The descriptor. Static and const in the plugin; the host never writes it.
 *
 *   probe  [any thread] optional. How well this plugin can run here, 0..100;
 *          0 means it cannot, and `why` says why ("no CUDA driver: ...").
 *          No side effects beyond looking. NULL means 100.
 *   create [main thread] required. Make one instance and store it in *ctx;
 *          the plugin owns it, and the host hands it back to every op and
 *          to destroy(). `host` is valid until destroy() returns and carries
 *          this instance's config section. On failure return an error
 *          status, leave nothing allocated, and write a one-line reason to
 *          err (it is NUL-terminated by the host if the plugin forgets);
 *          destroy() is then not called.
 *   destroy [main thread] required. Free everything create() made; called
 *          once per successful create(), never with a NULL ctx.
 *   ops    required. Points to the kind's ops table (pagoda_backend_ops,
 *          ...), which starts with its own struct_size. The host copies
 *          the table at load time, so it may be static const.
 *
 * name is required (non-empty, equal to the INI's value); version and
 * description are optional (NULL prints as "-" / "(no description)").
 * Every string and the config_keys list are read while the plugin is
 * loaded and must stay valid until it is unloaded: static storage.
 */
typedef struct pagoda_plugin_desc {
    size_t struct_size;       /* sizeof(pagoda_plugin_desc) as the plugin saw it */
    uint32_t abi_major;       /* PAGODA_ABI_MAJOR the plugin was built with */
    uint32_t abi_minor;       /* PAGODA_ABI_MINOR the plugin was built with */
    int32_t kind;             /* pagoda_plugin_kind */
    const char *name;         /* the value used in the INI: "cpu", "paged" */
    const char *version;      /* the plugin's own version, free form */
    const char *description;  /* one line */
    const pagoda_config_key *config_keys; /* NULL-name terminated, or NULL for none */
    int (*probe)(char *why, size_t why_len);
    int (*create)(const struct pagoda_host *host, void **ctx, char *err, size_t err_len);
    void (*destroy)(void *ctx);
    const void *ops;
} pagoda_plugin_desc;

typedef const pagoda_plugin_desc *(*pagoda_plugin_entry_fn)(uint32_t host_abi_major,
                                                            uint32_t host_abi_minor);

#if defined(_WIN32)
#define PAGODA_EXPORT __declspec(dllexport)
#else
#define PAGODA_EXPORT __attribute__((visibility("default")))
#endif

/* Writes the one exported symbol. Use once per plugin, at file scope:
 *     static const pagoda_plugin_desc my_desc = { ... };
 *     PAGODA_PLUGIN(my_desc)
 * The entry hands the descriptor over whatever the host's version; the
 * host does the version check so that its refusal can name both sides. */
#define PAGODA_PLUGIN(desc)                                                     \
    PAGODA_EXPORT const pagoda_plugin_desc *pagoda_plugin_entry(uint32_t host_abi_major, \
                                                                uint32_t host_abi_minor) \
    {                                                                           \
        (void)host_abi_major;                                                   \
        (void)host_abi_minor;                                                   \
        return &(desc);                                                         \
    }

/* Fills the leading fields of a descriptor. */
#define PAGODA_DESC_HEADER(kind_) \
    .struct_size = sizeof(pagoda_plugin_desc), .abi_major = PAGODA_ABI_MAJOR, \
    .abi_minor = PAGODA_ABI_MINOR, .kind = (kind_)

#ifdef __cplusplus
}
#endif
#endif /* PAGODA_PLUGIN_H */
