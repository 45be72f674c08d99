/*
 * genmodel.h: `pagoda gen-model`, which writes a random-weight Llama GGUF
 * (v3) of a real shape, for benchmarks and tests of models pagoda cannot
 * ship. Weights are seeded (same arguments, same bytes), streamed to disk
 * so a 1.1B model needs only a few MB of RAM.
 * Not for: meaningful text: the weights are noise.
 */
#ifndef PAGODA_GENMODEL_H
#define PAGODA_GENMODEL_H

#include <stddef.h>
#include <stdint.h>

/* A model shape. vocab is the default when no vocabulary file is given. */
typedef struct pagoda_model_shape {
    const char *name;
    int dim, n_layers, n_heads, n_kv_heads, ffn, vocab, context;
} pagoda_model_shape;

/* "llama-110M", "tinyllama-1.1B", "tiny"; NULL for another name. */
const pagoda_model_shape *pagoda_model_shape_find(const char *name);

typedef struct pagoda_genmodel_opts {
    const char *shape;      /* a name pagoda_model_shape_find knows */
    int dtype;              /* F32, F16, BF16, Q8_0, Q4_0, Q4_1 (norms stay F32) */
    const char *out;        /* written via OUT.tmp, renamed when complete */
    const char *vocab;      /* a GGUF to copy every tokenizer.* key from, or NULL
                             * for a generated SPM-style vocabulary */
    uint64_t seed;
    int layers;             /* 0 = the shape's count */
    int context;            /* 0 = the shape's context length (the bench's long-prompt runs) */
} pagoda_genmodel_opts;

/* Writes the model; 0 or a pagoda_status with a message in err. */
int pagoda_gen_model(const pagoda_genmodel_opts *o, char *err, size_t err_len);

/* The CLI: argv[0] is the subcommand name ("gen-model"), options follow:
 *   --shape NAME --type T --out FILE [--vocab VOCAB.gguf] [--seed N] [--layers N]
 * Returns a process exit code: 0 ok, 1 failure, 2 usage error. */
int pagoda_cmd_gen_model(int argc, char **argv);

#endif /* PAGODA_GENMODEL_H */
