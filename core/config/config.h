/*
 * core/config.h: the INI configuration (parsed with inih) and the
 * command line's --set overrides. It holds every key with where it came
 * from (file:line or --set), validates [engine] and the section names when
 * a file is loaded, and validates a plugin's own section [kind.name]
 * against the plugin's descriptor config_keys once the loader has found the
 * plugin (pagoda_config_validate_section). Sections of plugins that are not
 * loaded are only checked for their kind.
 * Not for: finding or loading plugins (plugin_loader.h), the host tables
 * plugins read their section through (host.h).
 *
 * A pagoda_config is immutable once built (load + set calls), so any thread
 * may read it; it must outlive every host table made from it.
 */
#ifndef PAGODA_CORE_CONFIG_H
#define PAGODA_CORE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "pagoda/plugin.h"

typedef struct pagoda_config pagoda_config;

/* Every [engine] key, parsed and validated (see docs/config.md). */
typedef struct pagoda_engine_config {
    char model[4096];          /* resolved path ("" when not set) */
    char backend[64];          /* "cpu" */
    char scheduler[64];        /* "continuous" */
    char kvcache[64];          /* "paged" */
    char frontend[64];         /* "http" */
    char constraint[64];       /* "grammar"; "none": no structured output */
    int32_t max_seq_len;       /* 0: the model's context */
    int32_t kv_dtype;          /* PAGODA_DTYPE_F16 (default), PAGODA_DTYPE_Q8_0 or PAGODA_DTYPE_F32 */
    uint64_t memory_budget;    /* bytes; 0: from device memory ("auto") */
    double gpu_memory_utilization; /* 0.9 */
    uint64_t seed;             /* 0: a random seed per request */
    int64_t kv_cache_tokens;   /* 0: from the memory plan */
    int32_t block_size;        /* 16 */
    bool swa_kv_full;          /* swa_kv = full (default window: local layers keep their window) */
    bool realign_off;          /* realign = off (default on: engine_realign.c) */
    int32_t mla_decompress_min;/* 320: MLA prefill chunks of at least this many tokens run
                                * decompressed; 0: off (forward_mla.h) */
    int32_t mla_decompress_ctx;/* 4096: ... whose context (prefix + chunk) is at most this
                                * (capped by max_seq_len, at least max_batched_tokens) */
    char chat_template[16];    /* auto|chatml|llama2|llama3|mistral|zephyr|gemma */
    int32_t default_max_tokens;/* 256; 0: up to the context */
    float temperature;         /* 1.0 */
    float top_p;               /* 1.0 (off) */
    int32_t top_k;             /* 0 (off) */
    float min_p;               /* 0.0 (off) */
    int32_t max_queue;         /* 1024 */
    int32_t log_level;         /* PAGODA_LOG_INFO */
    int32_t tensor_parallel;   /* 1: one process; N: the model split over N ranks */
    char comm[64];             /* "mpi": the collectives plugin when tensor_parallel > 1 */
    char speculative[16];      /* "off" (default) or a drafter: "ngram", "draft" (docs/speculation.md) */
    int32_t spec_max_draft;    /* 8: draft tokens a sequence verifies a step at most */
    int32_t spec_ngram;        /* 3: the suffix length ngram matches */
    int32_t spec_max_seqs;     /* 4: decoding sequences above which a step drafts nothing */
    char spec_draft_model[4096]; /* the draft drafter's GGUF, resolved ("" when not set) */
    bool spec_draft_batch_off; /* spec_draft_batch = off (default on: one draft pass for all) */
} pagoda_engine_config;

/* Load and check an INI file: syntax, duplicate keys, section names
 * ([engine] or [kind.name] with a known kind), every [engine] key and value.
 * A relative engine.model or plugin `path` is resolved against the file's
 * directory. Returns NULL with a one-line message in err ("FILE:LINE: ...")
 * on any error. The caller frees with pagoda_config_free. */
pagoda_config *pagoda_config_load(const char *path, char *err, size_t err_len);

