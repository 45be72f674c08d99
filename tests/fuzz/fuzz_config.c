/* fuzz_config.c: libFuzzer harness for the INI config reader
 * (core/config/): the bytes as a config file (through a memfd, as
 * pagoda --config reads a file), then the [engine] values, every entry,
 * and a plugin section validated against a key table of every type; and
 * each line as a --set override on an empty config.
 * Not for: plugin loading (the loader's checks are in test_loader). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"
#include "log.h"

static const pagoda_config_key keys[] = {
    {"s", PAGODA_KEY_STRING, "", 0, 0, "a string"},
    {"i", PAGODA_KEY_INT, "1", -5, 100, "an int"},
    {"f", PAGODA_KEY_FLOAT, "0.5", 0, 2, "a float"},
    {"b", PAGODA_KEY_BOOL, "false", 0, 0, "a bool"},
    {"z", PAGODA_KEY_SIZE, "1M", 1024, 1e12, "a size"},
    {NULL, 0, NULL, 0, 0, NULL},
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    FILE *null = fopen("/dev/null", "w"); /* warnings would flood the fuzzer's output */
    if (null) pagoda_log_set_stream(null);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz.ini", MFD_CLOEXEC);
    if (fd < 0) return 0;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64], err[2048];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    pagoda_config *c = pagoda_config_load(path, err, sizeof err);
    if (c) {
        pagoda_engine_config ec;
        (void)pagoda_config_engine(c, &ec, err, sizeof err);
        const char *sec, *key, *val;
        for (size_t i = 0; pagoda_config_entry(c, i, &sec, &key, &val); i++) {
            char where[256];
            (void)pagoda_config_where(c, sec, key, where, sizeof where);
            (void)pagoda_config_validate_section(c, sec, keys, err, sizeof err);
        }
        pagoda_config_free(c);
    }
    close(fd);
    /* each line as a --set */
    pagoda_config *e = pagoda_config_new_empty();
    if (!e) return 0;
    char *s = malloc(size + 1);
    if (s) {
        memcpy(s, data, size);
        s[size] = 0;
        for (char *line = s, *nl; line; line = nl) {
            nl = strchr(line, '\n');
            if (nl) *nl++ = 0;
            (void)pagoda_config_set(e, line, err, sizeof err);
        }
        (void)pagoda_config_validate_section(e, "frontend.x", keys, err, sizeof err);
        free(s);
    }
    pagoda_config_free(e);
    return 0;
}
