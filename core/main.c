/*
 * core/main.c: the `pagoda` command line. Parses arguments, loads the
 * config with its --set overrides and hands over to the subcommand: serve
 * (the default), plugins, plan (memplan.c), and the tools' subcommands
 * (gen-model, bench, ...: core/tools, found through subcommand.h). Exit codes: 0 ok, 1 runtime error, 2 usage or config error.
 * Not for: any serving logic (server.c), plugin loading (plugin_loader.c).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "config_flags.h"
#include "log.h"
#include "memplan.h"
#include "plugin_loader.h"
#include "server.h"
#include "subcommand.h"

#ifndef PAGODA_VERSION_STRING
#define PAGODA_VERSION_STRING "unknown"
#endif

#define DEFAULT_CONFIG "configs/default.ini"

enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

/*
 * OpenBLAS (Debian's is a DYNAMIC_ARCH build) picks its kernels from the
 * CPU model it reads at load time; on a CPU newer than its table, or a VM
 * that hides the model, it falls back to generic SSE kernels several times
 * slower. Naming the kernel family by what the CPU can run avoids that:
 * Haswell kernels need AVX2+FMA, SkylakeX ones AVX-512 F/BW/DQ/VL.
 * OpenBLAS reads the variable only when it is loaded, and it is loaded only
 * with the CPU backend plugin (dlopen), so setting it first thing in main
 * is early enough. A value the user set is kept.
 */
static void openblas_coretype_setup(void)
{
#if defined(__x86_64__) || defined(__i386__)
    if (getenv("OPENBLAS_CORETYPE")) return;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        setenv("OPENBLAS_CORETYPE", "SkylakeX", 0);
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        setenv("OPENBLAS_CORETYPE", "Haswell", 0);
#endif
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: pagoda [serve] [MODEL.gguf] [--config FILE] [--set SECTION.KEY=VALUE]...\n"
            "                      [--port N] [-c N] [-np N] [...: the short flags below]\n"
            "       pagoda plugins [-v]\n"
            "       pagoda plan [--config FILE] [--set S.K=V]... [--model FILE] [...]\n");
    for (const pagoda_subcommand *c = pagoda_tool_subcommands; c->name; c++)
        fprintf(f, "       %s\n", c->usage);
    fprintf(f,
            "       pagoda --help | --version\n"
            "\n"
            "Runs the LLM inference server described by an INI file (see docs/config.md).\n"
            "\n"
            "  -c, --config FILE      the config file; default: " DEFAULT_CONFIG " if it exists\n"
            "                         here; with a model given, else the source tree's\n"
            "                         (a build-tree pagoda), else the built-in defaults\n"
            "  -s, --set S.K=V        override one key, e.g. --set engine.block_size=32\n"
            "                         or --set frontend.http.port=9000 (repeatable; wins over\n"
            "                         the file)\n"
            "  -h, --help             this text\n"
            "  -V, --version          the version and plugin ABI\n"
            "\n"
            "short flags, as llama-server and vllm spell them; each sets one INI key\n"
            "(docs/config.md), applied after the file like --set (-c N with a number is\n"
            "the context size, -c FILE the config):\n");
    pagoda_cli_flags_help(f);
    fprintf(f,
            "\n"
            "subcommands:\n"
            "  serve                  serve with the configured frontend (the default)\n"
            "  plugins [-v]           list the plugins in the search path, with ABI, version,\n"
            "                         probe result or the reason one is refused; -v adds\n"
            "                         their config keys\n"
            "  plan ...               the memory plan the server would use with these\n"
            "                         settings, without loading weights (pagoda plan --help)\n");
    for (const pagoda_subcommand *c = pagoda_tool_subcommands; c->name; c++)
        fputs(c->help, f);
    fprintf(f,
            "\n"
            "Plugins are searched in: the section's `path` key, $PAGODA_PLUGIN_PATH\n"
            "(colon-separated), the build tree, the installed plugin folder.\n"
            "exit status: 0 ok, 1 runtime error, 2 usage or config error\n");
}

static int cmd_plugins(int argc, char **argv)
{
    bool verbose = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0) verbose = true;
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: pagoda plugins [-v]\n"
                   "Lists every <kind>-<name>.so in the plugin search path: kind, name, ABI,\n"
                   "version, description and probe result, or why the plugin is refused.\n"
                   "-v also lists each plugin's config keys.\n");
            return EXIT_OK;
        } else {
            fprintf(stderr, "pagoda plugins: unknown option '%s' (try pagoda plugins --help)\n",
                    argv[i]);
            return EXIT_USAGE;
        }
    }
    pagoda_plugins_print(stdout, verbose);
    return EXIT_OK;
}

/* The default config when none is given: ./configs/default.ini, else
 * (source_tree) the source tree's when this pagoda runs from its build
 * tree, as the plugin search finds the build tree's plugins. NULL when
 * neither exists. */
