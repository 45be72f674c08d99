/*
 * core/main.c: the `pagoda` command line. Parses arguments, loads the
 * config with its --set overrides and hands over to the subcommand: serve
 * (the default), plugins, plan (memplan.c), and the tools' subcommands
 * (gen-model, bench, ...: core/tools, found through subcommand.h). Exit codes: 0 ok, 1 runtime error, 2 usage or config error.
 * Not for: any serving logic (server.c), plugin loading (plugin_loader.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
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
            "usage: pagoda [serve] [--config FILE] [--set SECTION.KEY=VALUE]...\n"
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
            "  -s, --set S.K=V        override one key, e.g. --set engine.block_size=32\n"
            "                         or --set frontend.http.port=9000 (repeatable; wins over\n"
            "                         the file)\n"
            "  -h, --help             this text\n"
            "  -V, --version          the version and plugin ABI\n"
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

static int cmd_serve(int argc, char **argv, int first)
{
    const char *config_path = NULL;
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    int nsets = 0, rc = EXIT_USAGE;
    pagoda_config *cfg = NULL;
    char err[2048];
    if (!sets) {
        fprintf(stderr, "pagoda: out of memory\n");
        return EXIT_RUNTIME;
    }
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        bool is_config = false, is_set = false;
        if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0) is_config = true;
        else if (strncmp(a, "--config=", 9) == 0) { is_config = true; val = a + 9; }
        else if (strcmp(a, "-s") == 0 || strcmp(a, "--set") == 0) is_set = true;
        else if (strncmp(a, "--set=", 6) == 0) { is_set = true; val = a + 6; }
        else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            rc = EXIT_OK;
            goto out;
        } else if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0) {
            printf("pagoda %s (plugin ABI %d.%d)\n", PAGODA_VERSION_STRING, PAGODA_ABI_MAJOR,
                   PAGODA_ABI_MINOR);
            rc = EXIT_OK;
            goto out;
        } else {
            fprintf(stderr, "pagoda: unknown argument '%s' (see pagoda --help)\n", a);
            goto out;
        }
        if (!val) {
            if (i + 1 >= argc) {
                fprintf(stderr, "pagoda: %s needs a value (see pagoda --help)\n", a);
                goto out;
            }
            val = argv[++i];
        }
        if (is_config) {
            if (config_path) {
                fprintf(stderr, "pagoda: --config given twice ('%s' and '%s')\n", config_path, val);
                goto out;
            }
            config_path = val;
        } else if (is_set) {
            sets[nsets++] = val;
        }
    }
    if (!config_path) {
        if (access(DEFAULT_CONFIG, R_OK) != 0) {
            fprintf(stderr, "pagoda: no config file: give --config FILE (the default %s was not "
                            "found in the current folder); see pagoda --help\n", DEFAULT_CONFIG);
            goto out;
        }
        config_path = DEFAULT_CONFIG;
        pagoda_log(PAGODA_LOG_INFO, "no --config given: using %s", DEFAULT_CONFIG);
    }
    cfg = pagoda_config_load(config_path, err, sizeof err);
    if (!cfg) {
        fprintf(stderr, "pagoda: %s\n", err);
        goto out;
    }
    for (int i = 0; i < nsets; i++)
        if (pagoda_config_set(cfg, sets[i], err, sizeof err) != PAGODA_OK) {
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
    free(sets);
    return rc;
}

int main(int argc, char **argv)
{
    openblas_coretype_setup(); /* first: see the comment on the function */
    if (argc >= 2 && strcmp(argv[1], "plugins") == 0) return cmd_plugins(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "plan") == 0) return pagoda_cmd_plan(argc - 1, argv + 1);
    for (const pagoda_subcommand *c = pagoda_tool_subcommands; argc >= 2 && c->name; c++)
        if (strcmp(argv[1], c->name) == 0) return c->run(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "serve") == 0) return cmd_serve(argc, argv, 2);
    if (argc >= 2 && argv[1][0] != '-') {
        fprintf(stderr, "pagoda: unknown command '%s' (commands: serve, plugins, plan", argv[1]);
        for (const pagoda_subcommand *c = pagoda_tool_subcommands; c->name; c++)
            fprintf(stderr, ", %s", c->name);
        fprintf(stderr, "; see pagoda --help)\n");
        return EXIT_USAGE;
    }
    return cmd_serve(argc, argv, 1);
}
