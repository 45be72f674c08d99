#!/usr/bin/env bash
# peer_bench.sh: pagoda's single-stream decode and 512-token prefill beside
# llama.cpp's llama-bench on the same GGUF files, side by side: the two
# tools take turns (pagoda, then llama-bench, for each thread count, round
# after round) and the best of each is kept, with the load average
# recorded before every run (docs/benchmarks.md, "Issue 14").
#
#   docs/examples/peer_bench.sh [--rounds 3] [--threads "1 2"] [--out DIR] \
#       PAGODA LLAMA_BENCH MODEL.gguf...
#
# PAGODA is the pagoda binary (build/core/pagoda), LLAMA_BENCH the peer's
# llama-bench, built elsewhere: this script builds nothing. Per model,
# thread count T and round:
#
#   PAGODA bench --model M --roofline --threads T --set backend.cpu.threads=T \
#       --requests 1 --concurrency 1 --prompt-len 16 --output-len 4 \
#       --decode-tokens 64 --prefill-tokens 512
#   LLAMA_BENCH -m M -p 512 -n 64 -t T -r 1 -o csv
#
# pagoda's decode is the tokens after the first of a 64-token greedy
# generation (16-token prompt) over their time; its prefill a 512-token
# prompt over its time to first token. llama-bench's tg64 and pp512 are 64
# decode steps from an empty context and one 512-token batch. Both use an
# F16 KV cache and their own warm-up. Best of the rounds: on a shared
# machine other work only ever slows a run down.
#
# Writes DIR/raw.tsv (one line per figure: tool, model, threads, round,
# test, tok/s, load average before the run) and DIR/*.log (each run's
# output), and prints a Markdown table. Not for: anything but this
# comparison (no batching, no serving; `pagoda bench --help` for those).
set -u

rounds=3
threads="1 2"
out=""
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --*) echo "peer_bench.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
if [ $# -lt 3 ]; then
    echo "usage: peer_bench.sh [--rounds N] [--threads \"1 2\"] [--out DIR] PAGODA LLAMA_BENCH MODEL..." >&2
    exit 2
fi
pagoda="$1"; llama="$2"; shift 2
for f in "$pagoda" "$llama"; do
    [ -x "$f" ] || { echo "peer_bench.sh: $f is not an executable" >&2; exit 2; }
done
for m in "$@"; do
    [ -r "$m" ] || { echo "peer_bench.sh: cannot read $m" >&2; exit 2; }
done
[ -n "$out" ] || out=$(mktemp -d /tmp/peer-bench.XXXXXX)
mkdir -p "$out" || exit 2
raw="$out/raw.tsv"
: > "$raw"

load1() { cut -d' ' -f1 /proc/loadavg; }

run_pagoda() { # model threads round
    local m="$1" t="$2" r="$3" name log ld
    name=$(basename "$m" .gguf)
    log="$out/pagoda-$name-t$t-r$r.log"
    ld=$(load1)
    "$pagoda" bench --model "$m" --roofline --threads "$t" --set backend.cpu.threads="$t" \
        --requests 1 --concurrency 1 --prompt-len 16 --output-len 4 \
        --decode-tokens 64 --prefill-tokens 512 > "$log" 2>&1
    # "  run        decode     9.1 tok/s   bound ..." / "... prefill    37.5 tok/s ... (512-token prompt)"
    awk -v n="$name" -v t="$t" -v r="$r" -v ld="$ld" '
        $2 == "decode" && $4 == "tok/s" { print "pagoda\t" n "\t" t "\t" r "\tdecode\t" $3 "\t" ld }
        $2 == "prefill" && $4 == "tok/s" { print "pagoda\t" n "\t" t "\t" r "\tprefill\t" $3 "\t" ld }
    ' "$log" >> "$raw"
    grep -q "prefill" "$log" || echo "peer_bench.sh: pagoda gave no figures, see $log" >&2
    # a model whose context is under 514 tokens gets a shorter prompt
    grep -q "(512-token prompt)" "$log" || echo "peer_bench.sh: pagoda's prefill was not 512 tokens, see $log" >&2
}

run_llama() { # model threads round
    local m="$1" t="$2" r="$3" name log ld
    name=$(basename "$m" .gguf)
    log="$out/llama-$name-t$t-r$r.log"
    ld=$(load1)
    "$llama" -m "$m" -p 512 -n 64 -t "$t" -r 1 -o csv > "$log" 2> "$log.err"
    # the CSV's columns by their header names: n_prompt, n_gen, avg_ts
    awk -F, -v n="$name" -v t="$t" -v r="$r" -v ld="$ld" '
        { for (i = 1; i <= NF; i++) gsub(/"/, "", $i) }
        NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        col["avg_ts"] {
            test = $col["n_prompt"] > 0 ? "prefill" : "decode"
            print "llama.cpp\t" n "\t" t "\t" r "\t" test "\t" $col["avg_ts"] "\t" ld
        }
    ' "$log" >> "$raw"
    [ -s "$log" ] || echo "peer_bench.sh: llama-bench gave no figures, see $log.err" >&2
}

echo "peer_bench.sh: $(date -u +%FT%TZ) $(nproc) CPUs, rounds $rounds, threads $threads; logs in $out" >&2
for r in $(seq 1 "$rounds"); do
    for m in "$@"; do
        for t in $threads; do
            echo "round $r: $(basename "$m") -t $t (load $(load1))" >&2
            run_pagoda "$m" "$t" "$r"
            run_llama "$m" "$t" "$r"
        done
    done
done

# best of the rounds, per model x threads x test, with the load range of
# the runs
awk -F'\t' '
    {
        k = $2 SUBSEP $3 SUBSEP $5; key[k] = 1
        if (!(($1, k) in best) || $6 > best[$1, k]) { best[$1, k] = $6; bl[$1, k] = $7 }
        if (!(k in lo) || $7 < lo[k]) lo[k] = $7
        if (!(k in hi) || $7 > hi[k]) hi[k] = $7
    }
    END {
        print "| model | threads | test | pagoda tok/s (load) | llama.cpp tok/s (load) | pagoda / llama.cpp | load range |"
        print "|---|---|---|---|---|---|---|"
        n = 0
        for (k in key) ks[++n] = k
        # a stable order: model, threads, then decode before prefill
        for (i = 2; i <= n; i++) { v = ks[i]; j = i - 1; while (j > 0 && ks[j] > v) { ks[j + 1] = ks[j]; j-- } ks[j + 1] = v }
        for (i = 1; i <= n; i++) {
            split(ks[i], p, SUBSEP)
            a = best["pagoda", ks[i]]; b = best["llama.cpp", ks[i]]
            ratio = (a > 0 && b > 0) ? sprintf("%.2fx", a / b) : "-"
            printf "| %s | %s | %s | %.1f (%s) | %.1f (%s) | %s | %s-%s |\n", p[1], p[2], \
                p[3] == "prefill" ? "prefill 512" : "decode 64", a, bl["pagoda", ks[i]], b, \
                bl["llama.cpp", ks[i]], ratio, lo[ks[i]], hi[ks[i]]
        }
    }
' "$raw" | tee "$out/table.md"
