/*
 * core/tools/tools.c: the table of tool subcommands the `pagoda` binary
 * offers beside serving (see core/subcommand.h). Not for: the tools
 * themselves (one folder or file each here).
 */
#include "subcommand.h"

#include <stddef.h>

#include "bench.h"
#include "comm_check.h"
#include "genmodel.h"
#include "perplexity.h"

const pagoda_subcommand pagoda_tool_subcommands[] = {
    {"gen-model", "pagoda gen-model --shape NAME --type T --out FILE [...]",
     "  gen-model ...          write a random-weight Llama GGUF of a real shape\n"
     "                         (pagoda gen-model --help)\n",
     pagoda_cmd_gen_model},
    {"bench", "pagoda bench [--compare NAME] [...]",
     "  bench ...              benchmark the engine in-process, rooflines, policy\n"
     "                         comparisons (pagoda bench --help)\n",
     pagoda_cmd_bench},
    {"perplexity", "pagoda perplexity --model FILE --file TEXT [--ctx 512] [...]",
     "  perplexity ...         a model's perplexity on a text, llama-perplexity's way\n"
     "                         (pagoda perplexity --help)\n",
     pagoda_cmd_perplexity},
    {"comm-check", "mpirun -n N pagoda comm-check [--comm mpi] [--max-bytes SIZE] [--bench]",
     "  comm-check ...         a comm plugin's conformance test, on every rank under\n"
     "                         mpirun (pagoda comm-check --help)\n",
     pagoda_cmd_comm_check},
    {NULL, NULL, NULL, NULL},
};
