/*
 * core/subcommand.h: how the `pagoda` command line finds the subcommands
 * that are not serving (gen-model, bench, perplexity, ...). The tools
 * library (core/tools/tools.c) defines the table; main.c walks it. The
 * serving core thereby never includes a tool's header, and a tool is added
 * by one line in that table.
 * Not for: serve, plugins and plan, which are the core's own (main.c).
 */
#ifndef PAGODA_SUBCOMMAND_H
#define PAGODA_SUBCOMMAND_H

typedef struct pagoda_subcommand {
    const char *name;    /* argv[1], e.g. "bench" */
    const char *usage;   /* one usage line for `pagoda --help` */
    const char *help;    /* the subcommands section's text, "" to omit */
    /* argv[0] is the subcommand's name; returns the process exit code */
    int (*run)(int argc, char **argv);
} pagoda_subcommand;

/* [main thread] Terminated by an entry whose name is NULL. */
extern const pagoda_subcommand pagoda_tool_subcommands[];

#endif /* PAGODA_SUBCOMMAND_H */
