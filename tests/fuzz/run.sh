#!/usr/bin/env bash
# run.sh BUILD_DIR SECONDS [NAME...]: runs each libFuzzer harness of
# tests/fuzz for SECONDS (default: all six), one after the other, from the
# committed seeds (corpus/NAME, read only) plus what earlier runs found
# (BUILD_DIR/fuzz-corpus/NAME, where new inputs go). A crash, a leak, a
# sanitizer report or a harness check stops the run: the input is saved as
# BUILD_DIR/fuzz-artifacts/NAME-crash-*, to be turned into a unit test.
# Prints one line per harness: runs, executions per second, coverage.
set -euo pipefail
build=${1:?usage: run.sh BUILD_DIR SECONDS [NAME...]}
secs=${2:?usage: run.sh BUILD_DIR SECONDS [NAME...]}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(gguf tokenizer chat http_body http_frame config)
mkdir -p "$build/fuzz-artifacts"
export PAGODA_SOURCE_DIR=${PAGODA_SOURCE_DIR:-$(cd "$here/../.." && pwd)}
# leaks are errors; an input may take at most 10 s and 2 GiB
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for n in "${names[@]}"; do
    bin=$build/tests/fuzz/fuzz_$n
    [ -x "$bin" ] || { echo "fuzz: $bin not built (make fuzz builds it)"; exit 2; }
    mkdir -p "$build/fuzz-corpus/$n"
    log=$build/fuzz-artifacts/$n.log
    if "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/$n-" \
        "$build/fuzz-corpus/$n" "$here/corpus/$n" >"$log" 2>&1; then
        runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
        eps=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo '?')
        echo "fuzz_$n: ok, $runs inputs in ${secs} s ($eps/s), coverage $cov edges"
    else
        echo "fuzz_$n: FAILED (log: $log)"
        grep -E 'ERROR|SUMMARY|==[0-9]+==|abort|Test unit written' "$log" | head -20
        status=1
    fi
done
exit $status
