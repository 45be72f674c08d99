/*
 * perplexity.h: `pagoda perplexity`, llama-perplexity's measure of a model
 * on a text, run through the engine with prompt logprobs (so it measures
 * what /v1/completions with echo + logprobs gives). The method (chunks of
 * ctx tokens, BOS in front of each where the model adds one, the negative
 * log-likelihood of the second half of each chunk) and the error formula
 * are in docs/perplexity.md.
 * Not for: serving, or scoring anything but a plain text file.
 */
#ifndef PAGODA_TOOLS_PERPLEXITY_H
#define PAGODA_TOOLS_PERPLEXITY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct pagoda_ppl_opts {
    const char *model;          /* GGUF path, or NULL for the config's */
    const char *config;         /* NULL: built-in (cpu, continuous, paged) */
    const char *const *sets;    /* "section.key=value" overrides, applied last */
    int n_sets;
    const char *file;           /* the text */
    int32_t ctx;                /* tokens per chunk (at least 4) */
    int32_t max_chunks;         /* 0: every whole chunk of the file */
    int32_t parallel;           /* chunks in flight at once */
    FILE *out;                  /* the running estimate and result; NULL: none */
    int progress;               /* 1 bar on stderr, 0 none, -1 when stderr is a terminal */
} pagoda_ppl_opts;

typedef struct pagoda_ppl_result {
    int64_t n_file_tokens;      /* the whole text, BOS included when the model adds one */
    int32_t n_chunks;
    int32_t first;              /* positions before this in a chunk are context only */
    int64_t count;              /* tokens scored in all */
    double nll, nll2;           /* sums of -logprob and of its square, over every scored token */
    double *chunk_nll;          /* [n_chunks] per chunk sums (malloc'd; pagoda_ppl_result_free) */
    double ppl, ppl_err;        /* exp(nll / count) and its standard error */
    double seconds;             /* from the first submit to the last chunk's end */
    double tokens_per_s;        /* chunk tokens computed per second */
} pagoda_ppl_result;

/* Load the model, score the file, fill *res. Returns a pagoda_status with
 * a one-line reason in err. */
int pagoda_perplexity_run(const pagoda_ppl_opts *o, pagoda_ppl_result *res, char *err,
                          size_t err_len);
void pagoda_ppl_result_free(pagoda_ppl_result *res);

/* The CLI: pagoda perplexity --model M --file F [--ctx 512] [--chunks N] ... */
int pagoda_cmd_perplexity(int argc, char **argv);

#endif /* PAGODA_TOOLS_PERPLEXITY_H */
