/*
 * core/config/config_flags.h: the serve command line. `--config FILE`,
 * `--set S.K=V` and the short flags llama-server and vLLM users type
 * (`pagoda serve MODEL.gguf --port 8080 -c 4096 -np 8`), each of which is
 * one INI key: a flag is a --set under another name, so the config file,
 * docs/config.md and `pagoda plugins -v` stay the one description of what
 * can be set. main.c parses with it; the table prints `pagoda --help`.
 * Not for: the INI file itself (config.h), the other subcommands' options.
 */
#ifndef PAGODA_CORE_CONFIG_FLAGS_H
#define PAGODA_CORE_CONFIG_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "config.h"

typedef struct pagoda_cli_flag {
    const char *names;   /* "-np|--parallel|--max-num-seqs": every spelling, '|'-separated */
    const char *key;     /* "frontend.http.port"; a '*' section part is the plugin [engine]
                          * names for that kind: "scheduler.*.max_num_seqs" */
    const char *from;    /* who spells it so: "llama-server, vllm" */
} pagoda_cli_flag;

/* Terminated by an entry whose names is NULL. */
extern const pagoda_cli_flag pagoda_cli_flags[];

typedef struct pagoda_serve_arg {
    const pagoda_cli_flag *flag; /* NULL: a --set (text is its assignment) */
    const char *spelled;         /* the flag as typed ("--port"), for messages */
    const char *text;            /* the flag's value, or the --set text */
} pagoda_serve_arg;

typedef struct pagoda_serve_args {
    const char *config_path;     /* --config FILE (or -c FILE), NULL when not given */
    pagoda_serve_arg *a;         /* --set and flags, in the order given */
    int n;
    bool model_given;            /* MODEL.gguf, -m or --model */
    bool help, version;
} pagoda_serve_args;

/* Parse argv[first..argc). Takes --config/-c FILE, --set/-s S.K=V, the
 * table's flags (as "--port 8080" or "--port=8080"), one positional
 * MODEL (= --model), -h/--help and -V/--version. `-c N` with a number N is
 * llama-server's --ctx-size; `-c FILE` stays --config. The strings point
 * into argv. Returns PAGODA_OK, or PAGODA_ERR_INVALID with err filled
 * (free *out all the same). */
int pagoda_serve_args_parse(int argc, char **argv, int first, pagoda_serve_args *out, char *err,
                            size_t err_len);

/* Apply the --set texts and flags to cfg: first every one that names an
 * [engine] or fixed key, in the order given, then those whose section
 * depends on the engine's plugin names (threads, parallel). Returns
 * PAGODA_OK or PAGODA_ERR_INVALID with err naming the flag. */
int pagoda_serve_args_apply(const pagoda_serve_args *a, pagoda_config *cfg, char *err,
                            size_t err_len);

void pagoda_serve_args_free(pagoda_serve_args *a);

/* The flags' table for `pagoda --help` (one line each). */
void pagoda_cli_flags_help(FILE *f);

#endif /* PAGODA_CORE_CONFIG_FLAGS_H */