/* A config with no keys (every default); its directory is ".". */
pagoda_config *pagoda_config_new_empty(void);

/* Apply one "section.key=value" override (the section may hold a dot:
 * "backend.cpu.threads=2"), validated as a file line would be, with
 * "--set" in place of file:line. Replaces a value from the file or an
 * earlier --set. Relative paths given here stay relative to the current
 * directory. Returns PAGODA_OK or PAGODA_ERR_INVALID with err filled. */
int pagoda_config_set(pagoda_config *c, const char *assignment, char *err, size_t err_len);

/* The value of section.key (paths resolved), or NULL when absent. The
 * string lives as long as the config. */
const char *pagoda_config_get(const pagoda_config *c, const char *section, const char *key);

/* Where section.key was set: "FILE:LINE" or "--set", written to buf
 * (returned), or NULL when absent. */
const char *pagoda_config_where(const pagoda_config *c, const char *section, const char *key,
                                char *buf, size_t n);

/* The [engine] key's value if set, else its documented default as text;
 * NULL for a key [engine] does not have. Lives as long as the config. */
const char *pagoda_config_engine_str(const pagoda_config *c, const char *key);

/* Fill *out with every [engine] key (defaults where absent). Returns
 * PAGODA_OK or PAGODA_ERR_INVALID with err filled. */
int pagoda_config_engine(const pagoda_config *c, pagoda_engine_config *out, char *err,
                         size_t err_len);

/* Check every key of [section] against `keys` (NULL-name terminated, or
 * NULL for none) plus the loader's reserved key `path`: an unknown key
 * names where it was set and the closest valid key; a bad value names the
 * key, the value and what is allowed. A section that is absent is valid.
 * Returns PAGODA_OK or PAGODA_ERR_INVALID with err filled. */
int pagoda_config_validate_section(const pagoda_config *c, const char *section,
                                   const pagoda_config_key *keys, char *err, size_t err_len);

/* The file the config came from (NULL for an empty one) and its directory. */
const char *pagoda_config_file(const pagoda_config *c);
const char *pagoda_config_dir(const pagoda_config *c);

/* Iterate the keys in the order they were set: returns false past the end. */
bool pagoda_config_entry(const pagoda_config *c, size_t i, const char **section, const char **key,
                         const char **value);

/* Iterate the sections in the order first seen: its name and the line of
 * its header (0 when only --set named it); false past the end. */
bool pagoda_config_section_at(const pagoda_config *c, size_t i, const char **name, int *line);

void pagoda_config_free(pagoda_config *c);
/* A hash of every key and value, in the order they were given (tensor
 * parallelism's ranks compare it at start). */
uint64_t pagoda_config_hash(const pagoda_config *c);

/* ---- value parsers, shared with host.c (return 0, or -1 on bad text) */

/* Bytes: "4096", "512K", "512M", "8G", "1.5G", "1T" (binary multiples; an
 * optional trailing "B"/"iB" is accepted: "8GiB"). */
int pagoda_parse_size(const char *s, uint64_t *out);
/* Decimal int64, the whole string. */
int pagoda_parse_int(const char *s, int64_t *out);
/* A finite double, the whole string. */
int pagoda_parse_float(const char *s, double *out);
/* true/false, 1/0, yes/no, on/off (any case). */
int pagoda_parse_bool(const char *s, bool *out);

/* Check `value` against one key's type and bounds. Returns 0, or -1 with
 * what is allowed in why ("an integer from 1 to 1024"). */
int pagoda_config_check_value(const pagoda_config_key *k, const char *value, char *why, size_t n);

/* Edit distance (with adjacent transpositions), and the candidate closest
 * to word, a candidate that word starts like ranking close (NULL when
 * n == 0; the first of equals wins). */
size_t pagoda_levenshtein(const char *a, const char *b);
const char *pagoda_closest(const char *word, const char *const *cands, size_t n);

#endif /* PAGODA_CORE_CONFIG_H */