static const char *default_config(char *buf, size_t n, bool source_tree)
{
    if (access(DEFAULT_CONFIG, R_OK) == 0) return DEFAULT_CONFIG;
    if (!source_tree) return NULL;
#ifdef PAGODA_SOURCE_ROOT
    char exe[4096], root[4096];
    if (*PAGODA_BUILD_ROOT && realpath("/proc/self/exe", exe) && realpath(PAGODA_BUILD_ROOT, root)) {
        size_t l = strlen(root);
        snprintf(buf, n, "%s/" DEFAULT_CONFIG, PAGODA_SOURCE_ROOT);
        if (strncmp(exe, root, l) == 0 && exe[l] == '/' && access(buf, R_OK) == 0) return buf;
    }
#endif
    (void)buf;
    (void)n;
    return NULL;
}

static int cmd_serve(int argc, char **argv, int first)
{
    pagoda_serve_args args;
    int rc = EXIT_USAGE;
    pagoda_config *cfg = NULL;
    char err[4096], dbuf[4200];
    int st = pagoda_serve_args_parse(argc, argv, first, &args, err, sizeof err);
    if (st) {
        fprintf(stderr, "pagoda: %s\n", err);
        rc = st == PAGODA_ERR_NOMEM ? EXIT_RUNTIME : EXIT_USAGE;
        goto out;
    }
    if (args.help) {
        usage(stdout);
        rc = EXIT_OK;
        goto out;
    }
    if (args.version) {
        printf("pagoda %s (plugin ABI %d.%d)\n", PAGODA_VERSION_STRING, PAGODA_ABI_MAJOR,
               PAGODA_ABI_MINOR);
        rc = EXIT_OK;
        goto out;
    }
    const char *config_path = args.config_path;
    if (!config_path) {
        /* the source tree's file only with a model given: a bare `pagoda`
         * elsewhere asks for a config rather than serving the demo model */
        config_path = default_config(dbuf, sizeof dbuf, args.model_given);
        if (config_path) {
            pagoda_log(PAGODA_LOG_INFO, "no --config given: using %s", config_path);
        } else if (!args.model_given) {
            fprintf(stderr, "pagoda: no config file: give --config FILE or a model (pagoda serve "
                            "MODEL.gguf; the default %s was not found in the current folder); see "
                            "pagoda --help\n", DEFAULT_CONFIG);
            goto out;
        } else {
            pagoda_log(PAGODA_LOG_INFO, "no --config given and no %s found: using the built-in "
                       "defaults (the same as %s's)", DEFAULT_CONFIG, DEFAULT_CONFIG);
        }
    }
    cfg = config_path ? pagoda_config_load(config_path, err, sizeof err) : pagoda_config_new_empty();
    if (!cfg) {
        fprintf(stderr, "pagoda: %s\n", config_path ? err : "out of memory");
        goto out;
    }
    if (pagoda_serve_args_apply(&args, cfg, err, sizeof err) != PAGODA_OK) {
        fprintf(stderr, "pagoda: %s\n", err);
        goto out;
    }
    pagoda_engine_config ec;
    if (pagoda_config_engine(cfg, &ec, err, sizeof err) != PAGODA_OK) {
        fprintf(stderr, "pagoda: %s\n", err);
        goto out;
    }
    pagoda_log_set_level(ec.log_level);
    rc = pagoda_serve(cfg);
out:
    pagoda_config_free(cfg);
    pagoda_serve_args_free(&args);
    return rc;
}

/* `pagoda MODEL.gguf ...`: a first argument that is a model file, not a command. */
static bool looks_like_model(const char *a)
{
    size_t l = strlen(a);
    return (l > 5 && strcmp(a + l - 5, ".gguf") == 0) || access(a, R_OK) == 0;
}

int main(int argc, char **argv)
{
    openblas_coretype_setup(); /* first: see the comment on the function */
    if (argc >= 2 && strcmp(argv[1], "plugins") == 0) return cmd_plugins(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "plan") == 0) return pagoda_cmd_plan(argc - 1, argv + 1);
    for (const pagoda_subcommand *c = pagoda_tool_subcommands; argc >= 2 && c->name; c++)
        if (strcmp(argv[1], c->name) == 0) return c->run(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "serve") == 0) return cmd_serve(argc, argv, 2);
    if (argc >= 2 && argv[1][0] != '-' && !looks_like_model(argv[1])) {
        fprintf(stderr, "pagoda: unknown command '%s' (commands: serve, plugins, plan", argv[1]);
        for (const pagoda_subcommand *c = pagoda_tool_subcommands; c->name; c++)
            fprintf(stderr, ", %s", c->name);
        fprintf(stderr, "; see pagoda --help)\n");
        return EXIT_USAGE;
    }
    return cmd_serve(argc, argv, 1);
}
