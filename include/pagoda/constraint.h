/*
 * pagoda/constraint.h: constraint engines (structured output). A
 * constraint engine compiles a spec (a JSON Schema, a grammar, a regular
 * expression, a list of choices) and then, for one request, says which
 * tokens may come next (a token mask), follows the tokens the sampler
 * picked, and says whether the output may end here. The engine applies
 * the mask to the logits before temperature, top-k and top-p, so every
 * output a constrained request finishes is in the spec's language.
 *
 * The core loads one constraint plugin ([engine] constraint = NAME;
 * "none" turns structured output off) and hands it the vocabulary once
 * (set_vocab) before serving. A request's spec is compiled on the
 * submitting thread, so a bad spec is refused by submit() at once (the
 * HTTP 400) and never reaches the engine thread.
 *
 * End of generation is the core's: the plugin's mask covers the tokens
 * that write text (set_vocab lists each token's bytes; tokens that write
 * nothing, such as <|im_end|>, are never in a mask). Where is_complete()
 * is true, the core also allows the request's end tokens (EOS, the chat
 * template's stop tokens); where it is true and the mask is empty, the
 * request ends (finish reason "stop") without sampling.
 *
 * Threads and ownership, per slot below. A "compiled" spec and a
 * "matcher" (one request's position in it) are the plugin's objects; the
 * core holds them as opaque pointers and frees each with its free slot,
 * from any thread. A compiled spec may be freed while matchers made from
 * it live (a matcher keeps what it needs).
 *
 * ABI: the ops table starts with struct_size; slots are only appended,
 * each commented with the minor that added it; the core copies
 * min(struct_size, sizeof) into a zeroed table and checks an optional slot
 * for NULL before calling it. Not for: where the mask is applied (the
 * core's sampler step) or the HTTP fields that make a spec (the frontend).
 */
#ifndef PAGODA_CONSTRAINT_H
#define PAGODA_CONSTRAINT_H

#include "pagoda/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a spec's text is. */
typedef enum pagoda_constraint_type {
    PAGODA_CONSTRAINT_NONE = 0,
    PAGODA_CONSTRAINT_JSON_OBJECT = 1, /* any JSON object; text ignored (may be NULL) */
    PAGODA_CONSTRAINT_JSON_SCHEMA = 2, /* text: a JSON Schema document */
    PAGODA_CONSTRAINT_GRAMMAR = 3,     /* text: a GBNF-style grammar (docs/structured-output.md) */
    PAGODA_CONSTRAINT_REGEX = 4,       /* text: a regular expression the whole output matches */
    PAGODA_CONSTRAINT_CHOICE = 5       /* text: a JSON array of strings; the output is one of them */
} pagoda_constraint_type;

static inline const char *pagoda_constraint_type_name(int t)
{
    switch (t) {
    case PAGODA_CONSTRAINT_JSON_OBJECT: return "json_object";
    case PAGODA_CONSTRAINT_JSON_SCHEMA: return "json_schema";
    case PAGODA_CONSTRAINT_GRAMMAR: return "grammar";
    case PAGODA_CONSTRAINT_REGEX: return "regex";
    case PAGODA_CONSTRAINT_CHOICE: return "choice";
    default: return "none";
    }
}

/* The vocabulary, as set_vocab sees it. Valid only during the call: the
 * plugin copies what it keeps. */
typedef struct pagoda_constraint_vocab {
    size_t struct_size;
    int32_t n_vocab;
    const char *const *bytes;   /* [n_vocab] the bytes token t appends to the output
                                   (not NUL-terminated; may be a partial UTF-8 character) */
    const uint32_t *len;        /* [n_vocab] their lengths; 0 for a token that writes
                                   nothing (control, end of generation): never allowed */
    /* ABI 1.16: [n_vocab] nonzero for a control token that writes its markup
     * text (len > 0 but not text the tokenizer gives for those bytes, e.g.
     * harmony's <|channel|>), so a grammar can ask for the token itself
     * where the markup goes (docs/structured-output.md); NULL: none known.
     * Read only when struct_size covers it. */
    const uint8_t *control;
} pagoda_constraint_vocab;

