/* test_config.c: the INI config: parsing, [engine] checks, section names,
 * plugin-section validation, --set, sizes and paths, with the exact error
 * texts users see; the check of every section and key against the real
 * plugins before anything loads (config_check.c, with the build tree's
 * plugins through PAGODA_PLUGIN_PATH), and the serve command line's short
 * flags (config_flags.c). */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "config_check.h"
#include "config_flags.h"
#include "testutil.h"

static char g_dir[256];   /* a fresh temp folder per test */
static char g_path[512];  /* g_dir/sub/test.ini */
static char g_err[2048];

static void setup(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/pagoda-test-config-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
    char sub[300];
    snprintf(sub, sizeof sub, "%s/sub", g_dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    snprintf(g_path, sizeof g_path, "%s/test.ini", sub);
    g_err[0] = '\0';
}

static void teardown(void)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void write_ini(const char *text)
{
    FILE *f = fopen(g_path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* Load text, expect failure, and return the message. */
static const char *load_err(const char *text)
{
    write_ini(text);
    pagoda_config *c = pagoda_config_load(g_path, g_err, sizeof g_err);
    ck_assert_msg(c == NULL, "expected an error for:\n%s", text);
    return g_err;
}

static pagoda_config *load_ok(const char *text)
{
    write_ini(text);
    pagoda_config *c = pagoda_config_load(g_path, g_err, sizeof g_err);
    ck_assert_msg(c != NULL, "unexpected error: %s", g_err);
    return c;
}

/* The message must equal "<g_path>:<line>: <rest>". */
static void assert_at(const char *err, int line, const char *rest)
{
    char want[4096];
    snprintf(want, sizeof want, "%s:%d: %s", g_path, line, rest);
    ck_assert_str_eq(err, want);
}

START_TEST(test_parse_values_and_lines)
{
    pagoda_config *c = load_ok("; a comment\n"
                               "[engine]\n"
                               "backend = cpu   ; inline comment\n"
                               "# another comment\n"
                               "block_size = 32\n"
                               "\n"
                               "[frontend.http]\n"
                               "port = 9000\n");
    ck_assert_str_eq(pagoda_config_get(c, "engine", "backend"), "cpu");
    ck_assert_str_eq(pagoda_config_get(c, "engine", "block_size"), "32");
    ck_assert_str_eq(pagoda_config_get(c, "frontend.http", "port"), "9000");
    ck_assert_ptr_null(pagoda_config_get(c, "engine", "seed"));
    char buf[1024], want[1024];
    snprintf(want, sizeof want, "%s:5", g_path);
    ck_assert_str_eq(pagoda_config_where(c, "engine", "block_size", buf, sizeof buf), want);
    snprintf(want, sizeof want, "%s:8", g_path);
    ck_assert_str_eq(pagoda_config_where(c, "frontend.http", "port", buf, sizeof buf), want);
    ck_assert_ptr_null(pagoda_config_where(c, "engine", "seed", buf, sizeof buf));
    /* Entries in file order. */
    const char *s, *k, *v;
    ck_assert(pagoda_config_entry(c, 2, &s, &k, &v));
    ck_assert_str_eq(s, "frontend.http");
    ck_assert_str_eq(k, "port");
    ck_assert(!pagoda_config_entry(c, 3, &s, &k, &v));
    pagoda_config_free(c);
}
END_TEST

START_TEST(test_engine_defaults)
{
    pagoda_config *c = pagoda_config_new_empty();
    pagoda_engine_config ec;
    ck_assert_int_eq(pagoda_config_engine(c, &ec, g_err, sizeof g_err), PAGODA_OK);
    ck_assert_str_eq(ec.model, "");
    ck_assert_str_eq(ec.backend, "cpu");
    ck_assert_str_eq(ec.scheduler, "continuous");
    ck_assert_str_eq(ec.kvcache, "paged");
    ck_assert_str_eq(ec.frontend, "http");
    ck_assert_int_eq(ec.max_seq_len, 0);
    ck_assert_int_eq(ec.kv_dtype, PAGODA_DTYPE_F16);
    ck_assert(!ec.realign_off);
    ck_assert(!ec.spec_draft_batch_off);
    ck_assert_uint_eq(ec.memory_budget, 0);
    ck_assert_double_eq_tol(ec.gpu_memory_utilization, 0.9, 1e-9);
    ck_assert_uint_eq(ec.seed, 0);
    ck_assert_int_eq(ec.kv_cache_tokens, 0);
    ck_assert_int_eq(ec.block_size, 16);
    ck_assert_str_eq(ec.chat_template, "auto");
    ck_assert_int_eq(ec.default_max_tokens, 256);
    ck_assert_float_eq_tol(ec.temperature, 1.0f, 1e-6f);
    ck_assert_float_eq_tol(ec.top_p, 1.0f, 1e-6f);
    ck_assert_int_eq(ec.top_k, 0);
    ck_assert_float_eq_tol(ec.min_p, 0.0f, 1e-6f);
    ck_assert_int_eq(ec.max_queue, 1024);
    ck_assert_int_eq(ec.log_level, PAGODA_LOG_INFO);
    ck_assert_str_eq(pagoda_config_engine_str(c, "block_size"), "16");
    ck_assert_str_eq(pagoda_config_engine_str(c, "memory_budget"), "auto");
    ck_assert_ptr_null(pagoda_config_engine_str(c, "no_such_key"));
    ck_assert_ptr_null(pagoda_config_file(c));
    ck_assert_str_eq(pagoda_config_dir(c), ".");
    pagoda_config_free(c);
}
END_TEST

START_TEST(test_engine_values)
{
    pagoda_config *c = load_ok("[engine]\n"
                               "model = ../models/m.gguf\n"
                               "kv_dtype = f32\n"
                               "memory_budget = 1.5G\n"
                               "gpu_memory_utilization = 0.5\n"
                               "seed = 1234\n"
                               "kv_cache_tokens = 8192\n"
                               "chat_template = chatml\n"
                               "temperature = 0\n"
                               "top_p = 0.95\n"
                               "top_k = 40\n"
                               "min_p = 0.05\n"
                               "max_queue = 7\n"
                               "log_level = debug\n"
                               "max_seq_len = 512\n"
                               "default_max_tokens = 0\n"
                               "realign = off\n"
                               "spec_draft_batch = off\n"
                               "scheduler = static\n");
    pagoda_engine_config ec;
    ck_assert_int_eq(pagoda_config_engine(c, &ec, g_err, sizeof g_err), PAGODA_OK);
    ck_assert(ec.realign_off);
    ck_assert(ec.spec_draft_batch_off);
    char want[1024];
    snprintf(want, sizeof want, "%s/sub/../models/m.gguf", g_dir);
    ck_assert_str_eq(ec.model, want);
    ck_assert_int_eq(ec.kv_dtype, PAGODA_DTYPE_F32);
    ck_assert_uint_eq(ec.memory_budget, 1610612736ull);
    ck_assert_double_eq_tol(ec.gpu_memory_utilization, 0.5, 1e-9);
    ck_assert_uint_eq(ec.seed, 1234);
    ck_assert_int_eq(ec.kv_cache_tokens, 8192);
    ck_assert_str_eq(ec.chat_template, "chatml");
    ck_assert_float_eq_tol(ec.temperature, 0.0f, 1e-9f);
    ck_assert_float_eq_tol(ec.top_p, 0.95f, 1e-6f);
    ck_assert_int_eq(ec.top_k, 40);
    ck_assert_float_eq_tol(ec.min_p, 0.05f, 1e-6f);
    ck_assert_int_eq(ec.max_queue, 7);
    ck_assert_int_eq(ec.log_level, PAGODA_LOG_DEBUG);
    ck_assert_int_eq(ec.max_seq_len, 512);
    ck_assert_int_eq(ec.default_max_tokens, 0);
    ck_assert_str_eq(ec.scheduler, "static");
    pagoda_config_free(c);
}
END_TEST

START_TEST(test_model_path_resolution)
{
    /* Absolute paths stay; relative ones are joined to the file's folder. */
    pagoda_config *c = load_ok("[engine]\nmodel = /abs/m.gguf\n[backend.x]\npath = lib/backend-x.so\n");
    ck_assert_str_eq(pagoda_config_get(c, "engine", "model"), "/abs/m.gguf");
    char want[1024];
    snprintf(want, sizeof want, "%s/sub/lib/backend-x.so", g_dir);
    ck_assert_str_eq(pagoda_config_get(c, "backend.x", "path"), want);
    /* A --set path stays relative to the current folder. */
    ck_assert_int_eq(pagoda_config_set(c, "engine.model=rel/m.gguf", g_err, sizeof g_err), PAGODA_OK);
    ck_assert_str_eq(pagoda_config_get(c, "engine", "model"), "rel/m.gguf");
    pagoda_config_free(c);

    /* The bundled default config points at the bundled model. */
    c = pagoda_config_load(tu_src("configs/default.ini"), g_err, sizeof g_err);
    ck_assert_msg(c != NULL, "%s", g_err);
    pagoda_engine_config ec;
    ck_assert_int_eq(pagoda_config_engine(c, &ec, g_err, sizeof g_err), PAGODA_OK);
    ck_assert_msg(access(ec.model, R_OK) == 0, "model %s not found", ec.model);
    ck_assert_str_eq(ec.frontend, "http");
    pagoda_config_free(c);
    c = pagoda_config_load(tu_src("configs/cpu-ci.ini"), g_err, sizeof g_err);
    ck_assert_msg(c != NULL, "%s", g_err);
    ck_assert_int_eq(pagoda_config_engine(c, &ec, g_err, sizeof g_err), PAGODA_OK);
    ck_assert_msg(access(ec.model, R_OK) == 0, "model %s not found", ec.model);
    pagoda_config_free(c);
}
END_TEST

START_TEST(test_unknown_section)
{
    assert_at(load_err("[engine]\nbackend = cpu\n[engine2]\nx = 1\n"), 3,
              "unknown section [engine2]; did you mean [engine]? (valid: [engine], "
              "[backend.NAME], [scheduler.NAME], [kvcache.NAME], [frontend.NAME], [constraint.NAME], [comm.NAME])");
    assert_at(load_err("[backnd.cpu]\nthreads = 2\n"), 1,
              "unknown section [backnd.cpu]; did you mean [backend.cpu]? (valid: [engine], "
              "[backend.NAME], [scheduler.NAME], [kvcache.NAME], [frontend.NAME], [constraint.NAME], [comm.NAME])");
    /* Found even with no key in it. */
    assert_at(load_err("[engine]\n\n[schedular.static]\n"), 3,
              "unknown section [schedular.static]; did you mean [scheduler.static]? (valid: "
              "[engine], [backend.NAME], [scheduler.NAME], [kvcache.NAME], [frontend.NAME], [constraint.NAME], [comm.NAME])");
    assert_at(load_err("[backend]\nx = 1\n"), 1,
              "unknown section [backend]; did you mean [backend.NAME] (a plugin section is "
              "[kind.name])? (valid: [engine], [backend.NAME], [scheduler.NAME], "
              "[kvcache.NAME], [frontend.NAME], [constraint.NAME], [comm.NAME])");
    assert_at(load_err("[backend.a/b]\n"), 1,
              "unknown section [backend.a/b]: the plugin name after 'backend.' must be 1 to 63 "
              "letters, digits, '_' or '-'");
    /* [foo.bar]: some kind is suggested, the section is named. */
    const char *e = load_err("\n[foo.bar]\nk = v\n");
    char want[600];
    snprintf(want, sizeof want, "%s:2: unknown section [foo.bar]; did you mean [", g_path);
    ck_assert_msg(strncmp(e, want, strlen(want)) == 0, "%s", e);
    /* Sections of plugins not in use are fine. */
    pagoda_config *c = load_ok("[scheduler.static]\nanything = 1\n[kvcache.prefix]\n");
    pagoda_config_free(c);
}
END_TEST

START_TEST(test_unknown_engine_key)
{
    assert_at(load_err("[engine]\nbackend = cpu\nblok_size = 16\n"), 3,
              "unknown key 'blok_size' in [engine]; did you mean 'block_size'?");
    assert_at(load_err("[engine]\ntemprature = 0.7\n"), 2,
              "unknown key 'temprature' in [engine]; did you mean 'temperature'?");
}
END_TEST

START_TEST(test_bad_engine_values)
{
    assert_at(load_err("[engine]\nblock_size = abc\n"), 2,
              "bad value for engine.block_size: 'abc'; expected an integer from 1 to 1024");
    assert_at(load_err("[engine]\nblock_size = 0\n"), 2,
              "bad value for engine.block_size: '0'; expected an integer from 1 to 1024");
    assert_at(load_err("[engine]\nblock_size = 16x\n"), 2,
              "bad value for engine.block_size: '16x'; expected an integer from 1 to 1024");
    assert_at(load_err("[engine]\nmemory_budget = 12Q\n"), 2,
              "bad value for engine.memory_budget: '12Q'; expected a size in bytes like 4096, "
              "512M, 8G or 1.5G, or auto");
    assert_at(load_err("[engine]\nrealign = maybe\n"), 2,
              "bad value for engine.realign: 'maybe'; expected one of on|off");
    assert_at(load_err("[engine]\nspec_draft_batch = 2\n"), 2,
              "bad value for engine.spec_draft_batch: '2'; expected one of on|off");
    assert_at(load_err("[engine]\nkv_dtype = f8\n"), 2,
              "bad value for engine.kv_dtype: 'f8'; expected one of f16|q8_0|f32");
    assert_at(load_err("[engine]\nchat_template = vicuna\n"), 2,
              "bad value for engine.chat_template: 'vicuna'; expected one of "
              "auto|chatml|llama2|llama3|mistral|zephyr|gemma|qwen3|chatml-think|qwen3-coder|qwen3.5|glm4|deepseek3|deepseek-r1|deepseek-v3.1|kimi-k2|harmony");
    assert_at(load_err("[engine]\ntemperature = hot\n"), 2,
              "bad value for engine.temperature: 'hot'; expected a number from 0 to 100");
    assert_at(load_err("[engine]\ntop_p = 1.5\n"), 2,
              "bad value for engine.top_p: '1.5'; expected a number from 0 to 1");
    assert_at(load_err("[engine]\nlog_level = loud\n"), 2,
              "bad value for engine.log_level: 'loud'; expected one of error|warn|info|debug");
    assert_at(load_err("[engine]\nbackend = my/backend\n"), 2,
              "bad value for engine.backend: 'my/backend'; expected a plugin name (letters, "
              "digits, '_' or '-')");
    /* The first error by line wins. */
    assert_at(load_err("[engine]\nblock_size = 1\nseed = -1\n[bogus]\n"), 3,
              "bad value for engine.seed: '-1'; expected an integer from 0 to 9200000000000000000");
    pagoda_config *c = load_ok("[engine]\nmemory_budget = auto\n");
    pagoda_engine_config ec;
    ck_assert_int_eq(pagoda_config_engine(c, &ec, g_err, sizeof g_err), PAGODA_OK);
    ck_assert_uint_eq(ec.memory_budget, 0);
    pagoda_config_free(c);
}
END_TEST

START_TEST(test_syntax_errors)
{
    assert_at(load_err("[engine]\nbackend = cpu\nthis line has no equals sign\n"), 3,
              "syntax error: expected [section], key = value, or a comment starting with ; or #");
    assert_at(load_err("[engine]\nbackend = cpu\nbackend = cuda\n"), 3,
              "[engine] backend is set twice (first at line 2); keep one");
    assert_at(load_err("block_size = 16\n[engine]\n"), 1,
              "key 'block_size' is outside any section; put it under [engine] or a [kind.name] "
              "plugin section");
    /* Multi-line values are off: an indented continuation is an error. */
    assert_at(load_err("[engine]\nmodel = a\n  b\n"), 3,
              "syntax error: expected [section], key = value, or a comment starting with ; or #");
    char want[1024];
    pagoda_config *c = pagoda_config_load("/nonexistent/pagoda.ini", g_err, sizeof g_err);
    ck_assert_ptr_null(c);
    snprintf(want, sizeof want, "cannot open config file /nonexistent/pagoda.ini: No such file or directory");
    ck_assert_str_eq(g_err, want);
}
END_TEST

START_TEST(test_long_line)
{
    /* inih's default line limit is 200 bytes; ours is 8K. */
    char text[4000], value[3000];
    memset(value, 'a', sizeof value - 1);
    value[sizeof value - 1] = '\0';
    snprintf(text, sizeof text, "[engine]\nmodel = /%s\nblock_size = 8\n", value + 1);
    pagoda_config *c = load_ok(text);
    ck_assert_uint_eq(strlen(pagoda_config_get(c, "engine", "model")), sizeof value - 1);
    ck_assert_str_eq(pagoda_config_get(c, "engine", "block_size"), "8");
    char buf[1024], want[1024];
    snprintf(want, sizeof want, "%s:3", g_path);
    ck_assert_str_eq(pagoda_config_where(c, "engine", "block_size", buf, sizeof buf), want);
    pagoda_config_free(c);
    /* Beyond the limit: refused, not silently split. */
    static char huge[20000], htext[21000];
    memset(huge, 'b', sizeof huge - 1);
    snprintf(htext, sizeof htext, "[engine]\nmodel = %s\n", huge);
    assert_at(load_err(htext), 2, "line longer than 8189 bytes");
}
END_TEST

/* Issue 15 finding 3: a section header of any length is either the section
 * it names or refused at its line; it was copied into a 256-byte buffer
 * before ']' was looked for (and inih keeps only 49 characters of a name),
 * so a long header's keys were never checked and the server started. */
START_TEST(test_long_section_header)
{
    static const int lens[] = {40, 49, 50, 72, 253, 254, 255, 300, 5000};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        static char name[6000], text[7000];
        int n = lens[i];
        memcpy(name, "frontend.", 9);
        memset(name + 9, 'x', (size_t)n - 9);
        name[n] = '\0';
        snprintf(text, sizeof text, "[engine]\nblock_size = 16\n[%s]\nport = 1\n", name);
        if (n - 9 <= 63) {
            /* a plugin name of up to 63 characters: the section it names, whole */
            pagoda_config *c = load_ok(text);
            ck_assert_ptr_nonnull(pagoda_config_get(c, name, "port"));
            ck_assert_str_eq(pagoda_config_get(c, name, "port"), "1");
            pagoda_config_free(c);
        } else {
            /* a name past 80 characters is shown by its first 64 and its length */
            char shown[200], want[600];
            if (n <= 80) snprintf(shown, sizeof shown, "%s", name);
            else snprintf(shown, sizeof shown, "%.64s... (%d characters)", name, n);
            snprintf(want, sizeof want, "unknown section [%s]: the plugin name after 'frontend.' "
                     "must be 1 to 63 letters, digits, '_' or '-'", shown);
            assert_at(load_err(text), 3, want);
        }
    }
    /* Spaces inside the brackets: the same section as without them, and its
     * keys checked ([ engine ] was noted as 'engine' but its keys stored
     * under ' engine ', so they were neither checked nor used). */
    assert_at(load_err("[ engine ]\nblok_size = 16\n"), 2,
              "unknown key 'blok_size' in [engine]; did you mean 'block_size'?");
    pagoda_config *c = load_ok("[ engine ]\nblock_size = 32\n");
    ck_assert_str_eq(pagoda_config_get(c, "engine", "block_size"), "32");
    pagoda_config_free(c);
}
END_TEST

START_TEST(test_set_overrides)
{
    pagoda_config *c = load_ok("[engine]\nblock_size = 16\n[backend.cpu]\nthreads = 2\n");
    char buf[256];
    ck_assert_int_eq(pagoda_config_set(c, "engine.block_size=32", g_err, sizeof g_err), PAGODA_OK);
    ck_assert_str_eq(pagoda_config_get(c, "engine", "block_size"), "32");
    ck_assert_str_eq(pagoda_config_where(c, "engine", "block_size", buf, sizeof buf), "--set");
    ck_assert_int_eq(pagoda_config_set(c, "engine.block_size = 64", g_err, sizeof g_err), PAGODA_OK);
    ck_assert_str_eq(pagoda_config_get(c, "engine", "block_size"), "64");
    /* Dotted plugin sections: the key is after the last dot. */
    ck_assert_int_eq(pagoda_config_set(c, "backend.cpu.threads=4", g_err, sizeof g_err), PAGODA_OK);
    ck_assert_str_eq(pagoda_config_get(c, "backend.cpu", "threads"), "4");
    ck_assert_int_eq(pagoda_config_set(c, "frontend.http.port=9001", g_err, sizeof g_err), PAGODA_OK);
    ck_assert_str_eq(pagoda_config_get(c, "frontend.http", "port"), "9001");
    pagoda_engine_config ec;
    ck_assert_int_eq(pagoda_config_engine(c, &ec, g_err, sizeof g_err), PAGODA_OK);
    ck_assert_int_eq(ec.block_size, 64);

    /* Errors: same checks as a file line, named --set. */
    ck_assert_int_eq(pagoda_config_set(c, "engine.blok_size=3", g_err, sizeof g_err), PAGODA_ERR_INVALID);
    ck_assert_str_eq(g_err, "--set: unknown key 'blok_size' in [engine]; did you mean 'block_size'?");
    ck_assert_int_eq(pagoda_config_set(c, "engine.block_size=big", g_err, sizeof g_err), PAGODA_ERR_INVALID);
    ck_assert_str_eq(g_err, "--set: bad value for engine.block_size: 'big'; expected an integer from 1 to 1024");
    ck_assert_int_eq(pagoda_config_set(c, "engin.block_size=3", g_err, sizeof g_err), PAGODA_ERR_INVALID);
    ck_assert_str_eq(g_err, "--set: unknown section [engin]; did you mean [engine]? (valid: [engine], "
                            "[backend.NAME], [scheduler.NAME], [kvcache.NAME], [frontend.NAME], [constraint.NAME], [comm.NAME])");
    ck_assert_int_eq(pagoda_config_set(c, "block_size", g_err, sizeof g_err), PAGODA_ERR_INVALID);
    ck_assert_str_eq(g_err, "--set 'block_size': expected section.key=value (e.g. engine.block_size=32)");
    ck_assert_int_eq(pagoda_config_set(c, "block_size=3", g_err, sizeof g_err), PAGODA_ERR_INVALID);
    ck_assert_str_eq(g_err, "--set 'block_size=3': expected section.key=value (e.g. engine.block_size=32)");
    /* A failed --set changes nothing. */
    ck_assert_str_eq(pagoda_config_get(c, "engine", "block_size"), "64");
    pagoda_config_free(c);

    /* On an empty config too. */
    c = pagoda_config_new_empty();
    ck_assert_int_eq(pagoda_config_set(c, "engine.kv_dtype=f32", g_err, sizeof g_err), PAGODA_OK);
    ck_assert_int_eq(pagoda_config_engine(c, &ec, g_err, sizeof g_err), PAGODA_OK);
    ck_assert_int_eq(ec.kv_dtype, PAGODA_DTYPE_F32);
    ck_assert_int_eq(pagoda_config_set(c, "engine.kv_dtype=q8_0", g_err, sizeof g_err), PAGODA_OK);
    ck_assert_int_eq(pagoda_config_engine(c, &ec, g_err, sizeof g_err), PAGODA_OK);
    ck_assert_int_eq(ec.kv_dtype, PAGODA_DTYPE_Q8_0);
    pagoda_config_free(c);
}
END_TEST

static const pagoda_config_key test_keys[] = {
    { "threads", PAGODA_KEY_INT, "1", 1, 64, "worker threads" },
    { "scratch", PAGODA_KEY_SIZE, "16M", 0, 0, "scratch memory" },
    { "fast", PAGODA_KEY_BOOL, "false", 0, 0, "go fast" },
    { "ratio", PAGODA_KEY_FLOAT, "0.5", 0, 1, "a share" },
    { "name", PAGODA_KEY_STRING, "", 0, 0, "a name" },
    { NULL, 0, NULL, 0, 0, NULL },
};

START_TEST(test_validate_section)
{
    pagoda_config *c = load_ok("[backend.x]\nthreads = 8\nscratch = 512M\nfast = yes\nratio = 0.25\n"
                               "name = anything at all\npath = /opt/backend-x.so\n");
    ck_assert_int_eq(pagoda_config_validate_section(c, "backend.x", test_keys, g_err, sizeof g_err),
                     PAGODA_OK);
    /* An absent section is valid. */
    ck_assert_int_eq(pagoda_config_validate_section(c, "backend.y", test_keys, g_err, sizeof g_err),
                     PAGODA_OK);
    pagoda_config_free(c);

    struct { const char *text; int line; const char *rest; } cases[] = {
        { "[backend.x]\nthreads = 8\nthread = 2\n", 3,
          "unknown key 'thread' in [backend.x]; did you mean 'threads'? (valid keys: threads, "
          "scratch, fast, ratio, name, path)" },
        { "[backend.x]\nthreads = 65\n", 2,
          "bad value for backend.x.threads: '65'; expected an integer from 1 to 64" },
        { "[backend.x]\nscratch = lots\n", 2,
          "bad value for backend.x.scratch: 'lots'; expected a size in bytes like 4096, 512M, 8G or 1.5G" },
        { "[backend.x]\nfast = maybe\n", 2,
          "bad value for backend.x.fast: 'maybe'; expected true or false (also yes/no, on/off, 1/0)" },
        { "[backend.x]\nratio = 2\n", 2,
          "bad value for backend.x.ratio: '2'; expected a number from 0 to 1" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c = load_ok(cases[i].text);
        ck_assert_int_eq(pagoda_config_validate_section(c, "backend.x", test_keys, g_err, sizeof g_err),
                         PAGODA_ERR_INVALID);
        assert_at(g_err, cases[i].line, cases[i].rest);
        pagoda_config_free(c);
    }
    /* A --set key is validated the same way, named --set. */
    c = pagoda_config_new_empty();
    ck_assert_int_eq(pagoda_config_set(c, "backend.x.fats=1", g_err, sizeof g_err), PAGODA_OK);
    ck_assert_int_eq(pagoda_config_validate_section(c, "backend.x", test_keys, g_err, sizeof g_err),
                     PAGODA_ERR_INVALID);
    ck_assert_str_eq(g_err, "--set: unknown key 'fats' in [backend.x]; did you mean 'fast'? (valid "
                            "keys: threads, scratch, fast, ratio, name, path)");
    pagoda_config_free(c);
    /* A plugin with no keys takes only path. */
    c = load_ok("[scheduler.s]\nfoo = 1\n");
    ck_assert_int_eq(pagoda_config_validate_section(c, "scheduler.s", NULL, g_err, sizeof g_err),
                     PAGODA_ERR_INVALID);
    assert_at(g_err, 2, "unknown key 'foo' in [scheduler.s]; did you mean 'path'? (valid keys: path)");
    pagoda_config_free(c);
}
END_TEST

START_TEST(test_parsers)
{
    uint64_t s;
    struct { const char *in; uint64_t want; } good[] = {
        { "4096", 4096 }, { "1K", 1024 }, { "512M", 536870912ull }, { "8G", 8589934592ull },
        { "1.5G", 1610612736ull }, { "8GiB", 8589934592ull }, { "2gb", 2147483648ull },
        { "1T", 1099511627776ull }, { "0", 0 },
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        ck_assert_msg(pagoda_parse_size(good[i].in, &s) == 0, "%s", good[i].in);
        ck_assert_uint_eq(s, good[i].want);
    }
    const char *bad[] = { "", "-1", "1.5", "G", "12Q", "1GG", "abc", " 1G" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(pagoda_parse_size(bad[i], &s) == -1, "'%s' parsed", bad[i]);
    int64_t v;
    ck_assert_int_eq(pagoda_parse_int("-42", &v), 0);
    ck_assert_int_eq(v, -42);
    ck_assert_int_eq(pagoda_parse_int("4.2", &v), -1);
    ck_assert_int_eq(pagoda_parse_int("", &v), -1);
    double d;
    ck_assert_int_eq(pagoda_parse_float("2.5e-1", &d), 0);
    ck_assert_double_eq_tol(d, 0.25, 1e-12);
    ck_assert_int_eq(pagoda_parse_float("nan", &d), -1);
    bool b;
    ck_assert_int_eq(pagoda_parse_bool("On", &b), 0);
    ck_assert(b);
    ck_assert_int_eq(pagoda_parse_bool("no", &b), 0);
    ck_assert(!b);
    ck_assert_int_eq(pagoda_parse_bool("2", &b), -1);
    ck_assert_uint_eq(pagoda_levenshtein("kitten", "sitting"), 3);
    ck_assert_uint_eq(pagoda_levenshtein("", "abc"), 3);
    ck_assert_uint_eq(pagoda_levenshtein("same", "same"), 0);
    const char *cands[] = { "threads", "scratch", "fast" };
    ck_assert_str_eq(pagoda_closest("thread", cands, 3), "threads");
    ck_assert_str_eq(pagoda_closest("fats", cands, 3), "fast");
    const char *ek[] = { "seed", "block_size", "top_k" };
    ck_assert_str_eq(pagoda_closest("blok", ek, 3), "block_size");
    ck_assert_ptr_null(pagoda_closest("x", cands, 0));
}
END_TEST


/* err starts with "FILE:LINE: " + rest (the plugin lists that follow depend
 * on the build). */
static void assert_at_prefix(const char *err, int line, const char *rest)
{
    char want[4096];
    snprintf(want, sizeof want, "%s:%d: %s", g_path, line, rest);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "got '%s'\nwant '%s...'", err, want);
}

static const char *check_err(const char *text)
{
    pagoda_config *c = load_ok(text);
    int st = pagoda_config_check_plugins(c, g_err, sizeof g_err);
    pagoda_config_free(c);
    ck_assert_msg(st != PAGODA_OK, "expected a check error for:\n%s", text);
    return g_err;
}

START_TEST(test_check_plugins)
{
    /* a misspelled section is named with its line and the closest plugin */
    assert_at_prefix(check_err("[engine]\nfrontend = http\n\n[frontend.htp]\nport = 9000\n"), 4,
                     "[frontend.htp]: there is no frontend plugin 'htp'; did you mean "
                     "[frontend.http]? (frontend plugins: ");
    assert_at_prefix(check_err("[backend.cpuu]\nthreads = 2\n"), 1,
                     "[backend.cpuu]: there is no backend plugin 'cpuu'; did you mean [backend.cpu]?");
    /* a plugin key's typo, in a plugin in use and in one that is not */
    /* (a prefix: the HTTP frontend's key list grows) */
    assert_at_prefix(check_err("[engine]\nbackend = cpu\n[frontend.http]\nhost = 127.0.0.1\nprot = 8080\n"),
                     5, "unknown key 'prot' in [frontend.http]; did you mean 'port'? (valid keys: "
                     "host, port, ");
    assert_at_prefix(check_err("[frontend.stdin]\nmod = chat\n"), 2,
                     "unknown key 'mod' in [frontend.stdin]; did you mean 'mode'?");
    assert_at(check_err("[backend.cpu]\nthreads = 999\n"), 2,
              "bad value for backend.cpu.threads: '999'; expected an integer from 0 to 256");
    /* a plugin name in [engine] that names no plugin */
    assert_at_prefix(check_err("[engine]\nbackend = cpu\nfrontend = htp\n"), 3,
                     "engine.frontend = htp: no frontend plugin 'htp': looked for frontend-htp.so in ");
    ck_assert_ptr_nonnull(strstr(g_err, "did you mean 'http'?"));
    /* a section named only by --set */
    pagoda_config *c = pagoda_config_new_empty();
    ck_assert_int_eq(pagoda_config_set(c, "frontend.htp.port=1", g_err, sizeof g_err), PAGODA_OK);
    ck_assert_int_ne(pagoda_config_check_plugins(c, g_err, sizeof g_err), PAGODA_OK);
    ck_assert_msg(strncmp(g_err, "--set: [frontend.htp]: there is no frontend plugin 'htp'; did "
                                 "you mean [frontend.http]?", 75) == 0, "%s", g_err);
    pagoda_config_free(c);
    /* good sections pass; so do the shipped configs that run on the CPU */
    c = load_ok("[engine]\nscheduler = continuous\n[scheduler.continuous]\nmax_num_seqs = 4\n"
                "[frontend.stdin]\nmode = chat\n[backend.cpu]\nthreads = 1\n");
    ck_assert_msg(pagoda_config_check_plugins(c, g_err, sizeof g_err) == PAGODA_OK, "%s", g_err);
    pagoda_config_free(c);
    const char *shipped[] = {"default.ini", "cpu-ci.ini", "chat.ini", "gemma3.ini"};
    for (size_t i = 0; i < sizeof shipped / sizeof shipped[0]; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/configs/%s", PAGODA_TEST_SOURCE_DIR, shipped[i]);
        c = pagoda_config_load(p, g_err, sizeof g_err);
        ck_assert_msg(c != NULL, "%s: %s", p, g_err);
        ck_assert_msg(pagoda_config_check_plugins(c, g_err, sizeof g_err) == PAGODA_OK, "%s: %s", p,
                      g_err);
        pagoda_config_free(c);
    }
}
END_TEST

/* Parse a serve command line (words split on spaces) into a, applied to c. */
static int flags_run(const char *line, pagoda_serve_args *a, pagoda_config *c)
{
    static char buf[1024];
    static char *argv[64];
    snprintf(buf, sizeof buf, "%s", line);
    int argc = 0;
    for (char *save = NULL, *t = strtok_r(buf, " ", &save); t && argc < 63;
         t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    int st = pagoda_serve_args_parse(argc, argv, 0, a, g_err, sizeof g_err);
    if (st == PAGODA_OK && c) st = pagoda_serve_args_apply(a, c, g_err, sizeof g_err);
    return st;
}

START_TEST(test_short_flags)
{
    pagoda_serve_args a;
    pagoda_config *c = pagoda_config_new_empty();
    ck_assert_msg(flags_run("m.gguf --port 8081 --host 0.0.0.0 -c 4096 -np 8 -t 2 --api-key s3cret "
                            "--temp 0 -n 32 --seed 7 --alias smol", &a, c) == PAGODA_OK, "%s", g_err);
    ck_assert_ptr_null(a.config_path);
    ck_assert(a.model_given);
    ck_assert_str_eq(pagoda_config_get(c, "engine", "model"), "m.gguf");
    ck_assert_str_eq(pagoda_config_get(c, "frontend.http", "port"), "8081");
    ck_assert_str_eq(pagoda_config_get(c, "frontend.http", "host"), "0.0.0.0");
    ck_assert_str_eq(pagoda_config_get(c, "engine", "max_seq_len"), "4096");
    ck_assert_str_eq(pagoda_config_get(c, "scheduler.continuous", "max_num_seqs"), "8");
    ck_assert_str_eq(pagoda_config_get(c, "backend.cpu", "threads"), "2");
    ck_assert_str_eq(pagoda_config_get(c, "frontend.http", "api_key"), "s3cret");
    ck_assert_str_eq(pagoda_config_get(c, "engine", "temperature"), "0");
    ck_assert_str_eq(pagoda_config_get(c, "engine", "default_max_tokens"), "32");
    ck_assert_str_eq(pagoda_config_get(c, "engine", "seed"), "7");
    ck_assert_str_eq(pagoda_config_get(c, "frontend.http", "served_model_name"), "smol");
    /* every key the flags wrote is one the plugins have */
    ck_assert_msg(pagoda_config_check_plugins(c, g_err, sizeof g_err) == PAGODA_OK, "%s", g_err);
    pagoda_serve_args_free(&a);
    pagoda_config_free(c);

    /* vllm's spellings, --flag=value, and a plugin key that follows [engine] */
    c = pagoda_config_new_empty();
    ck_assert_msg(flags_run("--model=x.gguf --max-model-len 2048 --max-num-seqs=3 --set "
                            "engine.scheduler=priority --block-size 32 --gpu-memory-utilization 0.5 "
                            "-tp 2 --served-model-name m", &a, c) == PAGODA_OK, "%s", g_err);
    ck_assert_str_eq(pagoda_config_get(c, "engine", "model"), "x.gguf");
    ck_assert_str_eq(pagoda_config_get(c, "engine", "max_seq_len"), "2048");
    ck_assert_str_eq(pagoda_config_get(c, "scheduler.priority", "max_num_seqs"), "3");
    ck_assert_ptr_null(pagoda_config_get(c, "scheduler.continuous", "max_num_seqs"));
    ck_assert_str_eq(pagoda_config_get(c, "engine", "block_size"), "32");
    ck_assert_str_eq(pagoda_config_get(c, "engine", "gpu_memory_utilization"), "0.5");
    ck_assert_str_eq(pagoda_config_get(c, "engine", "tensor_parallel"), "2");
    pagoda_serve_args_free(&a);
    pagoda_config_free(c);

    /* -c FILE is still --config; -s is --set */
    ck_assert_int_eq(flags_run("-c my.ini -s engine.seed=3", &a, NULL), PAGODA_OK);
    ck_assert_str_eq(a.config_path, "my.ini");
    ck_assert_int_eq(a.n, 1);
    ck_assert_ptr_null(a.a[0].flag);
    ck_assert_str_eq(a.a[0].text, "engine.seed=3");
    pagoda_serve_args_free(&a);
    ck_assert_int_eq(flags_run("--help", &a, NULL), PAGODA_OK);
    ck_assert(a.help);
    pagoda_serve_args_free(&a);

    /* refusals, each naming the flag */
    struct { const char *line; const char *msg; } bad[] = {
        {"--prot 8080", "unknown argument '--prot'; did you mean '--port'? (see pagoda --help)"},
        {"--port", "--port needs a value (see pagoda --help)"},
        {"a.gguf b.gguf", "unexpected argument 'b.gguf': the model is given already (one "
                          "MODEL.gguf; other settings are flags, see pagoda --help)"},
        {"a.gguf -m b.gguf", "the model is given twice (MODEL, -m or --model once)"},
        {"-c a.ini --config b.ini", "--config given twice ('a.ini' and 'b.ini')"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(flags_run(bad[i].line, &a, NULL), PAGODA_ERR_INVALID);
        ck_assert_str_eq(g_err, bad[i].msg);
        pagoda_serve_args_free(&a);
    }
    c = pagoda_config_new_empty();
    ck_assert_int_eq(flags_run("--ctx-size lots", &a, c), PAGODA_ERR_INVALID);
    ck_assert_str_eq(g_err, "--ctx-size lots (engine.max_seq_len): bad value for "
                            "engine.max_seq_len: 'lots'; expected an integer from 0 to 16777216");
    pagoda_serve_args_free(&a);
    pagoda_config_free(c);
    /* a plugin key's bad value is the plugin section's check, before loading */
    c = pagoda_config_new_empty();
    ck_assert_int_eq(flags_run("--port 70000", &a, c), PAGODA_OK);
    ck_assert_int_ne(pagoda_config_check_plugins(c, g_err, sizeof g_err), PAGODA_OK);
    ck_assert_str_eq(g_err, "--set: bad value for frontend.http.port: '70000'; expected an "
                            "integer from 0 to 65535");
    pagoda_serve_args_free(&a);
    pagoda_config_free(c);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("config");
    TCase *t = tcase_create("config");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, test_parse_values_and_lines);
    tcase_add_test(t, test_engine_defaults);
    tcase_add_test(t, test_engine_values);
    tcase_add_test(t, test_model_path_resolution);
    tcase_add_test(t, test_unknown_section);
    tcase_add_test(t, test_unknown_engine_key);
    tcase_add_test(t, test_bad_engine_values);
    tcase_add_test(t, test_syntax_errors);
    tcase_add_test(t, test_long_line);
    tcase_add_test(t, test_long_section_header);
    tcase_add_test(t, test_set_overrides);
    tcase_add_test(t, test_validate_section);
    tcase_add_test(t, test_parsers);
    tcase_add_test(t, test_check_plugins);
    tcase_add_test(t, test_short_flags);
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return tu_run(suite()); }
