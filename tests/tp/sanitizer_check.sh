# sanitizer_check.sh: sourced by the tests/tp scripts (not a test: the
# CMakeLists runs tp/*.sh, and this file exits at once when run, it only
# defines what follows). Under an ASan+UBSan build (PAGODA_SANITIZE=ON) a
# rank that leaks, overflows or hits undefined behaviour prints a report,
# and exits non-zero, but the scripts stop their servers with SIGTERM and
# judge them by their answers, and mpirun may cut short what a rank prints
# as the job ends: a report would pass unseen. So, when sourced (after the
# script has made its $tmp), every sanitizer report of every process the
# script starts (each rank, each launch, and the one-process runs) is
# written to a file of its own, $tmp/sanitizer/report.PID, through
# ASAN_OPTIONS / UBSAN_OPTIONS log_path (appended to what the caller set, so
# detect_leaks and the rest are kept), and tp_check_sanitizer_reports looks
# there as well as in the logs it is given. On a build without sanitizers
# nothing reads those variables and no report is ever written. The tp
# tests are not in `make test-asan` (-L unit): docs/scaling.md says how to
# run them on an ASan build.
# Not for: the unit tests under ASan (make test-asan), which fail on their
# own exit status.
[ "${BASH_SOURCE[0]}" = "$0" ] && { echo "sanitizer_check.sh is sourced by tests/tp/*.sh, not run"; exit 2; }

tp_sanitizer_dir="${tmp:?sanitizer_check.sh: source it after making \$tmp}/sanitizer"
mkdir -p "$tp_sanitizer_dir"
# fast_unwind_on_malloc=0: Open MPI is built without frame pointers, so
# the fast unwinder stops in its first frame, often in a component it
# unloads before exit (an unknown module then); the full stack reaches
# libmpi, which lsan.supp names. Open MPI's own leaks at exit are not ours.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0:log_path=$tp_sanitizer_dir/report"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}log_path=$tp_sanitizer_dir/report"
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lsan.supp:print_suppressions=0"
# mpirun (Open MPI 4) ends a job with SIGCONT, then SIGTERM, then SIGKILL,
# odls_base_sigkill_timeout (1 s) apart: an ASan rank's exit after the
# SIGTERM (the leak scan: 1.3-1.5 s seen on a loaded 2-core host) can take
# longer, and a rank killed first writes no report. On an ASan build the
# stages are 4 s apart (a stop then takes up to 8 s, within the scripts'
# 15 s waits); a Release build keeps mpirun's default.
if ldd "${PAGODA_BIN:?}" 2>/dev/null | grep -q libasan; then
    export OMPI_MCA_odls_base_sigkill_timeout=4
fi

# tp_check_sanitizer_reports LOGFILE...: 1 (and the start of each report
# on stdout) when one of the LOGFILEs, or a report file of a process this
# script started, holds an AddressSanitizer, LeakSanitizer or
# UndefinedBehaviorSanitizer report; 0 otherwise. Missing files are
# skipped (a log a failed launch never wrote).
tp_check_sanitizer_reports() {
    local f found=0 pat='ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:'
    for f in "$@" "$tp_sanitizer_dir"/report*; do
        [ -f "$f" ] || continue
        grep -Eq "$pat" "$f" || continue
        echo "sanitizer report in $f:"
        grep -E -m3 -A15 "$pat" "$f" | head -60
        found=1
    done
    return "$found"
}