/* One spec. Its pointers need only live during compile(). */
typedef struct pagoda_constraint_spec {
    size_t struct_size;
    int32_t type;               /* pagoda_constraint_type */
    const char *text;           /* see the type; need not be NUL-terminated */
    size_t len;                 /* bytes of text */
    bool strict;                /* JSON Schema: a keyword the engine does not enforce is
                                   an error (false: it is ignored, documented per engine) */
} pagoda_constraint_spec;

/* Counters an engine may report (all "ever", since create). */
typedef struct pagoda_constraint_stats {
    size_t struct_size;
    int64_t compiles;           /* specs compiled (cache misses) */
    int64_t compile_cache_hits; /* compile() answered from the plugin's cache */
    int64_t compile_errors;     /* specs refused */
    double compile_seconds;     /* time spent compiling */
    int64_t masks;              /* fill_mask calls */
    int64_t mask_cache_hits;    /* of those, answered from a cached mask */
    double mask_seconds;        /* time spent in fill_mask */
    int64_t states;             /* automaton states alive now (engine-defined) */
    int64_t bytes;              /* memory the engine holds now */
} pagoda_constraint_stats;

typedef struct pagoda_constraint_ops {
    size_t struct_size;

    /* [main thread, before serving] required. The model's vocabulary;
     * called once after create(). err gets a one-line reason on failure. */
    int (*set_vocab)(void *ctx, const pagoda_constraint_vocab *vocab, char *err, size_t err_len);

    /* [any thread] required. Compile a spec. On PAGODA_OK *compiled is
     * the caller's (compiled_free). A spec that is malformed, accepts no
     * output, uses what this engine does not support (a strict schema's
     * keyword, a regex's backreference) or exceeds the engine's limits
     * (size, compile work) is PAGODA_ERR_INVALID with err naming the
     * problem and where (this is the client's 400 message). Time and
     * memory are bounded by the plugin's limits: never a stall. May run
     * on several threads at once. */
    int (*compile)(void *ctx, const pagoda_constraint_spec *spec, void **compiled, char *err,
                   size_t err_len);
    /* [any thread] required. NULL is a no-op. */
    void (*compiled_free)(void *ctx, void *compiled);

    /* [any thread] required. A matcher at the start of the output. */
    int (*matcher_new)(void *ctx, void *compiled, void **matcher, char *err, size_t err_len);
    /* [any thread] required. NULL is a no-op. */
    void (*matcher_free)(void *ctx, void *matcher);

    /* [engine thread] required. Write the tokens that may come next into
     * mask: (n_vocab + 31) / 32 words, bit (t % 32) of word t / 32 set when
     * token t is allowed; every word is written (bits past n_vocab 0).
     * Only text tokens (len > 0) are ever set. Errors (PAGODA_ERR_NOMEM, an
     * engine limit): err says why; the core ends the request with an
     * error. Calls for different matchers may come from different threads
     * at once; never two for one matcher. */
    int (*fill_mask)(void *ctx, void *matcher, uint32_t *mask, char *err, size_t err_len);

    /* [engine thread] required. The sampler picked token (a text token
     * the last mask allowed): move past it. PAGODA_ERR_INVALID (matcher
     * unchanged) for a token the spec does not allow here. */
    int (*advance)(void *ctx, void *matcher, int32_t token, char *err, size_t err_len);

    /* [engine thread] required. May the output end here? */
    bool (*is_complete)(void *ctx, const void *matcher);

    /* [any thread] optional. Fill *st (the core sets struct_size).
     * Fallback: no figures are reported. */
    int (*stats)(void *ctx, pagoda_constraint_stats *st);
} pagoda_constraint_ops;

#ifdef __cplusplus
}
#endif
#endif /* PAGODA_CONSTRAINT_H */
